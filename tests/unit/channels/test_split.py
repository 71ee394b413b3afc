"""Long replies split within Telegram's limit, at sensible boundaries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fiduciary.channels import TELEGRAM_LIMIT, split_message
from fiduciary.channels.split import utf16_length


def test_short_text_is_one_message_and_blank_is_none() -> None:
    assert split_message("  hello  ") == ["hello"]
    assert split_message(" \n ") == []


def test_paragraphs_before_lines_before_sentences_before_words() -> None:
    assert split_message("aaaa bbbb\n\ncccc", limit=12) == ["aaaa bbbb", "cccc"]
    assert split_message("aaaa\nbbbb cccc", limit=12) == ["aaaa", "bbbb cccc"]
    assert split_message("Aaa. Bbb ccc", limit=10) == ["Aaa.", "Bbb ccc"]
    assert split_message("aaaa bbbb cccc", limit=10) == ["aaaa bbbb", "cccc"]
    assert split_message("a" * 25, limit=10) == ["a" * 10, "a" * 10, "a" * 5]


def test_the_limit_counts_utf16_units_and_never_splits_a_character() -> None:
    pieces = split_message("😀" * 5000)
    assert [utf16_length(p) for p in pieces] == [4096, 4096, 1808]
    assert "".join(pieces) == "😀" * 5000


@given(st.text(alphabet=st.sampled_from(["a", "b", " ", "\n", ".", "😀", "é"]), max_size=400))
def test_every_piece_fits_and_nothing_but_whitespace_is_lost(text: str) -> None:
    pieces = split_message(text, limit=16)
    assert all(0 < utf16_length(p) <= 16 for p in pieces)
    assert "".join("".join(pieces).split()) == "".join(text.split())


def test_the_default_limit_is_telegrams() -> None:
    assert TELEGRAM_LIMIT == 4096

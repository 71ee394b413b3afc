"""``StreamRedactor``: a stream cut anywhere is redacted as the whole text is."""

from __future__ import annotations

import pytest

from fiduciary import Redactor
from fiduciary._loop.stream_redaction import StreamRedactor

REDACTOR = Redactor(known_secrets=["held-secret-CANARY-4242"])
TEXT = (
    "Your key is sk-live-CANARY0123456789abcdefghij, keep it safe.\n"
    "Authorization: Bearer CANARYbearer0123456789abcdef\n"
    "password: my CANARY pass phrase\n"
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowCANARYbody\nmore CANARY body\n"
    "-----END RSA PRIVATE KEY-----\n"
    "the vault holds held-secret-CANARY-4242 and https://bob:CANARYpw@bank.example/x today\n"
    "That is all."
)


def streamed(text: str, size: int) -> tuple[str, list[str]]:
    stream = StreamRedactor(REDACTOR.redact_text)
    pieces = [stream.feed(text[i : i + size]) for i in range(0, len(text), size)]
    pieces.append(stream.flush())
    return "".join(pieces), [p for p in pieces if p]


@pytest.mark.parametrize("size", [*range(1, 13), 50, len(TEXT)])
def test_a_stream_cut_anywhere_is_redacted_as_the_whole_text(size: int) -> None:
    joined, pieces = streamed(TEXT, size)
    assert joined == REDACTOR.redact_text(TEXT)
    assert "CANARY" not in joined
    assert joined.endswith("That is all.")
    if size < 20:  # it streams: text comes out before the end, not all at once
        assert len(pieces) > 5


def test_a_words_last_piece_is_held_and_a_discarded_stream_emits_nothing() -> None:
    stream = StreamRedactor(REDACTOR.redact_text)
    assert stream.feed("Hello wor") == "Hello "  # "wor" may be the start of a secret
    assert stream.feed("ld, here sk-live-CAN") == "world, here "
    stream.discard()  # a retracted turn: what it held never comes out
    assert stream.flush() == ""
    assert stream.feed("again.") == ""
    assert stream.flush() == "again."

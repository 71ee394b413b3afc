"""What a card shows is what the value holds: invisible and direction-changing characters made
visible and flagged, mixed scripts flagged, amounts written in full."""

from __future__ import annotations

import unicodedata
from decimal import Decimal

import pytest

from fiduciary.display import (
    card_flags,
    hidden_characters,
    show_amount,
    show_balance,
    show_text,
    show_usd,
    show_usd_cents,
    show_value,
    worth_decimals,
)


def kinds(text: str) -> set[str]:
    return {f.kind for f in show_text(text).flags}


def test_a_bidi_override_is_shown_as_an_escape_and_flagged() -> None:
    shown = show_text("alice\u202eecila-evil\u202c")
    assert shown.text == "alice⟨U+202E⟩ecila-evil⟨U+202C⟩"
    assert kinds("alice\u202eecila-evil\u202c") == {"bidi"}
    assert shown.warning == "direction-changing characters U+202E, U+202C"


@pytest.mark.parametrize(
    "char",
    ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u3164", "\ufe0f", "\u00a0"],
)
def test_zero_width_and_blank_characters_are_shown_and_flagged(char: str) -> None:
    shown = show_text(f"ali{char}ce")
    assert shown.text == f"ali⟨U+{ord(char):04X}⟩ce"
    assert kinds(f"ali{char}ce") == {"invisible"}


@pytest.mark.parametrize("char", ["\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f"])
def test_isolates_and_marks_are_bidi(char: str) -> None:
    assert kinds(f"a{char}b") == {"bidi"}


def test_line_breaks_and_controls_are_visible() -> None:
    shown = show_text("a\nb\tc\u2028d")
    assert shown.text == "a⟨U+000A⟩b⟨U+0009⟩c⟨U+2028⟩d"
    assert kinds("a\nb") == {"control"}


def test_no_shown_text_holds_a_character_a_screen_hides() -> None:
    sample = "".join(chr(c) for c in range(0x0, 0x3000))
    for char in show_text(sample).text:
        category = unicodedata.category(char)
        assert category not in ("Cc", "Cf", "Zl", "Zp", "Cn", "Co", "Cs"), hex(ord(char))
        assert category != "Zs" or char == " ", hex(ord(char))


def test_a_literal_escape_cannot_pass_for_one() -> None:
    assert show_text("⟨U+202E⟩").text == "⟨U+27E8⟩U+202E⟩"
    assert show_text("⟨U+202E⟩").flags == ()


def test_a_cyrillic_letter_in_a_latin_word_is_flagged() -> None:
    shown = show_text("pay \u0430lice now")  # Cyrillic а
    assert shown.text == "pay \u0430lice now"  # drawn as is: the flag says what it is
    assert kinds("pay \u0430lice now") == {"mixed_script"}
    assert shown.warning == "\u0430lice mixes Cyrillic and Latin letters"
    assert kinds("\u03bfmega") == {"mixed_script"}  # Greek ο


def test_plain_text_in_one_script_is_not_flagged() -> None:
    for text in ["alice", "Алиса", "Ωμέγα", "café 42", "Zoë O'Neil-Smith", "東京 tokyo"]:
        assert show_text(text).flags == (), text
        assert show_text(text).text == text


def test_compatibility_letters_are_flagged() -> None:
    assert kinds("\U0001d41alice") == {"lookalike"}  # mathematical bold a
    assert kinds("\uff41lice") == {"lookalike"}  # fullwidth a


def test_amounts_are_plain_decimals() -> None:
    assert show_amount(Decimal("1.5E+2")) == "150"
    assert show_amount(Decimal("1E-7")) == "0.0000001"
    assert show_usd(Decimal("1.5E+2")) == "$150.00"
    assert show_usd(Decimal("1234567.891")) == "$1,234,567.891"  # never rounded
    assert show_usd(Decimal("-42.5")) == "-$42.50"
    assert show_usd(None) == "unknown"
    assert "E" not in show_usd(Decimal("1E+999"))
    assert len(show_usd(Decimal("1E+999"))) < 80
    assert show_usd(Decimal("-Infinity")) == "-Infinity"


def test_arguments_are_shown_field_by_field_with_their_flags() -> None:
    shown = show_value(
        {"to": "alice\u202eecila-evil\u202c", "amount": "1.5E+2", "memo": "a\nb", "n": [1, None]}
    )
    assert shown.text == (
        '{"to": "alice⟨U+202E⟩ecila-evil⟨U+202C⟩", "amount": "150", '
        '"memo": "a⟨U+000A⟩b", "n": [1, null]}'
    )
    assert [(f.kind, f.detail.split(":")[0]) for f in shown.flags] == [
        ("bidi", "to"),
        ("exponent", "amount"),
        ("control", "memo"),
    ]


def test_hidden_characters_lists_code_points() -> None:
    assert hidden_characters("a\u202eb\u200bc\u202e") == ["U+202E", "U+200B"]
    assert hidden_characters("0xabc") == []


def test_a_number_in_exponent_notation_inside_text_is_flagged_with_its_value() -> None:
    shown = show_text("Pay 1.5E+2 USD to bob, ref A1E5.")
    assert shown.text == "Pay 1.5E+2 USD to bob, ref A1E5."
    assert shown.warning == "1.5E+2 is 150 written in exponent notation"


def test_a_card_adds_the_description_flags_its_arguments_did_not_raise() -> None:
    args = show_value({"to": "al\u200bice", "amount": "1.5E+2"})
    flags = card_flags("Pay 1.5E+2 to al\u200bice", args)
    assert [f.detail for f in flags] == [
        "to: invisible character U+200B",
        "amount: 1.5E+2 is a number in exponent notation: shown in full",
        "action: 1.5E+2 is 150 written in exponent notation",
    ]


# (amount, its USD value or None, shown): the console's balances panel shows the same
BALANCES = [
    ("150.000000000", "525.00", "150"),  # SUI at $3.50: not 150.000000000
    ("1000.000000", "1000.00", "1,000.00"),  # a dollar coin keeps its cents
    ("0.50000000", "1678.96", "0.5"),
    ("0.123456789", "11728.40", "0.1234568"),  # BTC: a cent is the 7th decimal
    ("149.9996", "524.99", "150"),  # rounded half-even at a cent's worth
    ("12345678.9", "12345678.9", "12,345,678.90"),
    ("-75.5", "-75.5", "-75.50"),
    ("1234.5678", "0.50", "1,235"),  # a token worth a fraction of a cent: whole units
    ("0.000000001", "0.000001", "0.000000001"),  # would round to 0: written in full
    ("120.00", None, "120"),  # no price: trailing zeros dropped, nothing rounded
    ("0.123456789", None, "0.123456789"),
    ("0", "0", "0"),
    ("1E+70", "1", "(a number of about 10^70, too long to write out)"),
]


@pytest.mark.parametrize(("amount", "usd", "shown"), BALANCES)
def test_a_balance_is_rounded_to_what_a_cent_is_worth(
    amount: str, usd: str | None, shown: str
) -> None:
    assert show_balance(Decimal(amount), None if usd is None else Decimal(usd)) == shown


def test_the_decimals_worth_a_cent_follow_the_price() -> None:
    assert worth_decimals(Decimal("1"), Decimal("1")) == 2
    assert worth_decimals(Decimal("1"), Decimal("3.50")) == 3
    assert worth_decimals(Decimal("1"), Decimal("95000")) == 7
    assert worth_decimals(Decimal("10"), Decimal("1")) == 1  # at exactly a tenth: no float error
    assert worth_decimals(Decimal("1"), None) is None
    assert worth_decimals(Decimal("0"), Decimal("1")) is None


USD_CENTS = [
    ("1234.565", "$1,234.56"),  # half-even, as the wallet rounds
    ("1234.575", "$1,234.58"),
    ("1E+3", "$1,000.00"),
    ("-12.5", "-$12.50"),
    ("0", "$0.00"),
    ("1E+80", "(a number of about 10^80, too long to write out)"),
]


@pytest.mark.parametrize(("value", "shown"), USD_CENTS)
def test_a_usd_value_is_shown_to_the_cent(value: str, shown: str) -> None:
    assert show_usd_cents(Decimal(value)) == shown
    assert show_usd_cents(None) == "unknown"

"""The terminal's approval card shows what the arguments hold, not what a terminal would draw."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import uuid4

from rich.console import Console

from fiduciary.cli import pending_card
from fiduciary.events import GuardNote, PendingAction


def card_text(args: dict[str, Any], *, amount: Decimal | None = Decimal("42.50")) -> str:
    event = PendingAction(
        run_id=uuid4(),
        seq=5,
        at=datetime(2026, 1, 1, tzinfo=UTC),
        approval_id=uuid4(),
        tool_use_id="t1",
        name="send_transfer",
        input=args,
        description=f"Send 40 USDC to {args['to']}",
        amount_usd=amount,
        tier="confirm",
        modifiable_fields=["amount"],
        guard_notes=[GuardNote(guard="recipient", verdict="warn", message=f"new: {args['to']}")],
        expires_at=datetime(2026, 1, 1, 1, tzinfo=UTC),
        args_digest="0" * 64,
    )
    out = Console(file=io.StringIO(), width=200, color_system=None)
    out.print(pending_card(event))
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(text, str)
    return text


def test_a_bidi_recipient_is_shown_escaped_and_flagged() -> None:
    text = card_text({"to": "alice\u202eecila-evil\u202c", "asset": "usdc", "amount": "40"})
    assert "\u202e" not in text
    assert "\u202c" not in text
    assert "alice⟨U+202E⟩ecila-evil⟨U+202C⟩" in text
    assert "look closely" in text
    assert "to: direction-changing characters U+202E, U+202C" in text


def test_zero_width_and_cyrillic_recipients_are_flagged() -> None:
    text = card_text({"to": "al\u200bice", "asset": "usdc", "amount": "40"})
    assert "\u200b" not in text
    assert "al⟨U+200B⟩ice" in text
    assert "to: invisible character U+200B" in text
    text = card_text({"to": "\u0430lice", "asset": "usdc", "amount": "40"})
    assert "to: \u0430lice mixes Cyrillic and Latin letters" in text


def test_amounts_in_exponent_notation_are_written_in_full() -> None:
    text = card_text({"to": "alice", "asset": "usdc", "amount": "1.5E+2"}, amount=Decimal("1.5E+2"))
    assert "$150.00" in text
    assert '"amount": "150"' in text
    assert "1.5E+2" in text  # named in the flag, so the person knows how it was written
    assert "$1.5E+2" not in text


def test_a_plain_card_has_no_flags() -> None:
    text = card_text({"to": "alice", "asset": "usdc", "amount": "40", "memo": "rent"})
    assert "look closely" not in text

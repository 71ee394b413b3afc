"""The terminal's approval card shows what the arguments hold, not what a terminal would draw."""

from __future__ import annotations

import asyncio
import io
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from rich.console import Console
from typer.testing import CliRunner

from fiduciary.cli.app import app
from fiduciary.cli.terminal import pending_card
from fiduciary.events import GuardNote, PendingAction
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, collect
from fiduciary.wallet import PaperWallet, build_wallet_agent
from fiduciary.wallet.addresses import address_of


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


async def _suspend_with_memo(db: Path, memo: str) -> UUID:
    """A wallet run waiting for its send, whose memo holds ``memo``."""
    to = address_of("bob")
    call = Call("send_transfer", {"to": to, "asset": "USDC", "amount": "75", "memo": memo})
    script = Script("go", [ToolCalls([Call("balance_check")]), ToolCalls([call]), Reply("ok")])
    store = SQLiteStore(db)
    try:
        with PaperWallet(db) as wallet:
            wallet.open("ann")
            agent = build_wallet_agent(store, wallet, model=ScriptedModel([script]))
            events = await collect(agent.run(f"go pay {to}", principal="ann"))
    finally:
        await store.close()
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    return pending.approval_id


def test_approvals_approve_shows_the_arguments_escaped_and_flagged(tmp_path: Path) -> None:
    db = tmp_path / "memo.sqlite3"
    approval_id = asyncio.run(_suspend_with_memo(db, "rent\u202e\u200b"))
    result = CliRunner().invoke(
        app, ["approvals", "approve", str(approval_id), "--by", "ann", "--db", str(db)]
    )
    assert result.exit_code == 0, result.output
    assert "\u202e" not in result.output
    assert "rent⟨U+202E⟩⟨U+200B⟩" in result.output
    assert "look closely: memo: direction-changing character U+202E" in result.output


def test_the_terminal_card_shows_the_guards_sentence_for_the_person() -> None:
    event = PendingAction(
        run_id=uuid4(),
        seq=5,
        at=datetime(2026, 1, 1, tzinfo=UTC),
        approval_id=uuid4(),
        tool_use_id="t1",
        name="wire",
        input={"to": "bob"},
        description="Wire to bob",
        amount_usd=Decimal("5"),
        tier="confirm",
        modifiable_fields=[],
        guard_notes=[
            GuardNote(
                guard="irreversibility",
                verdict="hint",
                message="state exactly what will happen",
                for_person="wire cannot be undone",
            )
        ],
        expires_at=datetime(2026, 1, 1, 1, tzinfo=UTC),
        args_digest="0" * 64,
    )
    out = Console(file=io.StringIO(), width=200, color_system=None)
    out.print(pending_card(event))
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert "[irreversibility] wire cannot be undone" in text
    assert "state exactly" not in text


def test_approvals_list_shows_the_guards_sentences_for_the_person(tmp_path: Path) -> None:
    db = tmp_path / "notes.sqlite3"
    approval_id = asyncio.run(_suspend_with_memo(db, "rent"))
    to = address_of("bob")
    person = (
        f"{to} is new to you: not a saved contact and never paid from this wallet. Compare it "
        "character by character with a source you trust before you approve."
    )
    model = "pasted messages are where scams come from"
    listed = CliRunner().invoke(app, ["approvals", "list", "--json", "--db", str(db)])
    assert listed.exit_code == 0, listed.output
    (row,) = [json.loads(line) for line in listed.output.splitlines()]
    assert row["approval_id"] == str(approval_id)
    assert {"guard": "new_recipient", "verdict": "warn", "message": person} in row["notes"]
    assert model not in listed.output
    table = CliRunner().invoke(app, ["approvals", "list", "--db", str(db)], env={"COLUMNS": "1000"})
    assert table.exit_code == 0, table.output
    assert person in table.output
    assert model not in table.output

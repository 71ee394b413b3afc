"""``fiduciary approvals regenerate ID``: the approval ends superseded, and the run, once
resumed, waits on a new one with a fresh quote; the terminal card lists a call's steps."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from pathlib import Path

from rich.console import Console

from fiduciary import Agent
from fiduciary.cli.terminal import pending_card
from fiduciary.events import Event, PendingAction
from fiduciary.steps import CardStep
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import collect
from fiduciary.wallet import PaperWallet
from tests.unit.wallet.test_regenerate import swap_agent

from .test_cli import approval, cli


async def _cards(db: Path, drive: Callable[[Agent], AsyncIterator[Event]]) -> list[PendingAction]:
    """The cards ``drive`` shows with the swap agent over the store and wallet in ``db``."""
    store = SQLiteStore(db)
    try:
        with PaperWallet(db) as wallet:
            events = await collect(drive(swap_agent(store, wallet)))
    finally:
        await store.close()
    return [e for e in events if isinstance(e, PendingAction)]


def test_approvals_regenerate_supersedes_and_the_resume_makes_a_new_card(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    (card,) = asyncio.run(_cards(db, lambda a: a.run("swap 500 USDC for SUI", principal="ann")))
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(pending_card(card))
    assert "quoted" in out.getvalue()

    result = cli("approvals", "regenerate", str(card.approval_id), "--by", "ann", "--db", db)
    assert result.exit_code == 0, result.output
    assert "superseded" in result.output
    assert approval(db, card.approval_id).status == "superseded"

    (fresh,) = asyncio.run(_cards(db, lambda a: a.resume(card.run_id)))
    assert fresh.regenerated_from == card.approval_id
    again = cli("approvals", "regenerate", str(card.approval_id), "--by", "ann", "--db", db)
    assert again.exit_code != 0
    assert "already superseded" in again.output


def test_the_terminal_card_lists_the_steps() -> None:
    event = PendingAction.model_validate(
        {
            "run_id": "00000000-0000-0000-0000-000000000001",
            "seq": 5,
            "at": "2026-01-01T00:00:00Z",
            "approval_id": "00000000-0000-0000-0000-000000000002",
            "tool_use_id": "t1",
            "name": "swap_and_save",
            "input": {"from_asset": "SUI", "amount": "100"},
            "description": "Swap 100 SUI for USDC, then save the USDC",
            "amount_usd": "450",
            "tier": "confirm",
            "modifiable_fields": [],
            "guard_notes": [],
            "expires_at": "2026-01-01T00:15:00Z",
            "args_digest": "0" * 64,
            "steps": [
                CardStep(
                    operation="swap",
                    description="Swap 100 SUI for USDC",
                    asset="SUI",
                    amount=Decimal(100),
                ).model_dump(mode="json"),
                CardStep(
                    operation="save", description="Save the USDC the swap gives", asset="USDC"
                ).model_dump(mode="json"),
            ],
        }
    )
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(pending_card(event))
    text = out.getvalue()
    assert "step 1" in text
    assert "swap: Swap 100 SUI for USDC · 100 SUI" in text
    assert "step 2" in text
    assert "save: Save the USDC the swap gives" in text

"""One process of the steps crash test (``python tests/faults/steps_child.py PHASE DB WALLET``).

``start``: the person asks for swap_and_save, approves its one card, and the run executes it;
the wallet SIGKILLs this process as the second step (the save) is about to post, after the
first (the swap) has committed. ``resume``: a new process resumes the run and prints what the
wallet holds and what the run reported, as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from fiduciary import Agent, Clock, ManualClock, Policy
from fiduciary.events import PendingAction, ToolCallEnd
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls
from fiduciary.wallet import PaperWallet, build_wallet_agent
from fiduciary.wallet.operations import Deposit, Operation
from fiduciary.wallet.views import Receipt

MESSAGE = "swap 100 SUI to USDC and save it"


class DyingWallet(PaperWallet):
    """A wallet that dies as the save is about to post (the swap before it committed)."""

    def execute(
        self, principal: str, op: Operation, *, key: str, at: datetime | None = None
    ) -> Receipt:
        if isinstance(op, Deposit):
            os.kill(os.getpid(), signal.SIGKILL)
        return super().execute(principal, op, key=key, at=at)


def agent(store: SQLiteStore, wallet: PaperWallet, clock: Clock | None = None) -> Agent:
    script = Script(
        MESSAGE,
        [
            ToolCalls([Call("balance_check")]),
            ToolCalls([Call("swap_and_save", {"from_asset": "SUI", "amount": "100"})]),
            Reply("Swapped and saved."),
        ],
    )
    return build_wallet_agent(
        store,
        wallet,
        model=ScriptedModel([script]),
        policy=Policy(preset="conservative", daily_autonomous_limit_usd=None),
        clock=clock,
    )


async def start(db: str, wallet_path: str) -> None:
    store = SQLiteStore(db)
    with DyingWallet(wallet_path) as wallet:
        runner = agent(store, wallet)
        events = [e async for e in runner.run(MESSAGE, principal="ann")]
        (card,) = [e for e in events if isinstance(e, PendingAction)]
        print(json.dumps({"run_id": str(card.run_id), "steps": len(card.steps or [])}), flush=True)
        typed = card.amount_usd if card.tier == "explicit" else None
        await runner.approve(card.approval_id, by="ann", confirm_amount=typed)
        async for _ in runner.resume(card.run_id):
            pass
    raise SystemExit("the wallet should have died before the save")


async def resume(db: str, wallet_path: str, run_id: str) -> None:
    from uuid import UUID

    store = SQLiteStore(db)
    with PaperWallet(wallet_path) as wallet:
        # the dead process's lease has lapsed for this clock (an hour on): no waiting for it
        later = ManualClock(datetime.now(UTC) + timedelta(hours=1))
        runner = agent(store, wallet, later)
        events = [e async for e in runner.resume(UUID(run_id))]
        ends = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "swap_and_save"]
        kinds: dict[str, int] = {}
        for entry in wallet.history("ann", limit=50):
            kinds[entry.kind] = kinds.get(entry.kind, 0) + 1
        # the result as the model reads it: its JSON, then any notes
        report: Any = json.JSONDecoder().raw_decode(ends[0].output)[0] if ends else None
        print(
            json.dumps(
                {"kinds": kinds, "report": report, "recovery": ends[0].recovery if ends else None}
            )
        )
    await store.close()


if __name__ == "__main__":
    phase, db, wallet_file = sys.argv[1:4]
    if phase == "start":
        asyncio.run(start(db, wallet_file))
    else:
        asyncio.run(resume(db, wallet_file, sys.argv[4]))

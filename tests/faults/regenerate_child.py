"""One process of the regenerate crash test
(``python tests/faults/regenerate_child.py PHASE DB WALLET [RUN]``).

``start``: a swap waits for approval (prints the run and the approval). ``regenerate``: the
person asks for a new quote and the run is resumed; the wallet SIGKILLs this process while the
fresh quote is being made (the old approval already superseded, the new card not yet written).
``resume``: a new process resumes what can run (an hour on: the dead lease has lapsed) and
prints the run's approvals as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import UUID

from fiduciary import Agent, Clock, ManualClock, Policy
from fiduciary.events import PendingAction
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import ScriptedModel
from fiduciary.wallet import PaperWallet, build_wallet_agent
from fiduciary.wallet.views import SwapQuote
from tests.unit.wallet.test_regenerate import swap_script


class DyingWallet(PaperWallet):
    """A wallet that dies as a quote is asked for."""

    def quote(
        self,
        principal: str,
        from_asset: str,
        to_asset: str,
        amount: Decimal,
        at: datetime | None = None,
    ) -> SwapQuote:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("killed")


def agent(store: SQLiteStore, wallet: PaperWallet, clock: Clock | None = None) -> Agent:
    return build_wallet_agent(
        store,
        wallet,
        model=ScriptedModel([swap_script()]),
        policy=Policy(preset="conservative", daily_autonomous_limit_usd=None),
        clock=clock,
    )


async def start(db: str, wallet_path: str) -> None:
    store = SQLiteStore(db)
    with PaperWallet(wallet_path) as wallet:
        events = [e async for e in agent(store, wallet).run("swap 500", principal="ann")]
    (card,) = [e for e in events if isinstance(e, PendingAction)]
    print(json.dumps({"run_id": str(card.run_id), "approval_id": str(card.approval_id)}))
    await store.close()


async def regenerate(db: str, wallet_path: str, approval_id: str) -> None:
    store = SQLiteStore(db)
    with DyingWallet(wallet_path) as wallet:
        runner = agent(store, wallet)
        decided = await runner.regenerate(UUID(approval_id), by="ann")
        async for _ in runner.resume(decided.run_id):
            pass
    raise SystemExit("the wallet should have died making the fresh quote")


async def resume(db: str, wallet_path: str, run_id: str) -> None:
    store = SQLiteStore(db)
    with PaperWallet(wallet_path) as wallet:
        later = ManualClock(datetime.now(UTC) + timedelta(hours=1))
        resumed = await agent(store, wallet, later).resume_all()
        approvals = await store.list_approvals(run_id=UUID(run_id), status=None)
        cards = [e for e in await store.read_events(UUID(run_id)) if isinstance(e, PendingAction)]
    print(
        json.dumps(
            {
                "resumed": [str(r) for r in resumed],
                "approvals": {str(a.approval_id): a.status for a in approvals},
                "cards": [
                    [str(c.approval_id), str(c.regenerated_from) if c.regenerated_from else None]
                    for c in cards
                ],
            }
        )
    )
    await store.close()


if __name__ == "__main__":
    phase, db, wallet_file = sys.argv[1:4]
    if phase == "start":
        asyncio.run(start(db, wallet_file))
    elif phase == "regenerate":
        asyncio.run(regenerate(db, wallet_file, sys.argv[4]))
    else:
        asyncio.run(resume(db, wallet_file, sys.argv[4]))

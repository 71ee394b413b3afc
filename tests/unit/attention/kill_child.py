"""A watcher process for the kill test: ``python kill_child.py RECORD LOG PHASE``.

In phase ``first`` the judge blocks forever on ``ev-3`` (after logging ``blocked``), so the
parent can kill the process once the batch holding it was taken. Phase ``second`` runs to the
end of the source.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

from fiduciary.attention.actions import RouteAction
from fiduciary.attention.record import AttentionRecord, DecisionRecord
from fiduciary.attention.testing import ListSource
from fiduciary.attention.types import Batch, Incoming, JudgeInput, Judgment
from fiduciary.attention.watch import Attention

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def main() -> None:
    record_path, log_path, phase = sys.argv[1:4]

    def log(line: str) -> None:
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(f"{phase} {line}\n")
            f.flush()

    class Judge:
        name = "child"

        async def __call__(self, judge_input: JudgeInput) -> Judgment:
            last = judge_input.window[-1].id
            if phase == "first" and last == "ev-3":
                log("blocked ev-3")
                await asyncio.Event().wait()
            log(f"judged {last}")
            return Judgment(route="notify", probabilities={"notify": 1.0}, model="child")

    async def notify(decision: DecisionRecord, message: str) -> None:
        log(f"notified {decision.event_id}")

    class Logged(ListSource):
        async def batches(self, cursor: str | None) -> AsyncIterator[Batch]:
            log(f"opened {cursor}")
            async for batch in super().batches(cursor):
                yield batch

    events = [
        Incoming(id=f"ev-{i}", source="list", type="tick", at=T0 + timedelta(minutes=i))
        for i in range(6)
    ]
    attention = Attention(
        judge=Judge(),
        record=AttentionRecord(record_path),
        routes={"notify": RouteAction(do="notify")},
        sources=[Logged(events, size=2)],
        notify=notify,
    )
    asyncio.run(attention.run())
    log("done")


if __name__ == "__main__":
    main()

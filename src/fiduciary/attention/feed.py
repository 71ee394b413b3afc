"""The decision feed: every decision (and dead letter) in order, to follow with a cursor.

The cursor is a decision's ``seq``. A consumer persists the cursor of every item before acting
on the next one, and dedups on the decision's id (``event id`` in SSE terms is the seq, stable
across reconnects). ``follow`` is the in-process API; ``decision_feed_route`` serves the same as
Server-Sent Events (``event: attention.decision`` or ``attention.dead_letter``, ``id: <seq>``),
resuming after ``Last-Event-ID`` (or ``?after=``). Followers wake on this process's decisions at
once and re-read the record every ``poll`` seconds for other processes'.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any

from .record import AttentionRecord, DecisionRecord

__all__ = ["decision_feed_route", "decision_json", "encode_decision", "follow"]


def decision_json(decision: DecisionRecord) -> dict[str, Any]:
    return {
        "seq": decision.seq,
        "decision_id": str(decision.decision_id),
        "kind": decision.kind,
        "source": decision.source,
        "event_id": decision.event_id,
        "event_type": decision.event_type,
        "principal": decision.principal,
        "at": decision.at.isoformat(),
        "route": decision.route,
        "probabilities": decision.probabilities,
        "predicates": decision.predicates,
        "model": decision.model,
        "prompt_tokens": decision.prompt_tokens,
        "cost_usd": None if decision.cost_usd is None else str(decision.cost_usd),
        "input_digest": decision.input_digest,
        "error": decision.error,
        "action": decision.action,
        "run_id": None if decision.run_id is None else str(decision.run_id),
    }


def encode_decision(decision: DecisionRecord) -> str:
    kind = "attention.decision" if decision.kind == "decision" else "attention.dead_letter"
    data = json.dumps(decision_json(decision), separators=(",", ":"))
    return f"id: {decision.seq}\nevent: {kind}\ndata: {data}\n\n"


async def follow(
    record: AttentionRecord,
    *,
    after: int = 0,
    wake: asyncio.Condition | None = None,
    poll: float = 1.0,
) -> AsyncIterator[DecisionRecord]:
    """Decisions after ``after``, then each new one as it is acted on, forever."""
    cursor = after
    while True:
        if wake is None:
            batch = await record.decisions(after=cursor, limit=100)
        else:
            # read under the lock the watcher notifies under: no decision falls between the
            # read and the wait
            async with wake:
                batch = await record.decisions(after=cursor, limit=100)
                if not batch:
                    with suppress(TimeoutError):
                        async with asyncio.timeout(poll):
                            await wake.wait()
                    continue
        for decision in batch:
            cursor = decision.seq
            yield decision
        if not batch:
            await asyncio.sleep(poll)


def _after(value: str | None) -> int:
    if value is None or not value.strip().isdigit():
        return 0
    return int(value.strip())


def decision_feed_route(
    record: AttentionRecord,
    *,
    path: str = "/attention/decisions",
    wake: asyncio.Condition | None = None,
    poll: float = 1.0,
    heartbeat: float = 15.0,
) -> Any:
    """A Starlette ``Route`` serving the feed as SSE (the lead mounts it behind the server's
    auth). Needs the ``server`` extra."""
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def stream(request: Request) -> StreamingResponse:
        after = _after(request.headers.get("last-event-id") or request.query_params.get("after"))

        async def body() -> AsyncIterator[str]:
            decisions = follow(record, after=after, wake=wake, poll=poll)
            pending: asyncio.Task[DecisionRecord] | None = None
            try:
                while True:
                    if pending is None:
                        pending = asyncio.ensure_future(anext(decisions))
                    done, _ = await asyncio.wait({pending}, timeout=heartbeat)
                    if not done:
                        yield ": heartbeat\n\n"
                        continue
                    decision = pending.result()
                    pending = None
                    yield encode_decision(decision)
            finally:
                if pending is not None:
                    pending.cancel()
                    with suppress(BaseException):
                        await pending
                await decisions.aclose()  # type: ignore[attr-defined]

        return StreamingResponse(
            body(),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    return Route(path, stream, methods=["GET"])

"""The decision feed as MCP events (extra ``mcp``): ``attention.decision`` and
``attention.dead_letter``, served from any SDK ``Server`` with the wire shapes of
``mcp_events`` (``events/list``, ``events/poll``, ``events/stream``).

Each event's ``eventId`` is the decision id and its ``cursor`` the decision's ``seq``; a
consumer persists the cursor from every item before acting on the next and dedups on the event
id (``McpEvents`` with the watcher's record does both). A stream sends a heartbeat every
``heartbeat_seconds`` without decisions, so a consumer's idle timer (300 s) never fires on a
quiet but live feed.
"""

from __future__ import annotations

import asyncio
from typing import Any

try:
    import mcp_types as types
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel.server import Server
    from pydantic import ConfigDict
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the MCP decision feed needs the 'mcp' extra: pip install 'fiduciary[mcp]'"
    ) from exc

from .feed import decision_json
from .record import AttentionRecord, DecisionRecord

__all__ = ["DECISION_EVENTS", "serve_decisions"]

DECISION_EVENTS = {"attention.decision": "decision", "attention.dead_letter": "dead_letter"}


class _Params(types.RequestParams):
    model_config = ConfigDict(extra="allow")


def _cursor(value: object) -> int:
    return int(value) if isinstance(value, str) and value.isdigit() else 0


def _kind(params: _Params) -> str:
    name = (params.model_extra or {}).get("name")
    if name not in DECISION_EVENTS:
        raise ValueError(f"no event named {name!r}: {', '.join(DECISION_EVENTS)}")
    return DECISION_EVENTS[str(name)]


def _event(decision: DecisionRecord) -> dict[str, Any]:
    return {
        "eventId": str(decision.decision_id),
        "cursor": str(decision.seq),
        "data": decision_json(decision),
    }


def serve_decisions(
    server: Server[Any],
    record: AttentionRecord,
    *,
    wake: asyncio.Condition | None = None,
    poll_ms: int = 10_000,
    heartbeat_seconds: float = 15.0,
    page: int = 100,
) -> None:
    """Register the three ``events/*`` methods serving ``record``'s decisions on ``server``."""

    async def listing(ctx: ServerRequestContext[Any, Any], params: _Params) -> dict[str, Any]:
        return {"events": [{"name": n, "push": True} for n in DECISION_EVENTS]}

    async def poll(ctx: ServerRequestContext[Any, Any], params: _Params) -> dict[str, Any]:
        kind = _kind(params)
        extra = params.model_extra or {}
        after = _cursor(extra.get("cursor"))
        limit = extra.get("maxEvents")
        found = await record.decisions(
            after=after, limit=limit if isinstance(limit, int) and limit > 0 else page
        )
        return {
            "events": [_event(d) for d in found if d.kind == kind],
            "cursor": str(found[-1].seq if found else after),
            "nextPollMs": poll_ms,
        }

    async def stream(ctx: ServerRequestContext[Any, Any], params: _Params) -> dict[str, Any]:
        kind = _kind(params)
        extra = params.model_extra or {}
        subscription = extra.get("subscriptionId")
        after = _cursor(extra.get("cursor"))

        async def send(method: str, payload: dict[str, Any]) -> None:
            note = types.Notification[dict[str, Any], str](
                method=f"notifications/events/{method}",
                params={"subscriptionId": subscription, **payload},
            )
            await ctx.session.send_notification(note, related_request_id=ctx.request_id)  # type: ignore[arg-type]

        await send("active", {"cursor": str(after)})
        while True:
            found, quiet = await _next(after)
            for decision in found:
                after = decision.seq
                if decision.kind == kind:
                    await send("event", _event(decision))
            if quiet:
                await send("heartbeat", {"cursor": str(after)})

    async def _next(after: int) -> tuple[list[DecisionRecord], bool]:
        """The next decisions, or ([], True) after ``heartbeat_seconds`` without any (read
        under the lock the watcher notifies under, so none falls between read and wait)."""
        if wake is None:
            found = await record.decisions(after=after, limit=page)
            if not found:
                await asyncio.sleep(heartbeat_seconds)
            return found, not found
        async with wake:
            found = await record.decisions(after=after, limit=page)
            if found:
                return found, False
            try:
                async with asyncio.timeout(heartbeat_seconds):
                    await wake.wait()
            except TimeoutError:
                return [], True
        return [], False

    server.add_request_handler("events/list", _Params, listing)
    server.add_request_handler("events/poll", _Params, poll)
    server.add_request_handler("events/stream", _Params, stream)

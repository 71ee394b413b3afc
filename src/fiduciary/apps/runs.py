"""Hook invocations and intent executions as fiduciary runs.

Every hook invocation is a run of an ``Agent`` with the app's model; every intent (and every
approval the apps engine asks for: enabling an app, a batch of intents) is a tool call in a run
of a ``PlannedModel`` — a deterministic model that plays a plan written in the run's first
message, one call per turn, so the call passes the same gates as any write, waits for a person
the same way, runs at most once (the ledger) and resumes after a crash from the run's log.

Run ids are derived (UUID v5) from the app, the slot and the step, so a step re-entered after a
crash, or by another process, finds its run instead of starting a second one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID, uuid5

from ..agent import Agent
from ..capabilities import Principal
from ..events import (
    Event,
    Origin,
    PendingAction,
    RunCompleted,
    RunFailed,
    ToolCallEnd,
    ToolCallRejected,
    UserMessage,
)
from ..exceptions import RunError, StoreError
from ..models.base import (
    AssistantMessage,
    ModelEvent,
    ModelRequest,
    StreamStop,
    StreamTextDelta,
    StreamToolCall,
    StreamUsage,
    ToolResultsMessage,
    UserTextMessage,
)
from ..stores.base import RunRecord, Store

__all__ = [
    "PLAN_MARKER",
    "CallOutcome",
    "PlannedModel",
    "drive",
    "hook_output",
    "outcomes",
    "plan_message",
    "step_id",
    "turn_of",
]

APPS_NAMESPACE = UUID("6f1c1d8e-3b0a-5d6e-9a51-0f1d2c3b4a59")
PLAN_MARKER = "\nPLAN "
_DONE = frozenset({"completed", "failed", "cancelled"})


def step_id(*parts: str) -> UUID:
    """The run id of one step, derived from its parts (app, slot, step): the same everywhere."""
    return uuid5(APPS_NAMESPACE, "/".join(parts))


def plan_message(title: str, *, gate: dict[str, Any] | None, calls: list[dict[str, Any]]) -> str:
    """The first message of a planned run: a line for people, then the plan the model plays."""
    plan = {"gate": gate, "calls": calls}
    return f"{title}{PLAN_MARKER}{json.dumps(plan, sort_keys=True, default=str)}"


class PlannedModel:
    """Plays the plan of its run's first message: the ``gate`` call first (when there is one;
    refused or denied → nothing else is called), then each call, one per turn, whatever the
    previous one's outcome; then a short text. Derived from the transcript alone."""

    name = "fiduciary-apps-plan"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        first = next((m for m in request.messages if isinstance(m, UserTextMessage)), None)
        plan: dict[str, Any] = {"gate": None, "calls": []}
        if first is not None and PLAN_MARKER in first.text:
            plan = json.loads(first.text.split(PLAN_MARKER, 1)[1])
        step = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
        gate = plan.get("gate")
        calls: list[dict[str, Any]] = list(plan.get("calls") or [])
        call_id, call = "", None
        if gate is not None and step == 0:
            call_id, call = "gate", gate
        elif gate is not None and _errored(request, "gate"):
            call = None  # refused, denied or expired: nothing of the plan runs
        else:
            index = step - (1 if gate is not None else 0)
            if index < len(calls):
                call_id, call = f"plan_{index}", calls[index]
        if call is not None:
            yield StreamToolCall(id=call_id, name=call["name"], arguments=json.dumps(call["args"]))
            yield StreamUsage(input_tokens=1, output_tokens=1)
            yield StreamStop("tool_use")
            return
        yield StreamTextDelta("done")
        yield StreamUsage(input_tokens=1, output_tokens=1)
        yield StreamStop("end_turn")


def _errored(request: ModelRequest, tool_use_id: str) -> bool:
    for message in request.messages:
        if isinstance(message, ToolResultsMessage):
            for result in message.results:
                if result.tool_use_id == tool_use_id:
                    return result.is_error
    return True  # no result: treat as not granted


async def drive(
    agent: Agent,
    run_id: UUID,
    message: str,
    principal: Principal | str,
    *,
    origin: Origin | None = None,
    again: bool = False,
) -> RunRecord | None:
    """Start the run, or continue it from its log; None when another process drives it.
    A run already finished is left as it is — unless ``again``: then it is continued with the
    message (a session's next turn). ``origin``: what the message comes from when not the
    principal in person (a tick)."""
    existing = await agent.store.get_run(run_id)
    try:
        if existing is None or (again and existing.status in _DONE):
            await _drain(agent.run(message, principal=principal, run_id=run_id, origin=origin))
        elif existing.status not in _DONE:
            await _drain(agent.resume(run_id))
    except RunError as exc:
        if exc.code != "busy":
            raise
        return None
    except StoreError:
        # a second process created the same run first (the id is derived): it is theirs
        if existing is None and await agent.store.get_run(run_id) is not None:
            return None
        raise
    return await agent.store.get_run(run_id)


async def _drain(events: AsyncIterator[Event]) -> None:
    async for _ in events:
        pass


class HookOutputError(ValueError):
    """A hook answered something that is not the structured output it must give."""


def hook_output(text: str, *, allowed: frozenset[str]) -> dict[str, Any]:
    """Parse a hook's answer: one JSON object (a code fence around it is tolerated) with only
    the keys its hook may answer (tick: reply, state, intents, emit; message: reply, state,
    emit)."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`")
        body = body.split("\n", 1)[1] if "\n" in body else ""
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise HookOutputError(f"the hook's answer is not JSON: {text[:120]!r}") from exc
    if not isinstance(value, dict):
        raise HookOutputError("the hook's answer must be a JSON object")
    extra = sorted(set(value) - allowed)
    if extra:
        raise HookOutputError(f"the hook's answer has unknown keys: {', '.join(extra)}")
    if "state" in value and not isinstance(value["state"], dict):
        raise HookOutputError("state must be an object")
    if "intents" in value and not isinstance(value["intents"], list):
        raise HookOutputError("intents must be a list")
    return value


@dataclass(frozen=True, slots=True)
class Turn:
    """How one turn of a session run ended: ``completed`` (its final text), ``failed``, or
    ``waiting`` (not yet)."""

    status: str
    text: str = ""


async def turn_of(store: Store, run_id: UUID, marker: str) -> Turn | None:
    """The turn of the run whose user message ends with ``marker``; None if it was not sent."""
    events = await store.read_events(run_id)
    start = next(
        (i for i, e in enumerate(events) if isinstance(e, UserMessage) and e.text.endswith(marker)),
        None,
    )
    if start is None:
        return None
    for event in events[start + 1 :]:
        if isinstance(event, RunCompleted):
            return Turn("completed", event.text)
        if isinstance(event, RunFailed | UserMessage):
            return Turn("failed")  # (a next turn after none completed: this one is lost)
    return Turn("waiting")


@dataclass(frozen=True, slots=True)
class CallOutcome:
    tool_use_id: str
    name: str
    status: str  # executed | failed | denied | expired | refused | pending
    output: str
    approval_id: str | None = None  # the approval a person was asked for, when one was


async def outcomes(agent: Agent, run_id: UUID) -> tuple[list[CallOutcome], str | None]:
    """The outcome of each call of a run (by tool use id, in order) and its final text."""
    events = await agent.store.read_events(run_id)
    found: dict[str, CallOutcome] = {}
    asked: dict[str, str] = {}
    final: str | None = None
    for event in events:
        if isinstance(event, PendingAction):
            asked[event.tool_use_id] = str(event.approval_id)
            found[event.tool_use_id] = CallOutcome(event.tool_use_id, event.name, "pending", "")
        elif isinstance(event, ToolCallEnd):
            status = "failed" if event.is_error else "executed"
            found[event.tool_use_id] = CallOutcome(
                event.tool_use_id, event.name, status, event.output
            )
        elif isinstance(event, ToolCallRejected):
            status = event.reason if event.reason in ("denied", "expired") else "refused"
            found[event.tool_use_id] = CallOutcome(
                event.tool_use_id, event.name, status, f"{event.reason}: {event.message}"
            )
        elif isinstance(event, RunCompleted):
            final = event.text
    done = [replace(o, approval_id=asked.get(o.tool_use_id)) for o in found.values()]
    return done, final

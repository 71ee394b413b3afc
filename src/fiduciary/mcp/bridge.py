"""One MCP ``tools/call`` becomes one fiduciary run, with no model deciding anything.

The run's model is a private one (``ProposeCall``) that proposes exactly the call the MCP client
asked for, then ends. So the call meets every gate (whitelist, validation, guards, authorize,
policy, approval), the ledger and the audit, as any model's call would.

A write's run id is derived from principal + tool + argument digest: asking again for the same
call continues *that* run instead of starting another. Pending → the same pending result;
approved meanwhile → the run is resumed here and executes once; done → the recorded outcome.
Reads get a run of their own each time (they answer fresh). A write's guards also see the
principal's recent MCP calls, and that the call is relayed (``recent``).

The runs belong to this private model: the agent's own model (an LLM) never continues them. The
HTTP server's resume after an approval refuses them (``agent_mismatch``, logged once); the next
identical ``tools/call`` resumes the run here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID, uuid4, uuid5

from .._text import NOTES_MARKER
from ..agent import Agent
from ..capabilities import Capability, Principal, args_digest, canonical_json
from ..events import (
    ActionResolved,
    Event,
    PendingAction,
    RunFailed,
    ToolCallEnd,
    ToolCallRejected,
)
from ..exceptions import RunError
from ..models.base import (
    ModelEvent,
    ModelRequest,
    StreamStop,
    StreamToolCall,
    ToolResultsMessage,
)
from ..stores.base import RunRecord
from .recent import RelayedGuards

__all__ = ["MODEL_NAME", "CallOutcome", "McpGateway", "ProposeCall", "call_run_id"]

MODEL_NAME = "fiduciary:mcp-call"
_NAMESPACE = UUID("6f1d7a52-5c3e-4d8a-9b51-0e6a4f2c7d19")
_TOOL_USE_ID = "mcp-call"

Status = Literal["done", "error", "unknown", "refused", "pending_approval", "in_progress"]


class ProposeCall:
    """A model that proposes one given call, and ends its turn once it has a result."""

    def __init__(self, tool: str, arguments: Mapping[str, Any]) -> None:
        self.tool = tool
        self.arguments = dict(arguments)

    @property
    def name(self) -> str:
        return MODEL_NAME

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        answered = any(isinstance(m, ToolResultsMessage) for m in request.messages)
        if not answered:
            yield StreamToolCall(_TOOL_USE_ID, self.tool, canonical_json(self.arguments))
            yield StreamStop("tool_use")
            return
        yield StreamStop("end_turn")


def call_run_id(principal: str, tool: str, arguments: Mapping[str, Any], attempt: int = 0) -> UUID:
    """The run of one write asked over MCP: the same principal, tool and arguments, the same
    run (so the same ledger key, the same approval, the same recorded outcome). ``attempt``
    counts the earlier runs of that call a person declined or let expire (never executed)."""
    digest = args_digest(dict(arguments))
    tail = f"\x00{attempt}" if attempt else ""
    return uuid5(_NAMESPACE, f"{principal}\x00{tool}\x00{digest}{tail}")


_ASK_AGAIN = frozenset({"denied", "expired", "cancelled"})  # not executed: may be asked again
_MAX_ATTEMPTS = 1000


@dataclass(slots=True)
class CallOutcome:
    """What a ``tools/call`` answers: a status, the text the model would have seen, details."""

    status: Status
    text: str
    run_id: UUID
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def is_error(self) -> bool:
        return self.status in ("error", "unknown", "refused")

    def structured(self) -> dict[str, Any]:
        return {"status": self.status, "run_id": str(self.run_id), **self.details}


class McpGateway:
    """The agent's capabilities as MCP tools: what is listed, and how one call is run.

    ``console_url``: where a person decides pending actions (shown in a pending result)."""

    def __init__(self, agent: Agent, *, console_url: str = "http://127.0.0.1:8000/") -> None:
        self.agent = agent
        self.console_url = console_url

    # the agent's whitelist (the one place that reads the agent's capability table)
    def capabilities(self) -> list[Capability]:
        table = self.agent.gates
        return [c for n in table.names if (c := table.get(n)) is not None]

    def capability(self, name: str) -> Capability | None:
        return self.agent.gates.get(name)

    def _proxy(self, tool: str, arguments: Mapping[str, Any], *, relayed: bool) -> Agent:
        # the same store, gates, policy, locks and clock; only the model differs, and for a
        # write what its guards see: the principal's recent MCP calls (``recent``)
        model = ProposeCall(tool, arguments)
        if not relayed:
            return self.agent.with_options(model=model)
        guards = RelayedGuards(self.agent, model=MODEL_NAME).wrap(self.agent.gates.guards)
        return self.agent.with_options(model=model, guards=guards)

    async def call(
        self,
        principal: Principal,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        console_url: str | None = None,
    ) -> CallOutcome:
        """The call's outcome; ``console_url``: where its pending result's links point (this
        request's; else the gateway's own)."""
        console = console_url or self.console_url
        cap = self.capability(tool)
        if cap is None:
            return CallOutcome(
                "refused",
                f"There is no tool named {tool!r}.",
                uuid4(),
                {"reason": "not_allowed"},
            )
        proxy = self._proxy(tool, arguments, relayed=cap.is_write)
        message = f"MCP call: {tool}"
        if cap.concurrent:  # a read answers fresh, in a run of its own (a question waits)
            run_id = uuid4()
            await _drain(
                proxy.run(message, principal=principal, run_id=run_id, capabilities=[tool])
            )
            return await self._outcome(run_id, principal, console)
        run_id, run = await self._current_run(principal, tool, arguments)
        try:
            if run is None:
                await _drain(
                    proxy.run(message, principal=principal, run_id=run_id, capabilities=[tool])
                )
            elif run.principal != principal.actor_id:  # (the id includes the principal)
                return CallOutcome("refused", "This call belongs to someone else.", run_id)
            elif run.status in ("awaiting_approval", "awaiting_client_result", "awaiting_input"):
                now = self.agent.clock.now()
                waiting = await self.agent.pending_approvals(run_id=run_id)
                if not [a for a in waiting if a.expires_at > now]:
                    await _drain(proxy.resume(run_id))  # decided or expired: settle it here
            elif run.status in ("running", "awaiting_child"):
                # after a crash: the ledger decides; a delegated run that ended is delivered
                await _drain(proxy.resume(run_id))
        except RunError as exc:
            if exc.code != "busy":
                raise
            return CallOutcome(
                "in_progress",
                "This call is being run right now; ask again for its outcome.",
                run_id,
            )
        return await self._outcome(run_id, principal, console)

    async def _current_run(
        self, principal: Principal, tool: str, arguments: Mapping[str, Any]
    ) -> tuple[UUID, RunRecord | None]:
        """The run this call continues: its first, unless a person declined that one (or let
        it expire) without it being executed; then the next attempt's."""
        for attempt in range(_MAX_ATTEMPTS):
            run_id = call_run_id(principal.actor_id, tool, arguments, attempt)
            run = await self.agent.store.get_run(run_id)
            if run is None or run.status not in ("completed", "failed", "cancelled"):
                return run_id, run
            outcome = await self._outcome(run_id, principal, self.console_url)
            if outcome.details.get("reason") not in _ASK_AGAIN:
                return run_id, run
        raise RunError("invalid", f"{tool} was asked and declined too many times")

    async def _outcome(self, run_id: UUID, principal: Principal, console_url: str) -> CallOutcome:
        events = [e async for e in self.agent.events(run_id, follow=False)]
        return outcome_of(events, run_id, console_url=console_url, principal=principal)


def outcome_of(
    events: list[Event], run_id: UUID, *, console_url: str, principal: Principal
) -> CallOutcome:
    """The call's outcome as the run's log records it (its last word on the call)."""
    last: Event | None = None
    for event in events:
        about_the_call = ToolCallEnd | ToolCallRejected | PendingAction | ActionResolved
        if isinstance(event, about_the_call) or (isinstance(event, RunFailed) and last is None):
            last = event
    match last:
        case ToolCallEnd(output=output, is_error=is_error, recovery=recovery, error_code=code):
            if not is_error:
                return CallOutcome("done", _plain(output), run_id, _parsed(output))
            status: Status = "unknown" if recovery == "unknown" or "unknown" in output else "error"
            return CallOutcome(status, output, run_id, {"error": code})
        case ToolCallRejected(reason=reason, message=message):
            return CallOutcome("refused", message, run_id, {"reason": reason})
        case PendingAction():
            url = console_url.rstrip("/") + "/"
            details = {
                "approval_id": str(last.approval_id),
                "args_digest": last.args_digest,
                "arguments": last.input,
                "tier": last.tier,
                "acknowledge": last.acknowledge,
                "description": last.description,
                "amount_usd": None if last.amount_usd is None else str(last.amount_usd),
                # the guards' notes as the person reads them on the card
                "notes": [
                    {"guard": n.guard, "verdict": n.verdict, "message": n.shown}
                    for n in last.guard_notes
                ],
                "expires_at": last.expires_at.isoformat(),
                "console_url": url,
                "approve_with": {
                    "http": f"POST {url}approvals/{last.approval_id}/approve",
                    "cli": f"fiduciary approvals approve {last.approval_id} "
                    f"--by {principal.actor_id}",
                },
            }
            if last.executor == "person":  # a question (ask_person): answered, not approved
                details["question"] = last.input.get("question")
                details["choices"] = last.input.get("choices") or []
                details["executor"] = "person"
                details.pop("approve_with")
                details["answer_with"] = {
                    "http": f"POST {url}questions/{last.approval_id}/answer",
                    "cli": f"fiduciary questions answer {last.approval_id} ANSWER "
                    f"--by {principal.actor_id}",
                }
                text = (
                    f"Waiting for the person's answer: {last.description}. Question "
                    f"{last.approval_id} is in the console at {url}. Once it is answered, call "
                    "this tool again with the same arguments for the answer."
                )
                return CallOutcome("pending_approval", text, run_id, details)
            text = (
                f"Waiting for a person: {last.description}. Approval {last.approval_id} "
                f"({last.tier}) is in the console at {url}. Once it is decided, call this tool "
                "again with the same arguments for its outcome; nothing else approves it."
            )
            return CallOutcome("pending_approval", text, run_id, details)
        case ActionResolved():
            return CallOutcome("in_progress", "Decided; ask again for the outcome.", run_id, {})
        case RunFailed(message=message):
            return CallOutcome("error", message, run_id, {})
    return CallOutcome("in_progress", "The call has not finished; ask again.", run_id)


def _plain(output: str) -> str:
    """The text a client shows: a result that is a string, as the string (not JSON-quoted),
    followed by the guards' notes if any; anything else as the model saw it."""
    try:
        value, end = _DECODER.raw_decode(output)
    except ValueError:
        return output
    rest = output[end:]
    if isinstance(value, str) and (not rest or rest.startswith(NOTES_MARKER)):
        return value + rest
    return output


_DECODER = json.JSONDecoder()


def _parsed(output: str) -> dict[str, Any]:
    try:
        return {"result": json.loads(output)}
    except ValueError:  # cut to the result budget, or followed by guard notes
        return {}


async def _drain(events: AsyncIterator[Event]) -> None:
    async for _ in events:
        pass

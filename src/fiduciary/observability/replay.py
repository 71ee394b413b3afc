"""Replay: a recorded run re-run against a model (another, or the same), touching nothing.

A replay is a new run of the same store whose ``run_started`` names the run it re-runs
(``replay_of``). It is driven by a *replay agent*: the original agent's configuration with every
capability wrapped, so the loop, the gates and the log work as in any run while

- a read answers from the recording when the original made the same call (name and argument
  digest; repeated calls are answered in their recorded order), runs live only when the host
  allows it (``live_reads``), and is refused otherwise;
- a write never reaches its handler: its ``tool_call_end`` is a "would have called" entry,
  ``"not_executed": "replay"`` and ``"would_have_called"`` (name, arguments, the tier the
  original policy would have given it, its amount), merged into what the original recorded for
  the same call when it made one (so the model goes on as it did), else beside
  ``"recorded_result": null``.

Nothing in a replay needs a person: the wrapped writes are ``auto`` and carry no amount (no
daily limit is spent); a guard that holds a call for a person is approved by the replay itself,
as that only records the "would have called" entry. The original run is never written.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

from pydantic import BaseModel, TypeAdapter

from ..agent import Agent
from ..capabilities import CallContext, Capability, Executor, Principal, args_digest
from ..events import (
    Event,
    RunStarted,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
    UserMessage,
)
from ..exceptions import CapabilityError, ErrorCode, RunError, is_error_code
from ..models.base import Model
from ..stores.base import IDLE, RunRecord, existing_run

__all__ = ["NOT_EXECUTED", "Recording", "replay", "replay_agent"]

NOT_EXECUTED = "replay"
"""The ``not_executed`` value of a write's result in a replay: it was not executed."""

_ANY: TypeAdapter[Any] = TypeAdapter(Any)


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One call of the recorded run and how it ended."""

    name: str
    digest: str
    output: str
    is_error: bool
    error_code: str | None


@dataclass(slots=True)
class Recording:
    """What a recorded run's calls returned, by (name, argument digest), in their order."""

    calls: dict[tuple[str, str], deque[RecordedCall]] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, events: Sequence[Event], *, upto: int | None = None) -> Recording:
        recording = cls()
        started: dict[str, ToolCallStart] = {}
        for event in events:
            if upto is not None and event.seq > upto:
                break
            if isinstance(event, UserMessage):
                recording.messages.append(event.text)
            elif isinstance(event, ToolCallStart):
                started[event.tool_use_id] = event
            elif isinstance(event, ToolCallEnd | ToolCallRejected):
                start = started.get(event.tool_use_id)
                if start is None:
                    continue
                if isinstance(event, ToolCallEnd):
                    call = RecordedCall(
                        start.name,
                        start.args_digest,
                        event.output,
                        event.is_error,
                        event.error_code,
                    )
                else:
                    call = RecordedCall(
                        start.name, start.args_digest, event.message, True, event.reason
                    )
                recording.calls.setdefault((call.name, call.digest), deque()).append(call)
        return recording

    def take(self, name: str, digest: str) -> RecordedCall | None:
        """The next recorded answer to this call; the last one again once they are used up."""
        answers = self.calls.get((name, digest))
        if not answers:
            return None
        return answers.popleft() if len(answers) > 1 else answers[0]


def _recorded_value(output: str) -> Any:
    """The JSON value a recorded result was rendered from (guard hints after it dropped: the
    replay's own post guards add theirs); the text itself when it is not JSON."""
    try:
        value, _ = json.JSONDecoder().raw_decode(output)
    except ValueError:
        return output
    return value


def _code(recorded: str | None) -> ErrorCode:
    """The recorded error's code, when it is one of today's (an older log may hold another:
    its text is in the message the model reads all the same)."""
    return recorded if is_error_code(recorded) else "failed"


def _read(cap: Capability, recording: Recording, *, live: bool) -> Capability:
    async def answer(args: BaseModel, ctx: CallContext) -> Any:
        digest = args_digest(args.model_dump(mode="json"))
        recorded = recording.take(cap.name, digest)
        if recorded is not None:
            if recorded.is_error:
                raise CapabilityError(_code(recorded.error_code), recorded.output)
            return _recorded_value(recorded.output)
        if not live:
            raise CapabilityError(
                "not_recorded",
                f"This is a replay: the recorded run made no {cap.name} call with these "
                "arguments, and live reads are not allowed.",
            )
        return cap.dump_output(await cap.invoke(args, ctx))

    return _wrapped(cap, answer, tier=cap.tier)


def _write(cap: Capability, recording: Recording, agent: Agent) -> Capability:
    async def would_have_called(args: BaseModel, ctx: CallContext) -> Any:
        shown = args.model_dump(mode="json")
        amount: Decimal | None = None
        tier: str | None = None
        try:
            amount = await cap.amount(args, ctx)
            tier = agent.policy.decide(cap, amount).tier
        except Exception:  # pricing the call is the host's code: its failure is not the replay's
            tier = None
        call = {
            "name": cap.name,
            "arguments": shown,
            "tier": tier,
            "amount_usd": None if amount is None else str(amount),
        }
        recorded = recording.take(cap.name, args_digest(shown))
        if recorded is not None and recorded.is_error:
            raise CapabilityError(
                _code(recorded.error_code),
                f"Not executed (this is a replay); the recorded run got: {recorded.output}",
            )
        value = None if recorded is None else _recorded_value(recorded.output)
        marks = {"not_executed": NOT_EXECUTED, "would_have_called": call}
        if isinstance(value, dict):  # the recorded result, marked: the model goes on as before
            return {**value, **marks}
        return {**marks, "recorded_result": value}

    return _wrapped(cap, would_have_called, tier="auto")


def _wrapped(
    cap: Capability, handler: Callable[[BaseModel, CallContext], Any], *, tier: Any
) -> Capability:
    # the same name, kind, input and descriptions (what the model sees); another handler, run
    # on the server, its result any JSON value, keyed by the replay run (never the original's
    # ledger rows), with no amount and no policy operation (nothing spends the daily limit)
    return replace(
        cap,
        handler=handler,
        output_adapter=_ANY,
        executor=Executor.SERVER,
        idempotency_key=None,
        amount_usd=None,
        operation=None if cap.is_write else cap.operation,
        tier=tier,
        _call_style="model",
        _is_async=True,
        _ctx_param="ctx",
    )


def replay_agent(
    agent: Agent, recording: Recording, *, model: Model | None = None, live_reads: bool = False
) -> Agent:
    """An agent configured as ``agent`` whose capabilities answer from ``recording``."""
    caps: list[Capability] = []
    for name in agent.gates.names:
        cap = agent.gates.get(name)
        assert cap is not None
        caps.append(
            _write(cap, recording, agent)
            if cap.is_write
            else _read(cap, recording, live=live_reads)
        )
    again = Agent(
        model=model or agent.model,
        capabilities=caps,
        store=agent.store,
        policy=agent.policy,
        guards=agent.gates.guards,
        authorize=agent.gates.authorize,
        system=agent.system,
        max_turns=agent.max_turns,
        max_tool_calls=agent.max_tool_calls,
        clock=agent.clock,
        redactor=agent.redactor,
        model_settings=agent.model_settings,
        lease_seconds=agent.lease_seconds,
        model_tier=agent.model_tier,
        thinking_effort=agent.thinking_effort,
        budget_usd=agent.budget_usd,
        prices=agent.prices,
        authorize_timeout=agent.gates.authorize_timeout,
        context=agent.context,
        memory=None,  # a replay remembers nothing
        context_window=agent.context_window,
        compact_at=agent.compact_at,
        summarizer=agent.summarizer,
        microcompact=agent.microcompact,
        deps_type=agent.deps.deps_type,  # (a replay's recorded reads need no deps)
        output_type=agent.options.output_type,
        output_retries=agent.options.output_retries,
    )
    again.outputs.adopt(agent.outputs)  # a typed run replays typed: the same known types
    # no other agent drives a replay: its handlers are real; a typed run replays typed
    return again.with_options(drives_replays=True)


async def replay(
    agent: Agent,
    run_id: UUID,
    *,
    model: Model | None = None,
    upto: int | None = None,
    live_reads: bool = False,
) -> UUID:
    """Re-run the recorded run ``run_id`` with ``model`` (the agent's by default) in a new run
    marked as a replay (``run_started.replay_of``); its id.

    The person's messages of the recorded run (up to seq ``upto``) are sent again, each once the
    previous one's run ended. Reads answer from the recording (``live_reads``: unmatched ones
    run live), writes are never executed (see the module's docstring). Raises ``RunError``
    (``not_found``, ``invalid``: not a run with a message to replay up to ``upto``).
    """
    original = await existing_run(agent.store, run_id)
    events = await agent.store.read_events(run_id)
    started = events[0] if events else None
    if not isinstance(started, RunStarted):
        raise RunError("invalid", f"run {run_id} has no run_started event to replay")
    recording = Recording.of(events, upto=upto)
    if not recording.messages:
        raise RunError("invalid", f"run {run_id} has no user message up to seq {upto}")
    missing = [n for n in started.capabilities if agent.gates.get(n) is None]
    if missing:
        raise RunError(
            "agent_mismatch",
            f"run {run_id} used capabilities this agent lacks: {', '.join(missing)}",
        )
    again = replay_agent(agent, recording, model=model, live_reads=live_reads)
    who = Principal(original.principal, frozenset(original.scopes))
    rid = uuid4()
    now = agent.clock.now()
    first_text = recording.messages[0]
    title = f"replay of {str(run_id)[:8]}: {original.title}"
    run = derived_run(again, original, rid, title, now)
    head: list[Event] = [
        RunStarted(
            run_id=rid,
            seq=1,
            at=now,
            principal=started.principal,
            capabilities=list(started.capabilities),
            model=again.model.name,
            allowed_kinds=list(started.allowed_kinds),
            tier=started.tier,
            effort=started.effort,
            replay_of=run_id,
            output_type=started.output_type,
            output_retries=started.output_retries,
        ),
        UserMessage(run_id=rid, seq=2, at=now, text=first_text),
    ]
    await agent.store.create_run(run, head)
    # driven under the lease it was created with: never left unleased for a sweep to find
    async for _ in again.resume(rid, claimed=run.with_(last_seq=len(head))):
        pass
    await _drive(again, rid, who)
    for text in recording.messages[1:]:
        if (await existing_run(agent.store, rid)).status not in IDLE:
            break  # a replay that could not finish a message is not sent the next one
        async for _ in again.run(text, principal=who, run_id=rid):
            pass
        await _drive(again, rid, who)
    return rid


async def _drive(agent: Agent, run_id: UUID, who: Principal) -> None:
    """Drive the replay to its end, approving what a guard held for a person (approving a
    wrapped write only records what it would have done)."""
    for _ in range(agent.max_tool_calls + 1):
        async for _event in agent.resume(run_id):
            pass
        record = await existing_run(agent.store, run_id)
        if record.status != "awaiting_approval":
            return
        for pending in await agent.pending_approvals(run_id=run_id):
            await agent.approve(
                pending.approval_id,
                by=who,
                confirm_amount=pending.amount_usd,
                args_digest=pending.args_digest,
            )


def derived_run(
    agent: Agent, original: RunRecord, run_id: UUID, title: str, now: datetime
) -> RunRecord:
    """The record of a run made from ``original`` (a replay, a fork) at ``now``: the same
    principal and scopes, ``running``, leased by ``agent``."""
    return RunRecord(
        run_id=run_id,
        principal=original.principal,
        status="running",
        created_at=now,
        updated_at=now,
        epoch=1,
        lease_owner=agent.owner,
        lease_until=now + timedelta(seconds=agent.lease_seconds),
        title=title[:120],
        scopes=original.scopes,
    )

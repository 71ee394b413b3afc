"""Intents: what a hook proposes, turned into runs through the gates.

An intent is ``{summary, action: {capability, args}, permissions?}`` (or, without ``action``,
what the app's ``execute`` hook answers for it), or ``{summary, grant: {operations, limits,
resources, ttl}}`` — a request for a scoped temporary grant.

- Batch intents (no ``permissions``) run in one planned run; when ``config.approve`` the run
  first asks one approval listing them all (``app_approve_intents``: one digest over the list),
  and once approved they run as approved (policy ``auto``; a denied operation, a limit or the
  daily autonomous limit still hold). Without ``approve`` each passes the gates as any write
  (the app's live grants included).
- Per-action intents (with ``permissions``) run one planned run each, each with its own
  approval, whatever the amount. Their permissions must be the operation of their capability
  and among the app's: a mismatch either way is refused at once.
- A grant request is one ``app_grant`` call: a person approves it or nothing is granted.
- Denied or expired → skipped, recorded; the others run.
- The ``result`` hook gets what ran; its intents are follow-ups, at most ``MAX_DEPTH`` levels
  deep (a deeper one is dropped and recorded). It is called back at most ``CALLBACKS`` times per
  app per ``CALLBACK_WINDOW`` (the window resets after that long without a callback); beyond, the
  callback is skipped and recorded, and the executions stand.
- A per-action intent or a grant a person decided is told live (``live.py``):
  ``action:resolved``, then, approved, ``action:executed``; the ``result`` hook's reply goes out
  on ``agent:message``. Each once: a step that had finished before is not told again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from ..channels.agent_chat import OUTSIDE_CHANNELS
from ..events import Origin
from ..policy import Policy
from . import runs
from .grants import DEFAULT_GRANT_TTL
from .hooks import DrivenElsewhereError, Hooks
from .live import ACTION_EXECUTED, ACTION_RESOLVED, AGENT_MESSAGE
from .manifest import Manifest

__all__ = ["CALLBACKS", "CALLBACK_WINDOW", "MAX_DEPTH", "IntentsState", "process_intents"]

MAX_DEPTH = 3
_DONE = frozenset({"completed", "failed", "cancelled"})
CALLBACKS = 3
CALLBACK_WINDOW = timedelta(minutes=2)


@dataclass(slots=True)
class IntentsState:
    waiting: bool = False
    failed: bool = False
    records: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def summary(self) -> str:
        counts: dict[str, int] = {}
        for kind, _ in self.records:
            counts[kind] = counts.get(kind, 0) + 1
        return ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))


@dataclass(frozen=True, slots=True)
class _Planned:
    index: int
    summary: str
    call: dict[str, Any]  # {name, args}
    per_action: bool


async def process_intents(
    hooks: Hooks, manifest: Manifest, base: UUID, intents: list[Any]
) -> IntentsState:
    """Run a hook's intents and their follow-ups; idempotent (every step a derived run).
    ``hooks`` runs the hooks and builds the intent runs' agents; the app's record is its
    ``state``'s."""
    state = IntentsState()
    await _level(hooks, manifest, base, intents, 0, state)
    return state


async def _level(
    hooks: Hooks,
    manifest: Manifest,
    base: UUID,
    intents: list[Any],
    depth: int,
    state: IntentsState,
) -> None:
    if not intents:
        return
    if depth >= MAX_DEPTH:
        for intent in intents:
            summary = intent.get("summary", "") if isinstance(intent, dict) else ""
            state.records.append(("intent_dropped", {"depth": depth + 1, "summary": summary}))
        return
    record = await hooks.state.record(manifest.id)
    caps = hooks.capabilities(manifest, record)
    planned: list[_Planned] = []
    for i, intent in enumerate(intents):
        if not isinstance(intent, dict):
            state.records.append(("intent_invalid", {"index": i}))
            continue
        summary = str(intent.get("summary", ""))[:200]
        if isinstance(intent.get("grant"), dict):
            call = _grant_call(manifest, intent["grant"], summary)
            if isinstance(call, str):
                state.records.append(("intent_refused", {"summary": summary, "why": call}))
            else:
                planned.append(_Planned(i, summary, call, per_action=True))
            continue
        action = intent.get("action")
        if action is None and "execute" in manifest.hooks:
            rid = runs.step_id(str(base), str(depth), str(i), "execute")
            answer = await hooks.run(
                manifest, record, "execute", rid, {"intent": intent, "state": record.state}
            )
            if answer is None:
                state.waiting = True
                return
            action = answer.get("action")
        if not isinstance(action, dict) or not isinstance(action.get("capability"), str):
            state.records.append(("intent_skipped", {"summary": summary, "why": "no action"}))
            continue
        call = {"name": action["capability"], "args": dict(action.get("args") or {})}
        permissions = intent.get("permissions")
        if permissions:
            cap = caps.get(call["name"])
            why = None
            if cap is None:
                why = f"{call['name']} is not one of the app's capabilities"
            elif not isinstance(permissions, list) or cap.operation not in permissions:
                why = f"{call['name']} is {cap.operation}, not {permissions}"
            elif any(p not in manifest.permissions or p != cap.operation for p in permissions):
                why = f"the permissions {permissions} do not match {call['name']}"
            if why is not None:
                state.records.append(("intent_refused", {"summary": summary, "why": why}))
                continue
        planned.append(_Planned(i, summary, call, per_action=bool(permissions)))
    executed = await _run(hooks, manifest, record, base, depth, planned, state)
    if state.waiting or not executed or "result" not in manifest.hooks:
        return
    await _callback(hooks, manifest, base, depth, executed, state)


async def _run(
    hooks: Hooks,
    manifest: Manifest,
    record: Any,
    base: UUID,
    depth: int,
    planned: list[_Planned],
    state: IntentsState,
) -> list[dict[str, Any]]:
    batch = [p for p in planned if not p.per_action]
    groups: list[tuple[UUID, list[_Planned], bool]] = []
    if batch:
        groups.append((runs.step_id(str(base), f"batch/{depth}"), batch, True))
    for p in planned:
        if p.per_action:
            groups.append((runs.step_id(str(base), f"action/{depth}/{p.index}"), [p], False))
    done: list[dict[str, Any]] = []
    for rid, items, is_batch in groups:
        approve = is_batch and manifest.config.approve
        gate = None
        if approve:
            listed = [
                {"summary": p.summary, "capability": p.call["name"], "args": p.call["args"]}
                for p in items
            ]
            gate = {
                "name": "app_approve_intents",
                "args": {"app_id": manifest.id, "intents": listed},
            }
        per_action = not is_batch and items[0].call["name"] != "app_grant"
        agent = await hooks.plan_agent(manifest, record, batch=approve, per_action=per_action)
        title = f"[app {manifest.id}] {'batch' if is_batch else 'action'} at depth {depth + 1}"
        message = runs.plan_message(title, gate=gate, calls=[p.call for p in items])
        origin = tick_origin(hooks.policy, manifest)
        fresh = await hooks.unfinished(rid)
        run = await runs.drive(agent, rid, message, hooks.principal, origin=origin)
        if run is None:
            raise DrivenElsewhereError(rid)
        if run.status not in _DONE:
            state.waiting = True
            continue
        found, _ = await runs.outcomes(agent, rid)
        by_id = {o.tool_use_id: o for o in found}
        gate_outcome = by_id.get("gate")
        for n, p in enumerate(items):
            outcome = by_id.get(f"plan_{n}")
            if fresh and not is_batch and outcome is not None:
                await _resolved(hooks, manifest, outcome)
            if gate is not None and (gate_outcome is None or gate_outcome.status != "executed"):
                status = gate_outcome.status if gate_outcome is not None else "skipped"
            else:
                status = outcome.status if outcome is not None else "skipped"
            detail = {"summary": p.summary, "capability": p.call["name"], "depth": depth + 1}
            state.records.append((f"intent_{status}", detail))
            if status == "failed":
                state.failed = True
            if status in ("executed", "failed"):
                done.append(
                    {**detail, "status": status, "output": outcome.output if outcome else ""}
                )
    return done


async def _resolved(hooks: Hooks, manifest: Manifest, outcome: runs.CallOutcome) -> None:
    """``action:resolved`` for an action a person decided; approved, ``action:executed``."""
    if outcome.approval_id is None:
        return  # refused before any card: nobody was asked
    approved = outcome.status in ("executed", "failed")
    request = {"requestId": outcome.approval_id, "approved": approved}
    await hooks.state.emit(manifest.id, ACTION_RESOLVED, request)
    if approved:
        executed = {**request, "status": outcome.status, "result": outcome.output}
        await hooks.state.emit(manifest.id, ACTION_EXECUTED, executed)


def _grant_call(manifest: Manifest, spec: dict[str, Any], summary: str) -> dict[str, Any] | str:
    operations = spec.get("operations")
    if not isinstance(operations, list) or not operations:
        return "a grant needs operations"
    outside = [op for op in operations if op not in manifest.permissions]
    if outside:
        return f"the app has no permission for {', '.join(map(str, outside))}"
    limits = spec.get("limits") or {}
    try:
        limits_usd = {str(k): str(Decimal(str(v))) for k, v in dict(limits).items()}
    except (InvalidOperation, TypeError, ValueError):
        return "a grant's limits must be USD amounts"
    if set(limits_usd) != set(operations):
        return "a grant needs one limit per operation"
    ttl = spec.get("ttl", DEFAULT_GRANT_TTL)
    if not isinstance(ttl, (int, float)) or ttl <= 0:
        return "a grant's ttl must be a positive number of seconds"
    resources = [str(r) for r in spec.get("resources") or []]
    args = {
        "app_id": manifest.id,
        "summary": summary,
        "operations": [str(o) for o in operations],
        "limits_usd": limits_usd,
        "resources": resources,
        "ttl_seconds": float(ttl),
    }
    return {"name": "app_grant", "args": args}


async def _callback(
    hooks: Hooks,
    manifest: Manifest,
    base: UUID,
    depth: int,
    executed: list[dict[str, Any]],
    state: IntentsState,
) -> None:
    rid = runs.step_id(str(base), f"result/{depth}")
    record = await hooks.state.record(manifest.id)
    fresh = await hooks.unfinished(rid)
    if await hooks.store.get_run(rid) is None:
        now = hooks.clock.now()
        window = list(record.callbacks)
        if window and now - datetime.fromisoformat(window[-1]) >= CALLBACK_WINDOW:
            window = []  # two minutes quiet: the window resets
        if len(window) >= CALLBACKS:
            state.records.append(("callback_skipped", {"depth": depth + 1}))
            await hooks.state.count(manifest.id, "skipped_callbacks")
            return
        record = replace(record, callbacks=(*window, now.isoformat()))
        await hooks.state.save(record)
    context = {"results": executed, "state": record.state, "depth": depth + 1}
    answer = await hooks.run(manifest, record, "result", rid, context)
    if answer is None:
        state.waiting = True
        return
    await hooks.state.apply(manifest, await hooks.state.record(manifest.id), answer, live=fresh)
    said = answer.get("reply")
    if fresh and isinstance(said, str) and said:
        await hooks.state.emit(manifest.id, AGENT_MESSAGE, {"message": said})
    follow = answer.get("intents") or []
    if isinstance(follow, list):
        await _level(hooks, manifest, rid, follow, depth + 1, state)


def message_origin(policy: Policy, manifest: Manifest, channel: str) -> Origin | None:
    """A message to an app from an outside channel (a signed webhook, a Telegram group) is not
    the principal in person: recorded with the app's budget, like a tick's intents."""
    if channel not in OUTSIDE_CHANNELS:
        return None
    budget = tick_origin(policy, manifest).budget
    return Origin(source=f"app:{manifest.id}:{channel}", budget=budget)


def tick_origin(policy: Policy, manifest: Manifest) -> Origin:
    """What an intent run records as its origin. A tick is an outside event: nobody asked for
    its intents, so a write of theirs waits for a person — unless the app's autonomous budget
    allows it: the operations of its ``permissions``, which a person approved when enabling it,
    each up to its ``limits`` (or, with none, what the policy runs on its own). A grant or an
    approved batch (``GrantPolicy``) is a person's approval too."""
    budget: dict[str, Decimal] = {}
    for op in manifest.permissions:
        limit = manifest.limits.get(op)
        if limit is None:
            threshold = policy.threshold(op)
            limit = Decimal(0) if threshold is None else threshold.auto_below
        budget[op] = limit
    return Origin(source=f"app:{manifest.id}", budget=budget)

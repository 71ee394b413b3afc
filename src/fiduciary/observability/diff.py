"""Diff: where two runs diverge, as data and as text.

Two logs are compared event by event, ignoring what is the same for no two runs (``run_id``,
``seq``, ``at``) and what marks a replay or a fork (``replay_of``, ``fork_of``, ``fork_at``,
the model's name in ``run_started``). Streamed text is compared as whole turns, so two models
that split the same words differently do not diverge. Beside the first divergence: the calls
each run made (in order, with their arguments), how each ended, the tier and amount of each
write (a replay's: the tier the original policy would have given), and each run's final text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from ..capabilities import canonical_json
from ..events import (
    Event,
    PendingAction,
    RunCompleted,
    RunFailed,
    TextDelta,
    ThinkingDelta,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
)
from ..stores.base import Store, existing_run

__all__ = ["CallSummary", "Divergence", "RunDiff", "diff", "render_diff"]

_IGNORED = frozenset(
    {
        "run_id",
        "seq",
        "at",
        "replay_of",
        "fork_of",
        "fork_at",
        "model",
        "approval_id",
        "expires_at",
        "tool_use_id",
        "args_digest",
    }
)
# seen only by one kind of run, or noise between two drives of the same conversation
_SKIPPED = frozenset(
    {"usage", "thinking_delta", "thinking_done", "tool_progress", "context_layers", "compaction"}
)


@dataclass(frozen=True, slots=True)
class CallSummary:
    """One call of a run: its name and arguments, and how it ended."""

    name: str
    input: dict[str, Any]
    outcome: str  # ok | error | rejected:<reason> | not_executed | open
    output: str = ""
    # a write's tier (a replay's: the one the original policy would have given) and amount
    tier: str | None = None
    amount_usd: str | None = None

    def same_call(self, other: CallSummary) -> bool:
        return (
            self.name == other.name
            and canonical_json(self.input) == canonical_json(other.input)
            and self.tier == other.tier
            # logs written before tool_call_end recorded a write's amount have none for an
            # auto write: compared when both are known
            and (None in (self.amount_usd, other.amount_usd) or self.amount_usd == other.amount_usd)
        )


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first place the two runs differ: the seq in each (None past a run's end) and the
    compared form of the two events there."""

    seq_a: int | None
    seq_b: int | None
    a: dict[str, Any] | None
    b: dict[str, Any] | None

    @property
    def fields(self) -> list[str]:
        """The fields whose values differ (all of them when one side has no event)."""
        a, b = self.a or {}, self.b or {}
        return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


@dataclass(frozen=True, slots=True)
class RunDiff:
    a: UUID
    b: UUID
    first: Divergence | None
    calls_a: list[CallSummary] = field(default_factory=list)
    calls_b: list[CallSummary] = field(default_factory=list)
    tiers_a: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    tiers_b: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    final_a: str | None = None
    final_b: str | None = None
    status_a: str = ""
    status_b: str = ""

    @property
    def same(self) -> bool:
        return self.first is None

    @property
    def differing_calls(self) -> list[tuple[int, CallSummary | None, CallSummary | None]]:
        """(index, call in a, call in b) wherever the n-th calls differ in name or arguments."""
        out: list[tuple[int, CallSummary | None, CallSummary | None]] = []
        for i in range(max(len(self.calls_a), len(self.calls_b))):
            ca = self.calls_a[i] if i < len(self.calls_a) else None
            cb = self.calls_b[i] if i < len(self.calls_b) else None
            if ca is None or cb is None or not ca.same_call(cb):
                out.append((i, ca, cb))
        return out

    def to_json(self) -> dict[str, Any]:
        def call(c: CallSummary | None) -> dict[str, Any] | None:
            if c is None:
                return None
            return {
                "name": c.name,
                "input": c.input,
                "outcome": c.outcome,
                "tier": c.tier,
                "amount_usd": c.amount_usd,
            }

        first = self.first
        return {
            "a": str(self.a),
            "b": str(self.b),
            "same": self.same,
            "first_divergence": None
            if first is None
            else {
                "seq_a": first.seq_a,
                "seq_b": first.seq_b,
                "fields": first.fields,
                "a": first.a,
                "b": first.b,
            },
            "differing_calls": [
                {"index": i, "a": call(ca), "b": call(cb)} for i, ca, cb in self.differing_calls
            ],
            "calls_a": [call(c) for c in self.calls_a],
            "calls_b": [call(c) for c in self.calls_b],
            "tiers_a": [list(t) for t in self.tiers_a],
            "tiers_b": [list(t) for t in self.tiers_b],
            "final_a": self.final_a,
            "final_b": self.final_b,
            "status_a": self.status_a,
            "status_b": self.status_b,
        }


def _compared(events: list[Event]) -> list[tuple[int, dict[str, Any]]]:
    """The events as compared: text deltas joined per stretch, noise left out."""
    out: list[tuple[int, dict[str, Any]]] = []
    for event in events:
        if event.type in _SKIPPED or isinstance(event, ThinkingDelta):
            continue
        if isinstance(event, TextDelta):
            if out and out[-1][1]["type"] == "text":
                out[-1][1]["text"] += event.text
            else:
                out.append((event.seq, {"type": "text", "text": event.text}))
            continue
        data = json.loads(event.model_dump_json())
        compared = {k: v for k, v in data.items() if k not in _IGNORED}
        if isinstance(event, ToolCallEnd):
            called = _would_have_called(event.output)
            if called is not None:  # a replay's wrapped write: the tier and amount it would have
                compared["tier"], compared["amount_usd"] = (
                    called.get("tier"),
                    called.get("amount_usd"),
                )
        out.append((event.seq, compared))
    return out


def _calls(events: list[Event]) -> list[CallSummary]:
    started: dict[str, ToolCallStart] = {}
    order: list[str] = []
    ended: dict[str, tuple[str, str]] = {}
    tiers: dict[str, tuple[str | None, str | None]] = {}
    for event in events:
        if isinstance(event, ToolCallStart):
            started[event.tool_use_id] = event
            order.append(event.tool_use_id)
        elif isinstance(event, PendingAction):
            amount = None if event.amount_usd is None else str(event.amount_usd)
            tiers[event.tool_use_id] = (event.tier, amount)
        elif isinstance(event, ToolCallEnd):
            outcome = "error" if event.is_error else "ok"
            called = _would_have_called(event.output)
            if called is not None:
                outcome = "not_executed"
                tiers[event.tool_use_id] = (called.get("tier"), called.get("amount_usd"))
            elif event.tier is not None:  # every write's, auto included (older logs: none)
                amount = None if event.amount_usd is None else str(event.amount_usd)
                tiers[event.tool_use_id] = (event.tier, amount)
            ended[event.tool_use_id] = (outcome, event.output)
        elif isinstance(event, ToolCallRejected):
            ended[event.tool_use_id] = (f"rejected:{event.reason}", event.message)
    out = []
    for use in order:
        start = started[use]
        outcome, output = ended.get(use, ("open", ""))
        write = start.kind not in (None, "read", "preview")
        tier, amount = tiers.get(use, ("auto" if write and outcome == "ok" else None, None))
        out.append(CallSummary(start.name, dict(start.input), outcome, output, tier, amount))
    return out


def _would_have_called(output: str) -> dict[str, Any] | None:
    """A replay's record of a write it did not execute (None: not one)."""
    if '"not_executed": "replay"' not in output:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(output)
    except ValueError:
        return None
    called = value.get("would_have_called") if isinstance(value, dict) else None
    return called if isinstance(called, dict) else None


def _tiers(calls: list[CallSummary]) -> list[tuple[str, str | None, str | None]]:
    return [(c.name, c.tier, c.amount_usd) for c in calls if c.tier is not None]


def _final(events: list[Event]) -> str | None:
    for event in reversed(events):
        if isinstance(event, RunCompleted):
            return event.text
        if isinstance(event, RunFailed):
            return f"[{event.reason}] {event.message}"
    return None


async def diff(store: Store, a: UUID, b: UUID) -> RunDiff:
    """Where runs ``a`` and ``b`` diverge (``RunError("not_found")`` for an unknown run)."""
    run_a, run_b = await existing_run(store, a), await existing_run(store, b)
    events_a, events_b = await store.read_events(a), await store.read_events(b)
    left, right = _compared(events_a), _compared(events_b)
    first: Divergence | None = None
    for i in range(max(len(left), len(right))):
        la = left[i] if i < len(left) else None
        rb = right[i] if i < len(right) else None
        if la is not None and rb is not None and la[1] == rb[1]:
            continue
        first = Divergence(
            None if la is None else la[0],
            None if rb is None else rb[0],
            None if la is None else la[1],
            None if rb is None else rb[1],
        )
        break
    calls_a, calls_b = _calls(events_a), _calls(events_b)
    return RunDiff(
        a=a,
        b=b,
        first=first,
        calls_a=calls_a,
        calls_b=calls_b,
        tiers_a=_tiers(calls_a),
        tiers_b=_tiers(calls_b),
        final_a=_final(events_a),
        final_b=_final(events_b),
        status_a=run_a.status,
        status_b=run_b.status,
    )


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else canonical_json(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _from_difference(a: Any, b: Any) -> tuple[str, str]:
    """Two values as text, long ones from a little before where they first differ."""
    ta = a if isinstance(a, str) else canonical_json(a)
    tb = b if isinstance(b, str) else canonical_json(b)
    at = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), None)
    if at is None:
        at = min(len(ta), len(tb))
    start = max(0, at - 40)
    lead = "…" if start else ""
    return lead + _short(ta[start:], 120), lead + _short(tb[start:], 120)


def _call_text(c: CallSummary) -> str:
    tier = "" if c.tier is None else f" [{c.tier}" + (f" ${c.amount_usd}]" if c.amount_usd else "]")
    return f"{c.name}({_short(c.input, 80)}){tier} {c.outcome}"


def render_diff(d: RunDiff) -> str:
    """The diff as plain text (no markup: escape it before printing it through rich)."""
    lines = [f"A {d.a} ({d.status_a})", f"B {d.b} ({d.status_b})"]
    if d.first is None:
        lines.append("the runs do not diverge")
    else:
        f = d.first
        where_a = "after its end" if f.seq_a is None else f"seq {f.seq_a}"
        where_b = "after its end" if f.seq_b is None else f"seq {f.seq_b}"
        kind = (f.a or f.b or {}).get("type", "?")
        lines.append(f"first divergence: A {where_a}, B {where_b} ({kind})")
        if f.a is None or f.b is None or f.a.get("type") != f.b.get("type"):
            lines.append(f"  A: {_short(f.a) if f.a is not None else '(nothing)'}")
            lines.append(f"  B: {_short(f.b) if f.b is not None else '(nothing)'}")
        else:
            for name in f.fields:
                va, vb = _from_difference(f.a.get(name), f.b.get(name))
                lines.append(f"  {name}  A: {va}")
                lines.append(f"  {' ' * len(name)}  B: {vb}")
    differing = d.differing_calls
    if differing:
        lines.append("calls that differ:")
        for i, ca, cb in differing:
            shown_a = "(none)" if ca is None else _call_text(ca)
            shown_b = "(none)" if cb is None else _call_text(cb)
            lines.append(f"  #{i + 1}  A: {shown_a}")
            lines.append(f"       B: {shown_b}")
    else:
        lines.append("calls: the same names, arguments, tiers and amounts")
    if d.tiers_a != d.tiers_b:
        lines.append("tiers of the writes (name, tier, amount USD):")
        lines.append(f"  A: {d.tiers_a or 'none'}")
        lines.append(f"  B: {d.tiers_b or 'none'}")
    if d.final_a != d.final_b:
        lines.append(f"final text A: {_short(d.final_a or '(none)')}")
        lines.append(f"final text B: {_short(d.final_b or '(none)')}")
    else:
        lines.append("final text: the same")
    return "\n".join(lines)

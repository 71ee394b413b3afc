"""The metrics of fiduciary's runs, fed by the spans of each drive (``_spans``).

Counts are per process; a backend sums them. ``fiduciary.approvals.waiting`` goes up where an
approval is asked and down where it is decided — two processes, one sum. The wait is measured
in the process that saw both the request and the decision (a run decided elsewhere: not measured).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TypeVar
from uuid import UUID

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from ..events import Usage

__all__ = ["Metrics"]

K = TypeVar("K")
V = TypeVar("V")


class Metrics:
    """The instruments, made once per tracer."""

    def __init__(self, meter: Meter) -> None:
        self._runs = meter.create_counter(
            "fiduciary.runs", unit="{drive}", description="Drives of runs, by the status they left"
        )
        self._tool_calls = meter.create_counter(
            "fiduciary.tool_calls",
            unit="{call}",
            description="Capability calls, by outcome and tier",
        )
        self._waiting = meter.create_up_down_counter(
            "fiduciary.approvals.waiting",
            unit="{approval}",
            description="Approvals asked, not yet decided",
        )
        self._wait = meter.create_histogram(
            "fiduciary.approvals.wait",
            unit="s",
            description="How long an approval waited for its decision",
        )
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens per model call"
        )
        self._cost = meter.create_counter(
            "fiduciary.model.cost", unit="USD", description="What model calls cost (known prices)"
        )
        self._unknown = meter.create_counter(
            "fiduciary.ledger.unknown_outcomes",
            unit="{call}",
            description="Writes whose outcome is unknown after a crash",
        )
        self._batch = meter.create_histogram(
            "fiduciary.store.commit.batch_size",
            unit="{event}",
            description="Events per group commit",
        )
        self._meter = meter
        self._asked: dict[UUID, datetime] = {}
        # attribute sets, made once each and never changed (the SDK copies what it keeps)
        self._call_sets: dict[tuple[str, str | None, str | None], dict[str, str]] = {}
        self._usage_sets: dict[tuple[str, str], tuple[dict[str, str], ...]] = {}

    def watch_sse_subscribers(self, count: Callable[[], int]) -> None:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(count())]

        self._meter.create_observable_gauge(
            "fiduciary.sse.subscribers",
            [observe],
            unit="{subscriber}",
            description="Open SSE streams of this server",
        )

    def run(self, status: str) -> None:
        self._runs.add(1, {"fiduciary.run.status": status})

    def tool_call(self, outcome: str, tier: str | None, kind: str | None) -> None:
        key = (outcome, tier, kind)
        attributes = self._call_sets.get(key)
        if attributes is None:
            attributes = _remember(
                self._call_sets,
                key,
                {
                    "fiduciary.tool.outcome": outcome.split(":", 1)[0],
                    "fiduciary.tool.tier": tier or "none",
                    "fiduciary.tool.kind": kind or "unknown",
                },
            )
        self._tool_calls.add(1, attributes)

    def pending(self, approval_id: UUID, at: datetime) -> None:
        self._asked[approval_id] = at
        self._waiting.add(1)

    def resolved(self, approval_id: UUID, at: datetime, decision: str) -> None:
        self._waiting.add(-1)
        asked = self._asked.pop(approval_id, None)
        if asked is not None:
            wait = (at - asked).total_seconds()
            self._wait.record(max(wait, 0.0), {"fiduciary.approval.decision": decision})

    def usage(self, event: Usage, provider: str) -> None:
        key = (provider, event.model)
        sets = self._usage_sets.get(key)
        if sets is None:
            base = {"gen_ai.provider.name": provider, "gen_ai.response.model": event.model}
            sets = _remember(
                self._usage_sets,
                key,
                (
                    base,
                    {**base, "gen_ai.token.type": "input"},
                    {**base, "gen_ai.token.type": "output"},
                ),
            )
        base, inputs, outputs = sets
        self._tokens.record(event.input_tokens, inputs)
        self._tokens.record(event.output_tokens, outputs)
        if event.cost_usd is not None:
            self._cost.add(float(event.cost_usd), base)

    def ledger_unknown(self, capability: str) -> None:
        self._unknown.add(1, {"gen_ai.tool.name": capability})

    def batch(self, size: int) -> None:
        self._batch.record(size)


_KEPT = 256  # attribute sets kept per kind (the model names a provider reports are open-ended)


def _remember(sets: dict[K, V], key: K, value: V) -> V:
    if len(sets) >= _KEPT:
        sets.clear()
    sets[key] = value
    return value

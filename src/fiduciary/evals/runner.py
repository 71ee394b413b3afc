"""Running a dataset's cases: one new run each, on an agent made for it; the checks judge it."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..agent import Agent
from ..models.base import Model
from ..testing import approve_all, collect
from .checks import Observed
from .dataset import EvalCase, EvalDataset

__all__ = ["CaseResult", "CheckResult", "EvalReport", "run_dataset"]

MakeAgent = Callable[[], Agent | Awaitable[Agent]]


@dataclass(frozen=True, slots=True)
class CheckResult:
    label: str
    passed: bool
    why: str = ""


@dataclass(slots=True)
class CaseResult:
    name: str
    status: str
    checks: list[CheckResult] = field(default_factory=list)
    error: str = ""  # the case could not run (the agent or the model failed)
    text: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and all(c.passed for c in self.checks)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": self.passed,
            "status": self.status,
            "error": self.error or None,
            "text": self.text,
            "checks": [
                {"check": c.label, "passed": c.passed, "why": c.why or None} for c in self.checks
            ],
        }


@dataclass(slots=True)
class EvalReport:
    name: str
    model: str
    cases: list[CaseResult]

    @property
    def passed(self) -> int:
        return sum(1 for c in self.cases if c.passed)

    @property
    def checks(self) -> tuple[int, int]:
        """(passed, total) over every check of every case."""
        every = [r for c in self.cases for r in c.checks]
        return sum(1 for r in every if r.passed), len(every)

    def as_json(self) -> dict[str, Any]:
        ok, total = self.checks
        return {
            "dataset": self.name,
            "model": self.model,
            "cases": [c.as_json() for c in self.cases],
            "total": {
                "cases": len(self.cases),
                "passed": self.passed,
                "checks": total,
                "checks_passed": ok,
            },
        }


async def _one(dataset: EvalDataset, case: EvalCase, index: int, agent: Agent) -> CaseResult:
    name = case.name or f"case {index + 1}"
    inputs = case.inputs
    try:
        events = await collect(agent.run(inputs.message, principal=inputs.principal))
        run_id = events[0].run_id
        if inputs.approve:
            events += await approve_all(agent, run_id, by=inputs.principal)
        run = await agent.store.get_run(run_id)
        status = run.status if run is not None else "unknown"
    except Exception as exc:  # the agent's or the model's failure is this case's, not the eval's
        return CaseResult(name, "error", error=f"{type(exc).__name__}: {exc}")
    seen = Observed.of(events, status)
    result = CaseResult(name, status, text=seen.text)
    for label, check, arg in dataset.checks(case):
        why = check(seen, arg)
        result.checks.append(CheckResult(label, why is None, why or ""))
    return result


async def run_dataset(
    dataset: EvalDataset,
    make_agent: MakeAgent,
    *,
    model: Model | None = None,
    on_case: Callable[[CaseResult], None] | None = None,
) -> EvalReport:
    """Run every case, one after the other, each on a new agent from ``make_agent`` (its own
    store and books: cases do not share limits or state); ``model`` replaces the agent's."""
    results: list[CaseResult] = []
    used = model.name if model is not None else ""
    for index, case in enumerate(dataset.cases):
        try:
            made = make_agent()
            agent = await made if inspect.isawaitable(made) else made
        except Exception as exc:  # the host's factory: its failure is this case's
            name = case.name or f"case {index + 1}"
            result = CaseResult(name, "error", error=f"{type(exc).__name__}: {exc}")
        else:
            if model is not None:
                agent = agent.with_options(model=model)
            used = used or agent.model.name
            result = await _one(dataset, case, index, agent)
        results.append(result)
        if on_case is not None:
            on_case(result)
    return EvalReport(dataset.name, used, results)

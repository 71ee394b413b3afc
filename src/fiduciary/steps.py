"""Calls made of steps: one card, one approval, each step at most once through the ledger.

A capability declares its plan (``@capability(steps=plan, replay="resume")``: ``plan(args,
ctx)`` returns its ``Step``s, in order) and its handler runs it (``return await
run_steps(ctx, plan(args, ctx))``). The card (``pending_action.steps``) lists each step's
operation, asset and amount; the plan is made from the call's arguments, so the digest the
person approves covers every step.

Each step has its own row in the idempotency ledger (key ``<the call's key>:step<N>``). The
steps run in order: a step the ledger records done is not run again (its recorded result is
passed on), the first failure stops the rest, and the report says which steps ran, which
failed and which did not run. Nothing is undone: a step that ran stays done. A crash mid-way
leaves the call's own row started, so the run's resume calls the handler again (replay
``resume``): the steps done are skipped and the rest run, each once. A step left started by a
crash is asked again only if it is ``keyed`` (its backend acts once per key, as the paper
wallet does); otherwise its outcome is unknown and the steps after it do not run.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from .exceptions import CapabilityError

__all__ = ["CardStep", "Step", "StepBooks", "StepOutcome", "StepsReport", "run_steps"]


class CardStep(BaseModel):
    """One step as the card shows it."""

    model_config = ConfigDict(frozen=True)

    operation: str
    description: str
    asset: str | None = None
    amount: Decimal | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a plan. ``act(key, earlier)`` does it, given the step's own idempotency key
    and the earlier steps' results (as JSON); it raises ``CapabilityError`` to refuse with no
    effect. ``keyed``: ``act`` hands the key to a backend that acts once per key, so a step a
    crash left started may be asked again."""

    operation: str
    description: str
    act: Callable[[str, list[Any]], Any | Awaitable[Any]]
    asset: str | None = None
    amount: Decimal | None = None
    keyed: bool = False

    def shown(self) -> CardStep:
        return CardStep(
            operation=self.operation,
            description=self.description,
            asset=self.asset,
            amount=self.amount,
        )


class StepOutcome(BaseModel):
    """What became of one step."""

    step: int  # 1, 2, ...
    operation: str
    description: str
    status: Literal["done", "failed", "unknown", "not_run"]
    result: Any = None
    error: str | None = None


class StepsReport(BaseModel):
    """The outcome of a plan: ``completed`` when every step is done."""

    completed: bool
    summary: str
    steps: list[StepOutcome]


class StepBooks:
    """The ledger rows of one call's steps (``CallContext.step_books``): begun fenced by the
    run's lease epoch, as the call's own row is."""

    def __init__(
        self,
        begin: Callable[[str], Awaitable[Any]],
        finish: Callable[[str, Literal["done", "failed"], Any, str | None], Awaitable[None]],
    ) -> None:
        self.begin = begin  # the existing row (a LedgerEntry) or None: begun now
        self.finish = finish


class _Context(Protocol):  # a CallContext (which imports this module)
    @property
    def idempotency_key(self) -> str: ...
    @property
    def step_books(self) -> StepBooks | None: ...


async def run_steps(ctx: _Context, steps: Sequence[Step]) -> StepsReport:
    """Run ``steps`` in order, each at most once through the ledger (see the module)."""
    books = ctx.step_books
    if books is None:
        raise CapabilityError("precondition", "steps run only through the gates")
    outcomes: list[StepOutcome] = []
    results: list[Any] = []
    for index, step in enumerate(steps, start=1):
        key = f"{ctx.idempotency_key}:step{index}"
        base = _Base(index, step.operation, step.description)
        if outcomes and outcomes[-1].status != "done":
            outcomes.append(base.outcome(status="not_run"))
            continue
        existing = await books.begin(key)
        if existing is not None and existing.status == "done":
            results.append(existing.result)
            outcomes.append(base.outcome(status="done", result=existing.result))
            continue
        if existing is not None and not (existing.status == "started" and step.keyed):
            status: Literal["failed", "unknown"] = (
                "failed" if existing.status == "failed" else "unknown"
            )
            outcomes.append(base.outcome(status=status, error=existing.error))
            continue
        try:
            done = step.act(key, list(results))
            if inspect.isawaitable(done):
                done = await done
        except CapabilityError as exc:  # refused before any effect
            await books.finish(key, "failed", None, exc.message)
            outcomes.append(base.outcome(status="failed", error=exc.message))
            continue
        except Exception as exc:  # the step may have acted: its outcome is unknown
            error = f"{type(exc).__name__}: the outcome of this step is unknown"
            await books.finish(key, "failed", None, json.dumps({"unknown": True, "error": error}))
            outcomes.append(base.outcome(status="unknown", error=error))
            continue
        result = to_jsonable_python(done)
        await books.finish(key, "done", result, None)
        results.append(result)
        outcomes.append(base.outcome(status="done", result=result))
    return StepsReport(
        completed=all(o.status == "done" for o in outcomes),
        summary=_summary(outcomes),
        steps=outcomes,
    )


@dataclass(frozen=True, slots=True)
class _Base:
    step: int
    operation: str
    description: str

    def outcome(self, *, status: Any, result: Any = None, error: str | None = None) -> StepOutcome:
        return StepOutcome(
            step=self.step,
            operation=self.operation,
            description=self.description,
            status=status,
            result=result,
            error=error,
        )


def _summary(outcomes: list[StepOutcome]) -> str:
    parts = []
    for o in outcomes:
        said = {"done": "done", "failed": "failed", "unknown": "outcome unknown"}
        text = said.get(o.status, "not run")
        why = f" ({o.error})" if o.error and o.status != "unknown" else ""
        parts.append(f"step {o.step} ({o.description}): {text}{why}")
    if all(o.status == "done" for o in outcomes):
        return "Every step is done: " + "; ".join(parts) + "."
    return "; ".join(parts) + ". Nothing was undone: the steps done stay done."

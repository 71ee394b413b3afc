"""Calibration of a judge on labelled events: per-route precision and recall, the Brier score,
and a reliability diagram (does "0.8" mean 80 %?).

A labelled file is JSON lines: ``{"id", "type", "source", "principal", "at", "data", "label"}``
with optional ``"context"`` (earlier events: ``{"role", "type", "data"}``) and ``"predicates"``
(``{"name": 0 | 1}``). Each line is judged alone, its context before it in the window.

The Brier score here is the multi-class one: the mean over events of the sum over routes of
``(p_route - [route is the label])**2`` (0 is perfect, 2 the worst). Per route, the Brier score
is the mean over events of that route's term alone (0 best, 1 worst), so the routes' scores add
up to the overall one. The reliability diagram pools every (event, route) pair: the predicted
probability against how often that route was the label, in ten bins; the same bins are also
kept per route (a judge can be well calibrated overall and not on the route that matters).
Drawing it needs matplotlib (the ``plot`` extra).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .judge import Judge
from .types import (
    JudgeInput,
    Predicate,
    RouteOffer,
    WindowEvent,
)

__all__ = [
    "Labelled",
    "Report",
    "evaluate",
    "read_labelled",
    "reliability_bins",
    "reliability_png",
    "scripted_answer",
]

BINS = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class Labelled:
    id: str
    judge_input: JudgeInput
    label: str


@dataclass(slots=True, kw_only=True)
class Report:
    routes: list[str]
    count: int = 0
    correct: int = 0
    brier: float = 0.0
    precision: dict[str, float | None] = field(default_factory=dict)
    recall: dict[str, float | None] = field(default_factory=dict)
    support: dict[str, int] = field(default_factory=dict)
    bins: list[dict[str, float]] = field(default_factory=list)
    brier_by_route: dict[str, float] = field(default_factory=dict)
    bins_by_route: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    failures: int = 0
    model: str = ""

    @property
    def accuracy(self) -> float:
        return self.correct / self.count if self.count else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "events": self.count,
            "failures": self.failures,
            "accuracy": round(self.accuracy, 4),
            "brier": round(self.brier, 4),
            "brier_by_route": {k: round(v, 4) for k, v in self.brier_by_route.items()},
            "precision": {k: _round(v) for k, v in self.precision.items()},
            "recall": {k: _round(v) for k, v in self.recall.items()},
            "support": self.support,
            "reliability": self.bins,
            "reliability_by_route": self.bins_by_route,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def read_labelled(
    path: Path,
    *,
    routes: Sequence[str] = ("act", "notify", "drop"),
    predicates: Sequence[Predicate] = (),
) -> list[Labelled]:
    """The labelled events of ``path`` as judge inputs offering ``routes``."""
    offer = tuple(RouteOffer(route=r) for r in routes)
    out: list[Labelled] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        raw = json.loads(line)
        if raw["label"] not in routes:
            raise ValueError(f"{path}:{number}: label {raw['label']!r} is not one of {routes}")
        at = datetime.fromisoformat(raw["at"])
        window = [
            WindowEvent(
                role=c.get("role", "context"), type=c["type"], at=at, data=c.get("data", {})
            )
            for c in raw.get("context", [])
        ]
        window.append(
            WindowEvent(role=raw.get("role", "context"), type=raw["type"], at=at, data=raw["data"])
        )
        facts = {"source": raw.get("source", ""), "principal": raw.get("principal")}
        out.append(
            Labelled(
                id=raw["id"],
                label=raw["label"],
                judge_input=JudgeInput(
                    routes=offer, window=tuple(window), predicates=tuple(predicates), facts=facts
                ),
            )
        )
    return out


async def evaluate(judge: Judge, labelled: Sequence[Labelled], routes: Sequence[str]) -> Report:
    """Judge every labelled event and score the answers (a failed judgment counts as wrong,
    with a uniform probability over the routes)."""
    report = Report(routes=list(routes), model=judge.name)
    predicted: list[str | None] = []
    pairs: dict[str, list[tuple[float, int]]] = {r: [] for r in routes}
    for item in labelled:
        try:
            judgment = await judge(item.judge_input)
            route: str | None = judgment.route
            probabilities = dict(judgment.probabilities)
        except Exception:
            report.failures += 1
            route = None
            probabilities = {}
        if not probabilities:
            probabilities = {r: (1.0 if r == route else 0.0) for r in routes} if route else {}
        if not probabilities:
            probabilities = {r: 1 / len(routes) for r in routes}
        predicted.append(route)
        for r in routes:
            pairs[r].append((probabilities.get(r, 0.0), 1 if r == item.label else 0))
    report.count = len(labelled)
    for r in routes:
        terms = sum((p - hit) ** 2 for p, hit in pairs[r])
        report.brier_by_route[r] = terms / len(labelled) if labelled else 0.0
        report.bins_by_route[r] = reliability_bins(pairs[r])
    report.brier = sum(report.brier_by_route.values())
    report.bins = reliability_bins([pair for r in routes for pair in pairs[r]])
    report.correct = sum(1 for p, item in zip(predicted, labelled, strict=True) if p == item.label)
    for r in routes:
        chosen = sum(1 for p in predicted if p == r)
        actual = sum(1 for item in labelled if item.label == r)
        both = sum(1 for p, i in zip(predicted, labelled, strict=True) if p == r == i.label)
        report.precision[r] = both / chosen if chosen else None
        report.recall[r] = both / actual if actual else None
        report.support[r] = actual
    return report


def reliability_bins(pairs: Sequence[tuple[float, int]]) -> list[dict[str, float]]:
    """(predicted probability, 1 if that route was the label) pairs in ten bins: each non-empty
    bin's bounds, count, mean predicted probability and observed frequency."""
    bins: list[dict[str, float]] = []
    for b in range(BINS):
        low, high = b / BINS, (b + 1) / BINS
        inside = [(p, h) for p, h in pairs if low <= p < high or (b == BINS - 1 and p == 1.0)]
        if inside:
            bins.append(
                {
                    "low": low,
                    "high": high,
                    "count": len(inside),
                    "predicted": round(sum(p for p, _ in inside) / len(inside), 4),
                    "observed": round(sum(h for _, h in inside) / len(inside), 4),
                }
            )
    return bins


def reliability_png(report: Report, path: Path) -> None:
    """Draw the reliability diagram of ``report`` to ``path`` (needs the ``plot`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(
            "the reliability diagram needs the 'plot' extra: pip install 'fiduciary[plot]'"
        ) from exc
    figure, axes = plt.subplots(figsize=(5, 5), dpi=100)
    axes.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfectly calibrated")
    xs = [b["predicted"] for b in report.bins]
    ys = [b["observed"] for b in report.bins]
    sizes = [
        20 + 180 * b["count"] / max(1, max(c["count"] for c in report.bins)) for b in report.bins
    ]
    axes.plot(xs, ys, marker="o", color="tab:blue", label=f"{report.model}, every route")
    axes.scatter(xs, ys, s=sizes, color="tab:blue", alpha=0.4)
    colors = ("tab:red", "tab:orange", "tab:green", "tab:purple", "tab:brown")
    for i, route in enumerate(report.routes):
        color = colors[i % len(colors)]
        bins = report.bins_by_route.get(route, [])
        axes.plot(
            [b["predicted"] for b in bins],
            [b["observed"] for b in bins],
            marker=".",
            linewidth=1,
            color=color,
            label=f"{route} (Brier {report.brier_by_route.get(route, 0.0):.3f})",
        )
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1)
    axes.set_xlabel("predicted probability of a route")
    axes.set_ylabel("how often that route was the label")
    axes.set_title(
        f"{report.count} events · Brier {report.brier:.3f} · accuracy {report.accuracy:.0%}"
    )
    axes.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)


def scripted_answer(system: str, prompt: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The scripted model's answer for the pipeline check: a keyword rule on the last event of
    the window, sure of itself in proportion to how plain the case is. Not a judge to use."""
    routes: list[str] = schema["properties"]["route"]["enum"]
    window = json.loads(prompt).get("window") or [{}]
    last = window[-1]
    kind = str(last.get("type", ""))
    data = last.get("data") or {}
    route, confidence = "drop", 0.6
    if kind in ("unknown_outcome", "health_factor_low"):
        route, confidence = "act", 0.75
    elif kind in ("run_failed_budget", "approval_expired", "login_new_device"):
        route, confidence = "notify", 0.7
    elif kind == "price_move" and abs(float(data.get("change_24h_pct", 0))) >= 10:
        route, confidence = "notify", 0.55
    elif kind == "invoice_due":
        route, confidence = "act", 0.5
    if route not in routes:
        route = routes[0]
    rest = (1 - confidence) / max(1, len(routes) - 1)
    probabilities = {r: (confidence if r == route else rest) for r in routes}
    answer: dict[str, Any] = {"route": route, "probabilities": probabilities}
    if "predicates" in schema["properties"]:
        names = schema["properties"]["predicates"]["required"]
        answer["predicates"] = {n: 0.5 for n in names}
    return answer

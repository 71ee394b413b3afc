"""Calibration: the metrics, the shipped labelled set, ``fiduciary attention eval``."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fiduciary.attention.evaluation import Labelled, evaluate, read_labelled
from fiduciary.attention.labelled import make
from fiduciary.attention.types import JudgeInput, Judgment, RouteOffer, WindowEvent
from fiduciary.cli.app import app

ROUTES = ("act", "drop")
SHIPPED = Path(make.__file__).with_name("events.jsonl")


def item(i: int, label: str) -> Labelled:
    event = WindowEvent(role="context", type=f"t{i}", at=datetime(2026, 1, 1, tzinfo=UTC))
    offer = tuple(RouteOffer(route=r) for r in ROUTES)
    return Labelled(id=str(i), label=label, judge_input=JudgeInput(routes=offer, window=(event,)))


class Table:
    """Answers from a table keyed by the event type."""

    name = "table"

    def __init__(self, answers: dict[str, tuple[str, float]]) -> None:
        self.answers = answers

    async def __call__(self, judge_input: JudgeInput) -> Judgment:
        route, p_act = self.answers[judge_input.window[-1].type]
        return Judgment(route=route, probabilities={"act": p_act, "drop": 1 - p_act})


async def test_precision_recall_and_brier_by_hand() -> None:
    items = [item(0, "act"), item(1, "act"), item(2, "drop"), item(3, "drop")]
    judge = Table(
        {"t0": ("act", 0.9), "t1": ("drop", 0.4), "t2": ("act", 0.6), "t3": ("drop", 0.2)}
    )
    report = await evaluate(judge, items, ROUTES)
    assert report.precision == {"act": 0.5, "drop": 0.5}
    assert report.recall == {"act": 0.5, "drop": 0.5}
    # per event: 2*(1-p_right)^2 -> 2*.01, 2*.36, 2*.36, 2*.04
    assert report.brier == pytest.approx((0.02 + 0.72 + 0.72 + 0.08) / 4)
    assert report.accuracy == 0.5
    assert sum(b["count"] for b in report.bins) == 8


async def test_brier_and_reliability_bins_per_route_by_hand() -> None:
    routes = ("act", "notify", "drop")
    offer = tuple(RouteOffer(route=r) for r in routes)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    items = [
        Labelled(
            id=str(i),
            label=label,
            judge_input=JudgeInput(
                routes=offer, window=(WindowEvent(role="context", type=f"t{i}", at=at),)
            ),
        )
        for i, label in enumerate(("act", "drop"))
    ]
    answers = {
        "t0": {"act": 0.7, "notify": 0.2, "drop": 0.1},
        "t1": {"act": 0.5, "notify": 0.3, "drop": 0.2},
    }

    class Fixed:
        name = "fixed"

        async def __call__(self, judge_input: JudgeInput) -> Judgment:
            probabilities = answers[judge_input.window[-1].type]
            return Judgment(
                route=max(probabilities, key=probabilities.__getitem__), probabilities=probabilities
            )

    report = await evaluate(Fixed(), items, routes)
    # act: (0.7-1)^2, (0.5-0)^2; notify: 0.2^2, 0.3^2; drop: 0.1^2, (0.2-1)^2
    assert report.brier_by_route == pytest.approx({"act": 0.17, "notify": 0.065, "drop": 0.325})
    assert report.brier == pytest.approx(0.56)
    assert report.bins_by_route["act"] == [
        {"low": 0.5, "high": 0.6, "count": 1, "predicted": 0.5, "observed": 0.0},
        {"low": 0.7, "high": 0.8, "count": 1, "predicted": 0.7, "observed": 1.0},
    ]
    assert report.bins_by_route["drop"] == [
        {"low": 0.1, "high": 0.2, "count": 1, "predicted": 0.1, "observed": 0.0},
        {"low": 0.2, "high": 0.3, "count": 1, "predicted": 0.2, "observed": 1.0},
    ]
    assert [b["count"] for b in report.bins_by_route["notify"]] == [1, 1]
    shown = report.as_json()
    assert shown["brier_by_route"] == {"act": 0.17, "notify": 0.065, "drop": 0.325}
    assert shown["reliability_by_route"] == report.bins_by_route


async def test_a_failed_judgment_counts_as_wrong_and_uniform() -> None:
    class Broken:
        name = "broken"

        async def __call__(self, judge_input: JudgeInput) -> Judgment:
            raise RuntimeError("down")

    report = await evaluate(Broken(), [item(0, "act")], ROUTES)
    assert (report.failures, report.correct, report.brier) == (1, 0, 0.5)


def test_the_shipped_set_is_large_valid_and_reproducible() -> None:
    lines = [json.loads(x) for x in SHIPPED.read_text().splitlines()]
    assert len(lines) >= 200
    assert {x["label"] for x in lines} == {"act", "notify", "drop"}
    assert len({x["id"] for x in lines}) == len(lines)
    regenerated = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in make.make())
    assert regenerated == SHIPPED.read_text()
    items = read_labelled(SHIPPED)
    assert all("note" not in json.dumps(i.judge_input.window[-1].data) for i in items)


def test_eval_with_the_scripted_model_prints_the_figures_and_draws(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "reliability.png"
    result = CliRunner().invoke(
        app, ["attention", "eval", "--model", "scripted", "--png", str(png), "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["events"] == len(SHIPPED.read_text().splitlines())
    assert report["failures"] == 0
    assert set(report["precision"]) == {"act", "notify", "drop"}
    assert 0 < report["brier"] < 2
    assert png.read_bytes().startswith(b"\x89PNG")


def test_eval_prints_brier_and_reliability_per_route() -> None:
    as_json = CliRunner().invoke(app, ["attention", "eval", "--model", "scripted", "--json"])
    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.output)
    by_route = report["brier_by_route"]
    assert set(by_route) == {"act", "notify", "drop"}
    assert sum(by_route.values()) == pytest.approx(report["brier"], abs=1e-3)
    bins = report["reliability_by_route"]
    assert set(bins) == {"act", "notify", "drop"}
    assert all(sum(b["count"] for b in bins[r]) == report["events"] for r in bins)
    text = CliRunner().invoke(app, ["attention", "eval", "--model", "scripted"])
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    for route in ("act", "notify", "drop"):
        (line,) = [x for x in lines if x.startswith(f"  {route} ") and "precision" in x]
        assert line.endswith(f"Brier {by_route[route]:.4f}")
        (shown,) = [x for x in lines if x.startswith(f"  {route} ") and " -> " in x]
        first = bins[route][0]
        assert shown.split()[1:4] == [
            f"{first['low']:.1f}-{first['high']:.1f}:",
            f"{first['predicted']:.2f}",
            "->",
        ]
    assert "reliability by route (bin: mean predicted -> observed, pairs)" in lines


@pytest.mark.live
@pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"), reason="ANTHROPIC_API_KEY is not set")
def test_live_calibration_with_a_real_model(tmp_path: Path) -> None:
    model = os.environ.get("FIDUCIARY_LIVE_JUDGE", "anthropic:claude-haiku-4-5")
    result = CliRunner().invoke(
        app, ["attention", "eval", "--model", model, "--json", "--limit", "60"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["failures"] == 0
    assert report["brier"] < 0.5  # better than a uniform guess over three routes (0.667)

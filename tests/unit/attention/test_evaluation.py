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

"""``fiduciary attention run --config`` and ``decisions``."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import pytest
from typer.testing import CliRunner

from fiduciary.cli.app import app
from fiduciary.events import RunFailed, RunStarted, UserMessage
from fiduciary.stores.base import RunRecord
from fiduciary.stores.sqlite import SQLiteStore

runner = CliRunner()

JUDGE_MODULE = """
from fiduciary.attention.testing import RuleJudge

def make():
    return RuleJudge(lambda judge_input: "notify", name="rules")
"""

CONFIG = """
db = "runs.sqlite3"
judge = "{module}:make"

[routes.notify]
do = "notify"
criterion = "a person should look"
message = "Budget ran out in run {{data}}"

[routes.drop]
do = "drop"

[sources.fiduciary]
every = 1
"""


async def failed_run(db: Path) -> None:
    store = await SQLiteStore.open(db)
    rid = uuid4()
    now = datetime.now(UTC)
    run = RunRecord(
        run_id=rid, principal="alice", status="failed", created_at=now, updated_at=now, epoch=1
    )
    await store.create_run(
        run,
        [
            RunStarted(
                run_id=rid,
                seq=1,
                at=now,
                principal="alice",
                capabilities=[],
                model="m",
                allowed_kinds=[],
            ),
            UserMessage(run_id=rid, seq=2, at=now, text="go"),
            RunFailed(run_id=rid, seq=3, at=now, reason="budget", message="over budget"),
        ],
    )
    await store.close()


def test_attention_run_once_then_decisions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"judge_{uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(JUDGE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "attention.toml"
    config.write_text(CONFIG.format(module=module))
    asyncio.run(failed_run(tmp_path / "runs.sqlite3"))
    result = runner.invoke(app, ["attention", "run", "--config", str(config), "--once"])
    assert result.exit_code == 0, result.output
    assert "attention Budget ran out in run" in result.output
    assert "#1 run_failed_budget (fiduciary) → notify [notify 0.80, drop 0.20] notified" in (
        result.output
    )
    again = runner.invoke(app, ["attention", "run", "--config", str(config), "--once"])
    assert again.exit_code == 0
    assert "#2" not in again.output  # the same failure is not decided twice
    listed = runner.invoke(app, ["attention", "decisions", "--config", str(config), "--json"])
    (line,) = listed.output.splitlines()
    assert json.loads(line)["event_type"] == "run_failed_budget"


def test_the_scripted_model_judges_offline_without_dead_letters(tmp_path: Path) -> None:
    """``model = "scripted"`` is the offline judge: a decision per event, no dead letter."""
    config = tmp_path / "attention.toml"
    config.write_text(
        CONFIG.replace('judge = "{module}:make"', 'model = "scripted"').format(module="")
    )
    asyncio.run(failed_run(tmp_path / "runs.sqlite3"))
    result = runner.invoke(app, ["attention", "run", "--config", str(config), "--once"])
    assert result.exit_code == 0, result.output
    assert "dead letter" not in result.output
    listed = runner.invoke(app, ["attention", "decisions", "--config", str(config), "--json"])
    (line,) = listed.output.splitlines()
    decision = json.loads(line)
    assert (decision["kind"], decision["route"], decision["model"]) == (
        "decision",
        "notify",
        "scripted",
    )
    assert decision["action"] == "notified"


def test_a_file_source_without_a_path_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "attention.toml"
    config.write_text('model = "scripted"\n[routes.drop]\ndo = "drop"\n[sources.file]\nevery = 1\n')
    result = runner.invoke(app, ["attention", "run", "--config", str(config)])
    assert result.exit_code == 2
    assert result.output == 'error: sources.file needs path = "events.jsonl" (a JSON lines file)\n'


def test_a_bad_config_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "attention.toml"
    config.write_text('model = "scripted"\n')
    result = runner.invoke(app, ["attention", "run", "--config", str(config)])
    assert result.exit_code == 2
    assert "needs at least one [routes.NAME] table" in result.output


def test_decisions_before_any_run_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    config = tmp_path / "attention.toml"
    config.write_text(CONFIG.format(module="absent"))
    result = runner.invoke(app, ["attention", "decisions", "--config", str(config)])
    assert result.exit_code == 2
    assert result.output == (
        f"error: no attention record at {tmp_path / 'runs.sqlite3'} yet: "
        f"fiduciary attention run --config {config} makes it\n"
    )
    assert list(tmp_path.iterdir()) == [config]


@pytest.mark.parametrize("every", ['"soon"', "0", "true"])
def test_a_source_polling_at_a_bad_interval_is_one_line(tmp_path: Path, every: str) -> None:
    config = tmp_path / "attention.toml"
    config.write_text(
        f'model = "scripted"\n[routes.drop]\ndo = "drop"\n[sources.fiduciary]\nevery = {every}\n'
    )
    result = runner.invoke(app, ["attention", "run", "--config", str(config), "--once"])
    assert result.exit_code == 2
    assert result.output == "error: sources.fiduciary.every must be a number of seconds above 0\n"

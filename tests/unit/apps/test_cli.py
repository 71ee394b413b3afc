"""``fiduciary apps``: the sample apps on the paper wallet in one SQLite file."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner, Result

from fiduciary.cli.app import app

runner = CliRunner()


def cli(db: Path, *args: str) -> Result:
    return runner.invoke(app, ["apps", *args, "--db", str(db)], env={"COLUMNS": "200"})


def test_enable_tick_and_logs_of_the_dca_sample(tmp_path: Path) -> None:
    db = tmp_path / "f.sqlite3"
    listed = cli(db, "list")
    assert listed.exit_code == 0, listed.output
    assert "Dollar-cost averaging" in listed.output
    assert cli(db, "enable", "dca").output == "dca: enabled\n"
    ticked = cli(db, "tick", "dca", "--yes")
    assert ticked.exit_code == 0, ticked.output
    assert "approved" in ticked.output
    assert ticked.output.splitlines()[-1].endswith(": ran (intent_executed 1)")
    logs = cli(db, "logs", "dca")
    assert " intent_executed " in logs.output
    shown = cli(db, "show", "dca")
    assert '"model_calls": 1' in shown.output


def test_an_app_with_permissions_waits_for_approval_to_be_enabled(tmp_path: Path) -> None:
    db = tmp_path / "f.sqlite3"
    waiting = cli(db, "enable", "sweeper")
    assert "pending " in waiting.output
    assert "app_enable" in waiting.output
    assert waiting.output.splitlines()[-1] == "sweeper: waiting for approval"
    assert cli(db, "enable", "sweeper", "--yes").output.splitlines()[-1] == "sweeper: enabled"
    assert cli(db, "disable", "sweeper").output == "sweeper: disabled\n"


def test_an_unknown_app_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    result = cli(tmp_path / "f.sqlite3", "show", "nope")
    assert result.exit_code == 2
    assert "no app named 'nope'" in result.output

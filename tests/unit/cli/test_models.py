"""The model a demo or chat runs is checked before anything starts: a bad name, from
``--model`` or ``FIDUCIARY_MODEL``, and a provider without its API key stop it at once, with one
line that says why (nothing else printed, no database made)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import fiduciary

pytestmark = pytest.mark.timeout(120)

BOGUS = (
    "error: a model string is PROVIDER:MODEL (or 'scripted'); got 'bogus'. Providers: "
    "anthropic, openai, openai-compatible, gemini, claude-cli, codex-cli, scripted\n"
)


@pytest.mark.parametrize("command", ["demo", "chat"])
def test_fiduciary_model_bogus_fails_like_model_bogus(tmp_path: Path, command: str) -> None:
    db = tmp_path / "x.sqlite3"
    by_option = fiduciary(command, "--db", db, "--model", "bogus")
    by_env = fiduciary(command, "--db", db, env={"FIDUCIARY_MODEL": "bogus"})
    for result in (by_option, by_env):
        assert (result.returncode, result.stdout, result.stderr) == (2, "", BOGUS)
    assert not db.exists()


@pytest.mark.parametrize(
    ("name", "variable"),
    [
        ("anthropic:claude-sonnet-4-6", "ANTHROPIC_API_KEY"),
        ("openai:gpt-5.1", "OPENAI_API_KEY"),
        ("gemini:gemini-2.5-flash", "GEMINI_API_KEY or GOOGLE_API_KEY"),
    ],
)
def test_a_missing_key_is_reported_once_before_the_demo_starts(
    tmp_path: Path, name: str, variable: str
) -> None:
    db = tmp_path / "x.sqlite3"
    for result in (
        fiduciary("demo", "--db", db, env={"FIDUCIARY_MODEL": name}),
        fiduciary("demo", "--db", db, "--model", name),
    ):
        assert result.returncode == 2
        assert result.stdout == ""  # no balances, no panel
        assert result.stderr == f"error: the model {name!r} needs an API key: set {variable}\n"
    assert not db.exists()


def test_the_model_option_wins_over_the_environment(tmp_path: Path) -> None:
    db = tmp_path / "x.sqlite3"
    result = fiduciary(
        "demo", "--yes", "--db", db, "--model", "scripted", env={"FIDUCIARY_MODEL": "bogus"}
    )
    assert result.returncode == 0, result.stderr
    assert "Model: scripted" in result.stdout

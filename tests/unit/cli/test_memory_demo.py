"""The wallet remembers across demos, and a person sees and deletes what it keeps: the real
``fiduciary demo`` twice on one database, then ``fiduciary memory list|forget``."""

from __future__ import annotations

import io
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import pytest
from rich.console import Console

from fiduciary.cli.terminal import Renderer
from fiduciary.events import ContextLayers, TodoItem, TodoUpdate

from .support import fiduciary

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def two_demos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    db = tmp_path_factory.mktemp("remember") / "demo.sqlite3"
    first = fiduciary("demo", "--yes", "--db", db, columns=200)
    assert first.returncode == 0, first.stderr
    second = fiduciary("demo", "--yes", "--db", db, columns=200)
    assert second.returncode == 0, second.stderr
    return db, first.stdout, second.stdout


def test_the_second_demo_shows_the_financial_context_and_a_recalled_memory(
    two_demos: tuple[Path, str, str],
) -> None:
    _, first, second = two_demos
    # the snapshot of the books, each turn, without its tags
    assert "◇ context:" in first
    assert "Net worth: $" in second
    assert "<financial_context>" not in second
    # nothing to recall at the first demo's first message; the second's recalls the first demo
    opening = first.split("Please send 75 USDC", 1)[0]
    assert "◇ context:" in opening
    assert "◇ recalled" not in opening
    again = second.split("Please send 75 USDC", 1)[0]
    assert "◇ recalled" in again
    recalled = again.split("◇ recalled", 1)[1].splitlines()[1:]
    assert any(line.startswith("    · You had 1,000.00 USDC available.") for line in recalled)


def test_memory_list_shows_the_advice_and_the_ledger_facts(
    two_demos: tuple[Path, str, str],
) -> None:
    db = two_demos[0]
    shown = fiduciary("memory", "list", "--db", db, "--principal", "demo-user", "--json")
    assert shown.returncode == 0, shown.stderr
    records = [json.loads(line) for line in shown.stdout.splitlines()]
    kinds = {r["kind"] for r in records}
    assert kinds == {"advice", "fact"}
    facts = [r["text"] for r in records if r["kind"] == "fact"]
    # replaced after each run, never duplicated: two demos paid the landlord twice
    assert len(facts) == len(set(facts))
    assert any(f.startswith("fact: paid 0x7a3b") and "2 times" in f for f in facts), facts
    only = fiduciary("memory", "list", "--db", db, "--principal", "demo-user", "--kind", "fact")
    assert only.returncode == 0, only.stderr
    assert "advice" not in only.stdout
    assert "fact" in only.stdout
    nobody = fiduciary("memory", "list", "--db", db, "--principal", "[bold]eve")
    assert nobody.stdout == "nothing remembered about [bold]eve\n"


def test_memory_forget_deletes_one_record_of_that_principal_only(
    tmp_path: Path, two_demos: tuple[Path, str, str]
) -> None:
    db = tmp_path / "copy.sqlite3"
    with sqlite3.connect(two_demos[0]) as source, sqlite3.connect(db) as target:
        source.backup(target)
    listed = fiduciary("memory", "list", "--db", db, "--principal", "demo-user", "--json")
    record_id = json.loads(listed.stdout.splitlines()[0])["record_id"]
    other = fiduciary("memory", "forget", record_id, "--principal", "mallory", "--db", db)
    assert other.returncode == 1
    assert f"no record {record_id} in the memory of mallory" in other.stderr
    gone = fiduciary("memory", "forget", record_id, "--principal", "demo-user", "--db", db)
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout == f"forgot {record_id} (demo-user)\n"
    after = fiduciary("memory", "list", "--db", db, "--principal", "demo-user", "--json")
    assert record_id not in after.stdout
    assert len(after.stdout.splitlines()) == len(listed.stdout.splitlines()) - 1
    bad = fiduciary("memory", "forget", "nope", "--principal", "demo-user", "--db", db)
    assert bad.returncode == 2
    assert "not a record id: 'nope'" in bad.stderr
    missing = fiduciary("memory", "list", "--db", tmp_path / "none.sqlite3")
    assert missing.returncode == 2
    assert "no database at" in missing.stderr


def test_the_terminal_shows_layers_and_todos_literally_one_line_each() -> None:
    out = Console(file=io.StringIO(), width=60, no_color=True)
    render = Renderer(out)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    render(
        ContextLayers(
            run_id=uuid4(),
            seq=3,
            at=at,
            context="<financial_context>\nNet worth: [red]$5[/red]\n</financial_context>",
            recalled=["[bold]paid Alice[/bold] " + "and more " * 20],
        )
    )
    render(
        TodoUpdate(
            run_id=uuid4(),
            seq=4,
            at=at,
            tool_use_id="c1",
            todos=[
                TodoItem(text="read the [x] balance", status="done"),
                TodoItem(text="save 20 USDC", status="in_progress"),
                TodoItem(text="report"),
            ],
        )
    )
    lines = out.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert lines[:3] == ["  ◇ context:", "    Net worth: [red]$5[/red]", "  ◇ recalled (1):"]
    assert lines[3].startswith("    · [bold]paid Alice[/bold] and more")
    assert lines[3].endswith("…")
    assert len(lines[3]) <= 60
    assert lines[4:] == [
        "  ☰ to do:",
        "    ✓ read the [x] balance",
        "    ▸ save 20 USDC",
        "    ○ report",
    ]

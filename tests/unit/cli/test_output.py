"""What the inspection commands print, as a person sees it at 80 columns or through a pipe."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .support import argv, environment, fiduciary

pytestmark = pytest.mark.timeout(120)


def test_export_into_a_closed_pipe_says_nothing(demo_db: Path) -> None:
    """``fiduciary runs export RUN | head``: the reader went away before the end."""
    run = fiduciary("runs", "list", "--json", "--db", demo_db).stdout.split('"run_id": "')[1][:8]
    read, write = os.pipe()
    os.close(read)  # head has read its lines and exited
    try:
        result = subprocess.run(
            argv("runs", "export", run, "--db", demo_db),
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(),
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert result.stderr == ""
    assert result.returncode == 141  # as a command killed by SIGPIPE


def test_runs_list_keeps_each_run_on_one_line_at_80_columns(demo_db: Path) -> None:
    result = fiduciary("runs", "list", "--db", demo_db, columns=80)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2  # the header and the one run
    assert all(len(line) <= 80 for line in lines)
    assert lines[1].split()[1:3] == ["demo-user", "completed"]
    assert lines[1].rstrip().endswith("…")
    assert "What's my balance" in lines[1]
    wide = fiduciary("runs", "list", "--db", demo_db, columns=200).stdout.splitlines()
    assert wide[1].rstrip().endswith("Put 20 USDC into savings.")  # whole when it fits


def test_export_names_a_file_with_brackets_exactly(demo_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "run[server].jsonl"
    result = fiduciary("runs", "export", demo_run(demo_db), "-o", target, "--db", demo_db)
    assert result.returncode == 0, result.stderr
    assert result.stderr.endswith(f"written to {target}\n")  # rich took [server] for markup
    # 98 events (the text deltas cut where the loop's redaction holds a line's last word), a
    # context_layers event for each of the 4 messages, and the send's balance refresh (2)
    assert target.read_text(encoding="utf-8").count("\n") == 104


def demo_run(db: Path) -> str:
    return fiduciary("runs", "list", "--json", "--db", db).stdout.split('"run_id": "')[1][:8]

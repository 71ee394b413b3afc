"""docs/attention.md's offline walk-through, run as written: the ``fiduciary`` command in a
subprocess, without a provider's key, on a copy of ``examples/attention`` (so the record it
writes lands in a temporary folder, not in the repository)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "attention.md"
SAMPLE = ROOT / "examples" / "attention"
BLOCK = re.compile(r"<!-- offline walk-through[^>]*-->\n```sh\n(.*?)```", re.S)


def offline() -> dict[str, str]:
    """The environment without a provider's key or model, the venv's commands first."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_API_KEY") and not k.startswith("FIDUCIARY_")
    }
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_block(block: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=cwd,
        env=offline(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.timeout(300)  # four starts of the command, on a loaded machine
def test_the_offline_walk_through_runs_as_written_and_decides_every_event(
    tmp_path: Path,
) -> None:
    (block,) = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    shutil.copytree(
        SAMPLE, tmp_path / "examples" / "attention", ignore=shutil.ignore_patterns(".fiduciary")
    )
    done = run_block(block, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    lines = (tmp_path / "examples" / "attention" / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    decisions = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert [d["event_id"] for d in decisions] == [e["id"] for e in events]
    assert [d["kind"] for d in decisions] == ["decision"] * len(events)
    assert [d["route"] for d in decisions] == ["drop", "notify", "act", "drop", "notify", "act"]
    assert [d["action"] for d in decisions] == [
        "dropped",
        "notified",
        "notified",
        "dropped",
        "notified",
        "notified",
    ]
    assert all(d["error"] is None and d["model"] == "scripted" for d in decisions)
    assert "dead letter" not in done.stdout
    # the line the page quotes
    assert "#3 health_factor_low (file) → act [act 0.75, notify 0.12, drop 0.12] notified" in (
        done.stdout
    )
    # again: nothing new is decided, the same decisions are listed
    again = run_block(block, tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout == "\n".join(x for x in done.stdout.splitlines() if x.startswith("{")) + (
        "\n"
    )

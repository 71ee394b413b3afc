"""The README's worked example runs as written (the README must stay true)."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def test_worked_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    match = re.search(r"## A worked example\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert match is not None
    script = tmp_path / "example.py"
    script.write_text(match.group(1))
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "pending_action" in out
    assert "run_completed" in out
    assert out.strip().endswith("{'alice': Decimal('50')}")
    assert (tmp_path / "runs.sqlite3").exists()

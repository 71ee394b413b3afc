"""docs/canvases.md's script runs as it is and prints what the page says it prints."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "canvases.md"


def test_the_pages_script_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    match = re.search(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert match is not None
    script = match.group(1)
    promised = re.findall(r"^# (the .*)$", script, re.M)
    assert len(promised) == 2
    path = tmp_path / "canvases_example.py"
    path.write_text(script)
    runpy.run_path(str(path), run_name="__main__")
    assert capsys.readouterr().out.splitlines() == promised

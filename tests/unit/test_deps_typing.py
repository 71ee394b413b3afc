"""mypy checks ``ctx.deps``: a right use passes, each wrong one is an error on its line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api

pytestmark = pytest.mark.slow  # mypy takes seconds

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "typing" / "deps_usage.py"


def _mypy(path: Path) -> tuple[str, int]:
    out, err, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--no-incremental", str(path)]
    )
    return out + err, status


def test_the_sample_is_clean_as_written() -> None:
    out, status = _mypy(SAMPLE)
    assert status == 0, out


def test_each_wrong_use_is_an_error_without_its_ignore(tmp_path: Path) -> None:
    text = SAMPLE.read_text()
    bad = [n for n, line in enumerate(text.splitlines(), 1) if line.endswith("# BAD")]
    assert len(bad) == 3
    stripped = re.sub(r"  # type: ignore\[[a-z-]+\]  # BAD", "", text)
    copy = tmp_path / "deps_usage_bare.py"
    copy.write_text(stripped)
    out, status = _mypy(copy)
    assert status == 1, out
    lines = {int(m) for m in re.findall(rf"{copy.name}:(\d+): error", out)}
    assert lines == set(bad), out
    assert 'has no attribute "pool"' in out
    assert 'incompatible type "int"; expected "str"' in out
    assert '"None" has no attribute "dsn"' in out

"""``fiduciary demo --reset`` starts from the opening balances; without it the wallet carries
over."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .support import fiduciary

pytestmark = pytest.mark.timeout(180)


def total_before(stdout: str) -> str:
    """The USDC available before the demo (prices move; the books do not)."""
    found = re.search(r"Balances before.*?\n│ USDC\s*│\s*([\d,.]+)", stdout, re.S)
    assert found, stdout
    return found[1]


def test_the_wallet_carries_over_until_reset(tmp_path: Path) -> None:
    db = tmp_path / "demo.sqlite3"
    first = fiduciary("demo", "--yes", "--db", db)
    assert first.returncode == 0, first.stderr
    again = fiduciary("demo", "--yes", "--db", db)
    assert total_before(again.stdout) != total_before(first.stdout)  # the last demo's books
    fresh = fiduciary("demo", "--yes", "--reset", "--db", db, columns=200)
    assert fresh.returncode == 0, fresh.stderr
    assert f"Deleted {db}: a fresh start." in " ".join(fresh.stdout.split())
    assert total_before(fresh.stdout) == total_before(first.stdout)
    listed = fiduciary("runs", "list", "--json", "--db", db).stdout.splitlines()
    assert len(listed) == 1  # the runs went with the books


def test_reset_is_in_the_help() -> None:
    shown = " ".join(fiduciary("demo", "--help", columns=200).stdout.split())
    assert "--reset" in shown
    assert "Start afresh: delete the database file first" in shown

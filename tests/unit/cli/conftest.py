from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest
from rich.console import Console

from fiduciary.wallet.console import run_demo


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database holding one completed demo run (played with --yes)."""
    db = tmp_path_factory.mktemp("demo") / "demo.sqlite3"
    out = Console(file=io.StringIO())
    assert asyncio.run(run_demo(db, yes=True, out=out, env={})) == 0
    return db

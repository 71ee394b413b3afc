"""The ``store`` fixture: every backend of the ``Store`` contract, one param each.

To add a backend, write an opener (``tmp_path`` → an open store, empty) and add one entry to
``BACKENDS``; give it marks if it needs a service, e.g.
``"postgres": Backend(open_postgres, (pytest.mark.postgres,))``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from fiduciary.stores.base import Store
from fiduciary.stores.memory import MemoryStore
from fiduciary.stores.sqlite import SQLiteStore
from tests.postgres_support import open_postgres


@dataclass(frozen=True)
class Backend:
    open: Callable[[Path], Awaitable[Store]]
    marks: tuple[pytest.MarkDecorator, ...] = ()


async def open_memory(tmp_path: Path) -> Store:
    return MemoryStore()


async def open_sqlite(tmp_path: Path) -> Store:
    return await SQLiteStore.open(tmp_path / "fiduciary.sqlite3")


BACKENDS: dict[str, Backend] = {
    "memory": Backend(open_memory),
    "sqlite": Backend(open_sqlite),
    # skipped when the server is unreachable, except in CI (CI=true), where that fails
    "postgres": Backend(open_postgres, (pytest.mark.postgres,)),
}


@pytest.fixture(params=[pytest.param(name, marks=b.marks, id=name) for name, b in BACKENDS.items()])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
async def store(backend: str, tmp_path: Path) -> AsyncIterator[Store]:
    opened = await BACKENDS[backend].open(tmp_path)
    try:
        yield opened
    finally:
        await opened.close()

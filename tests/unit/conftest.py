"""Shared fixtures for unit tests: a manual clock, an in-memory store and a ledger of effects.
``make_agent``, ``Effects`` and ``toy_capabilities`` live in ``tests/agent_support.py`` (the one
way every test folder builds an agent); they are importable from here as well."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fiduciary import ManualClock
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import MemoryStore
from tests.agent_support import Effects, make_agent, toy_capabilities

__all__ = ["Effects", "make_agent", "toy_capabilities"]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Each loop test runs on the in-memory store and on a real SQLite file."""
    backend: Store = (
        MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "runs.sqlite3")
    )
    yield backend
    await backend.close()


@pytest.fixture
def effects() -> Effects:
    return Effects()

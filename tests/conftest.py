"""Fixtures for every test folder: a PostgreSQL database of the test's own."""

from __future__ import annotations

import pytest

from tests.postgres_support import create_database


@pytest.fixture
def postgres_dsn() -> str:
    """The DSN of a fresh, migrated, empty PostgreSQL database, dropped when the test process
    ends. Without a server the test is skipped with the reason, except in CI (``CI=true``),
    where it fails (``tests/postgres_support.py``)."""
    return create_database()

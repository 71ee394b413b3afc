"""Fixtures for every test folder: a PostgreSQL database of the test's own, and the ``postgres``
marker made to mean it (skipped without a server, failed in CI: ``tests/postgres_support.py``)."""

from __future__ import annotations

import pytest

from tests.postgres_support import create_database, require_postgres


@pytest.fixture
def postgres_dsn() -> str:
    """The DSN of a fresh, migrated, empty PostgreSQL database, dropped when the test process
    ends. Without a server the test is skipped with the reason, except in CI (``CI=true``),
    where it fails (``tests/postgres_support.py``)."""
    return create_database()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``postgres`` is skipped, with the reason, before its fixtures are set up when
    the server cannot be used, and fails instead in CI."""
    if item.get_closest_marker("postgres") is not None:
        require_postgres()

"""Fixtures for every test folder: a PostgreSQL database of the test's own, and the ``postgres``
marker made to mean it (skipped without a server, failed in CI: ``tests/postgres_support.py``);
under pytest-xdist (``make test``), the longest tests handed out first."""

from __future__ import annotations

import os

import pytest

from tests.postgres_support import create_database, require_postgres

if os.environ.get("PYTEST_XDIST_WORKER"):
    # an xdist worker finds COLUMNS=80 and LINES=24 in its environment, which a run in one
    # process does not have: a console built when its module is imported (``fiduciary apps``)
    # would keep 80 columns whatever a test's CliRunner sets later. Left out, as in one process.
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


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


def _expected_length(item: pytest.Item) -> tuple[bool, float]:
    """The sort key of the longest-first order: slow tests first, then by the hang guard a test
    was given (``pytest.mark.timeout``: a longer guard for a longer test), longest first."""
    marker = item.get_closest_marker("timeout")
    seconds = float(marker.args[0]) if marker is not None and marker.args else 0.0
    return item.get_closest_marker("slow") is None, -seconds


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On pytest-xdist's workers (``make test``: ``-n 2``) the longest tests are handed out first,
    so that none of them starts last and keeps one worker busy while the other idles. Every
    worker sorts its collection the same way (a stable sort: xdist requires one order); a run in
    one process keeps the files' order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_expected_length)

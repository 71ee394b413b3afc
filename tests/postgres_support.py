"""PostgreSQL for tests: one template database migrated per schema, one clone per test.

The server is ``FIDUCIARY_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432/test``).
When it cannot be reached, a test that needs it is skipped, with the reason, except in CI
(``CI=true``), where it fails: CI must run the PostgreSQL suite, not skip it silently.

A test says it needs the server in one of two ways, and nothing else: it asks for the
``postgres_dsn`` fixture (or calls ``create_database()``), or it carries the ``postgres`` marker
(``pytestmark = pytest.mark.postgres``, or a parameter's ``marks=``), which ``tests/conftest.py``
turns into ``require_postgres()`` before the test's fixtures are set up. A module that imports the
driver at its top calls ``require_driver()`` first (the whole module is skipped without it).

The template is named after a digest of the migrations, so a changed schema gets a new one; it
is built by ``PostgresStore`` itself (its migration runner). Each test gets
``CREATE DATABASE ... TEMPLATE ...`` (tens of milliseconds), so it starts empty and isolated:
ask for the ``postgres_dsn`` fixture (``tests/conftest.py``), or call ``create_database()``
where a fixture cannot reach (a helper, a parametrised fixture).
The clones are dropped when the test process exits; those of a process that was killed are
dropped by the next test process.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import importlib.util
import itertools
import os
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fiduciary.stores.postgres import PostgresStore

DSN = os.environ.get("FIDUCIARY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
PREFIX = "fiduciary_test_"
_counter = itertools.count()
_created: list[str] = []


@cache
def _unreachable() -> str | None:
    """Why PostgreSQL cannot be used for tests (None: it can)."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed: pip install 'fiduciary[postgres]'"
    try:
        with psycopg.connect(DSN, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {DSN} is not reachable: {str(exc).strip()}"
    return None


def require_postgres() -> None:
    """Skip the calling test if PostgreSQL cannot be used; fail instead in CI."""
    reason = _unreachable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(_failing_in_ci(reason))
    pytest.skip(reason)


def _failing_in_ci(reason: str) -> str:
    return f"{reason} (CI=true: the PostgreSQL tests must run)"


def require_driver() -> None:
    """At the top of a test module that imports psycopg or ``fiduciary.stores.postgres``: without
    the driver, skip the whole module with the reason; in CI, fail (a collection error)."""
    if importlib.util.find_spec("psycopg") is not None:
        return
    reason = "psycopg is not installed: pip install 'fiduciary[postgres]'"
    if os.environ.get("CI") == "true":
        pytest.fail(_failing_in_ci(reason), pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def dsn_for(dbname: str) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(DSN, dbname=dbname)


def _schema_digest() -> str:
    from fiduciary.stores.postgres import MIGRATIONS_DIR

    digest = hashlib.sha256()
    for path in sorted(Path(MIGRATIONS_DIR).glob("*.sql")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def admin_execute(*statements: str) -> None:
    """Run statements (each in autocommit) on the server's default database."""
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())


def _exists(dbname: str) -> bool:
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
    return row is not None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@cache
def drop_orphans() -> None:
    """Drop the test databases of test processes that died without cleaning up (killed, timed
    out). Only for a server on this machine, where their pids mean something."""
    from psycopg.conninfo import conninfo_to_dict

    host = str(conninfo_to_dict(DSN).get("host") or "localhost")
    if host not in ("localhost", "127.0.0.1", "::1") and not host.startswith("/"):
        return
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        names = [
            str(row[0])
            for row in conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{PREFIX}%",)
            ).fetchall()
        ]
        for name in names:
            pid = name[len(PREFIX) :].split("_", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def template() -> str:
    """The name of the migrated template database (built on first use, by ``PostgresStore``
    itself, in a thread of its own so that any caller, inside an event loop or not, may ask)."""
    drop_orphans()
    name = f"fiduciary_template_{_schema_digest()}"
    if _exists(name):
        return name
    from fiduciary.stores.postgres import PostgresStore

    building = f"{name}_{os.getpid()}"
    admin_execute(f'DROP DATABASE IF EXISTS "{building}"', f'CREATE DATABASE "{building}"')

    async def migrate() -> None:
        store = await PostgresStore.open(dsn_for(building))
        await store.close()

    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, migrate()).result()
    try:
        admin_execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
    except Exception:  # another test process built it meanwhile
        admin_execute(f'DROP DATABASE IF EXISTS "{building}"')
        if not _exists(name):
            raise
    return name


def create_database() -> str:
    """A fresh, migrated, empty database for one test; returns its DSN. Skips the test
    without a server (fails in CI). Tests take it as the ``postgres_dsn`` fixture."""
    require_postgres()
    source = template()
    name = f"{PREFIX}{os.getpid()}_{next(_counter)}"
    if not _created:
        atexit.register(drop_created)
    admin_execute(
        f'DROP DATABASE IF EXISTS "{name}"', f'CREATE DATABASE "{name}" TEMPLATE "{source}"'
    )
    _created.append(name)
    return dsn_for(name)


def empty_database(tag: str) -> str:
    """A new database with nothing in it, not even the migrations (dropped at exit)."""
    require_postgres()
    name = f"{PREFIX}{os.getpid()}_{tag}_{next(_counter)}"
    if not _created:
        atexit.register(drop_created)
    admin_execute(f'CREATE DATABASE "{name}"')
    _created.append(name)
    return dsn_for(name)


async def new_database() -> str:
    """``create_database`` for code that awaits (fixtures parametrised over backends)."""
    return create_database()


def drop_created() -> None:
    """Drop the databases this process created (at exit)."""
    names, _created[:] = list(_created), []
    if not names:
        return
    try:
        admin_execute(*(f'DROP DATABASE IF EXISTS "{n}" WITH (FORCE)' for n in names))
    except Exception:  # the server went away: nothing to clean
        return


async def open_postgres(tmp_path: Path) -> PostgresStore:
    """An open ``PostgresStore`` on a fresh database (the contract suite's opener)."""
    dsn = create_database()
    from fiduciary.stores.postgres import PostgresStore

    return await PostgresStore.open(dsn)


@asynccontextmanager
async def open_stores(count: int, dsn: str | None = None) -> AsyncIterator[list[PostgresStore]]:
    """``count`` stores on one database (a fresh clone unless ``dsn`` is given), each with its
    own pool and LISTEN connection, as that many processes sharing it would have; closed after."""
    from fiduciary.stores.postgres import PostgresStore

    dsn = dsn or create_database()
    opened = [await PostgresStore.open(dsn) for _ in range(count)]
    try:
        yield opened
    finally:
        for store in opened:
            await store.close()

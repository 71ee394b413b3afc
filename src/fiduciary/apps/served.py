"""An apps engine for ``fiduciary serve`` and ``fiduciary worker``, over their store.

An apps factory is ``(store, tables, principal) -> AppEngine | ServedApps``, named on the command
line as ``module:attribute`` (``--apps-engine``); the entry points name the default (the
wallet's sample apps, ``fiduciary.wallet.apps:paper_engine``: this package knows no wallet). A
folder given with ``--apps`` replaces its manifests. The apps' tables go where the runs are:
the SQLite file, the PostgreSQL database (``PostgresAppTables``: with several processes, each
tick slot runs once), or memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from .. import agent_factory
from ..exceptions import ConfigurationError
from ..observability.environment import tracer_from_env
from ..stores.base import Store
from .engine import AppEngine
from .manifest import load_manifests
from .tables import AppTables, MemoryAppTables, SQLiteAppTables

__all__ = ["AppsFactory", "ServedApps", "open_apps"]


@dataclass(slots=True)
class ServedApps:
    """An engine, and what to close once it has stopped (its tables, a wallet)."""

    engine: AppEngine
    closers: list[Callable[[], Awaitable[None] | None]] = field(default_factory=list)

    async def close(self) -> None:
        for close in reversed(self.closers):
            done = close()
            if done is not None:
                await done
        self.closers.clear()


AppsFactory = Callable[[Store, AppTables, str], "AppEngine | ServedApps"]


async def _tables(store: Store) -> tuple[AppTables, Callable[[], Awaitable[None] | None] | None]:
    dsn = getattr(store, "dsn", None)
    if isinstance(dsn, str):
        from .postgres import PostgresAppTables

        pg = await PostgresAppTables.open(dsn)
        return pg, pg.close
    path = getattr(store, "path", None)
    if isinstance(path, str) and path != ":memory:":
        lite = SQLiteAppTables(path)
        return lite, lite.close
    return MemoryAppTables(), None


async def open_apps(
    store: Store,
    *,
    principal: str,
    factory: str,
    folder: Path | None = None,
) -> ServedApps:
    """The apps engine ``factory`` makes over ``store`` (its manifests replaced by those of
    ``folder`` when given); ``ConfigurationError`` when it cannot be made."""
    try:
        import yaml  # noqa: F401  (the manifests need it)
    except ImportError as exc:
        raise ConfigurationError("apps need PyYAML: pip install 'fiduciary[apps]'") from exc
    make = cast(AppsFactory, agent_factory.load_factory(factory))
    tables, close_tables = await _tables(store)
    try:
        made = make(store, tables, principal)
        served = made if isinstance(made, ServedApps) else ServedApps(made)
        if not isinstance(served.engine, AppEngine):
            raise ConfigurationError(
                f"{factory} must return an AppEngine or a ServedApps, not {type(made).__name__}"
            )
        served.engine.tracer = tracer_from_env()  # the entry point composes tracing
    except BaseException:
        if close_tables is not None:
            done = close_tables()
            if done is not None:
                await done
        raise
    if close_tables is not None:
        served.closers.insert(0, close_tables)
    if folder is not None:
        try:
            if not await asyncio.to_thread(folder.is_dir):
                raise ConfigurationError(f"--apps: no folder at {folder}")
            engine = served.engine
            names = {c.name: c.operation for c in engine.paper.values()}
            manifests = load_manifests(folder, capabilities=names, sources=engine.sources)
            engine.manifests = {}
            for manifest in manifests:
                engine.add(manifest)
        except BaseException:
            await served.close()
            raise
    return served

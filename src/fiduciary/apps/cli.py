"""``fiduciary apps list | show | enable | disable | tick ID | logs ID``.

``register(app)`` adds the ``apps`` group to the main command, the way ``server/cli.py`` adds
``serve``. The engine is the one an apps factory makes (``--apps-engine``; by default the
wallet's sample apps, on the paper wallet and the scripted model, which the entry points name)
over the runs' SQLite file (``--db``), with the apps of ``--apps`` when given; its tables live in
the same file. Pending actions are listed with their ids; ``--yes`` approves them at the terminal.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..cli._common import DEFAULT_DB, CliError, Db, Yes, _command, apps_engine
from ..exceptions import ConfigurationError
from .engine import AppEngine

__all__ = ["apps_app", "open_engine", "register"]

apps_app = typer.Typer(help="Apps that tick on their own: list, show, enable, disable, tick, logs.")
console = Console(highlight=False)

AppsDir = Annotated[
    Path | None,
    typer.Option("--apps", help="A folder of <id>/app.md manifests (default: the sample apps)."),
]
EngineName = Annotated[
    str | None,
    typer.Option(
        "--apps-engine",
        help="The apps factory, module:attribute (store, tables, principal); default: the "
        "wallet's sample apps, fiduciary.wallet.apps:paper_engine.",
        show_default=False,
    ),
]
Who = Annotated[str, typer.Option("--principal", help="On whose behalf the apps act.")]
AppId = Annotated[str, typer.Argument(metavar="ID", help="The app's id.")]


@asynccontextmanager
async def open_engine(
    db: Path, apps: Path | None, principal: str, factory: str | None = None
) -> AsyncIterator[AppEngine]:
    """The engine the apps factory ``factory`` makes (the default: the wallet's sample apps)
    over the runs' SQLite file ``db``, with the manifests of ``apps`` when given."""
    from ..stores.sqlite import SQLiteStore
    from .served import open_apps

    db.parent.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(db)
    try:
        try:
            served = await open_apps(
                store, principal=principal, folder=apps, factory=apps_engine(factory)
            )
        except ConfigurationError as exc:
            raise CliError(str(exc)) from None
        try:
            yield served.engine
        finally:
            await served.close()
    finally:
        await store.close()


async def _pending(engine: AppEngine, app_id: str, yes: bool, principal: str) -> None:
    for approval in await engine.pending(app_id):
        if yes:
            await engine.approve(
                approval.approval_id, by=principal, confirm_amount=approval.amount_usd
            )
            console.print(f"approved {approval.approval_id} ({escape(approval.capability)})")
        else:
            console.print(
                f"pending {approval.approval_id}: {escape(approval.capability)} "
                f"{escape(json.dumps(approval.args, default=str))}"
            )


@_command(apps_app, "list")
async def apps_list(
    db: Db = DEFAULT_DB,
    apps: AppsDir = None,
    engine_name: EngineName = None,
    principal: Who = "demo-user",
) -> int:
    """The apps, whether each is enabled, and its tick counters."""
    async with open_engine(db, apps, principal, engine_name) as engine:
        table = Table("id", "name", "tier", "enabled", "model calls", "unchanged", "busy", "errors")
        for app_id, manifest in sorted(engine.manifests.items()):
            record = await engine.record(app_id)
            c = record.counters
            table.add_row(
                escape(app_id),
                escape(manifest.name),
                manifest.tier,
                "yes" if record.enabled else "no",
                str(c.get("model_calls", 0)),
                str(c.get("skipped_unchanged", 0)),
                str(c.get("skipped_busy", 0)),
                str(c.get("errors", 0)),
            )
        console.print(table)
    return 0


@_command(apps_app, "show")
async def apps_show(
    app_id: AppId,
    db: Db = DEFAULT_DB,
    apps: AppsDir = None,
    engine_name: EngineName = None,
    principal: Who = "demo-user",
) -> int:
    """An app's manifest, state, counters, last ticks and pending actions."""
    async with open_engine(db, apps, principal, engine_name) as engine:
        manifest = engine.manifest(app_id)
        record = await engine.record(app_id)
        console.print(f"[bold]{escape(manifest.name)}[/] ({escape(app_id)}), tier {manifest.tier}")
        console.print(f"hooks: {', '.join(sorted(manifest.hooks))}")
        console.print(f"capabilities: {', '.join(manifest.capabilities)}")
        limits = ", ".join(f"{k} ${v}" for k, v in manifest.limits.items()) or "none"
        console.print(f"permissions: {', '.join(manifest.permissions) or 'none'}; limits: {limits}")
        console.print(f"mode: {manifest.config.mode}; enabled: {'yes' if record.enabled else 'no'}")
        if record.paused_until:
            console.print(f"paused until {record.paused_until}")
        console.print(f"state: {escape(json.dumps(record.state, sort_keys=True))}")
        console.print(f"counters: {escape(json.dumps(record.counters, sort_keys=True))}")
        for tick in await engine.tables.ticks(app_id, limit=10):
            console.print(f"tick {tick.slot} {tick.status} {tick.outcome} {escape(tick.detail)}")
        await _pending(engine, app_id, False, principal)
    return 0


@_command(apps_app, "enable")
async def apps_enable(
    app_id: AppId,
    db: Db = DEFAULT_DB,
    apps: AppsDir = None,
    engine_name: EngineName = None,
    principal: Who = "demo-user",
    yes: Yes = False,
) -> int:
    """Enable an app (an app with permissions or limits first waits for a person)."""
    async with open_engine(db, apps, principal, engine_name) as engine:
        record = await engine.enable(app_id)
        if not record.enabled:
            await _pending(engine, app_id, yes, principal)
            if yes:
                record = await engine.enable(app_id)
        console.print(
            f"{escape(app_id)}: {'enabled' if record.enabled else 'waiting for approval'}"
        )
    return 0


@_command(apps_app, "disable")
async def apps_disable(
    app_id: AppId,
    db: Db = DEFAULT_DB,
    apps: AppsDir = None,
    engine_name: EngineName = None,
    principal: Who = "demo-user",
) -> int:
    """Run the app's shutdown hook, persist its state, and stop its ticks."""
    async with open_engine(db, apps, principal, engine_name) as engine:
        await engine.disable(app_id)
        console.print(f"{escape(app_id)}: disabled")
    return 0


@_command(apps_app, "tick")
async def apps_tick(
    app_id: AppId,
    db: Db = DEFAULT_DB,
    apps: AppsDir = None,
    engine_name: EngineName = None,
    principal: Who = "demo-user",
    yes: Yes = False,
) -> int:
    """Run the app's tick for the current slot (once: a slot that ran is not run again)."""
    async with open_engine(db, apps, principal, engine_name) as engine:
        result = await engine.tick(app_id)
        if result.outcome == "waiting" or yes:
            await _pending(engine, app_id, yes, principal)
            if yes:
                for resumed in await engine.resume_ticks():
                    if resumed.app_id == app_id:
                        result = resumed
        detail = f" ({escape(result.detail)})" if result.detail else ""
        console.print(f"{escape(app_id)} {result.slot}: {result.outcome}{detail}")
    return 0 if result.outcome not in ("error", "disabled") else 1


@_command(apps_app, "logs")
async def apps_logs(
    app_id: AppId,
    db: Db = DEFAULT_DB,
    apps: AppsDir = None,
    engine_name: EngineName = None,
    principal: Who = "demo-user",
    limit: Annotated[int, typer.Option(help="How many entries.")] = 50,
) -> int:
    """What the app did: ticks, skips, intents, grants, pauses."""
    async with open_engine(db, apps, principal, engine_name) as engine:
        engine.manifest(app_id)
        for entry in await engine.tables.read_log(app_id, limit=limit):
            detail = escape(json.dumps(entry.detail, sort_keys=True, default=str))
            console.print(f"{entry.at} {entry.kind} {detail}")
    return 0


def register(app: typer.Typer) -> None:
    """Add the ``apps`` group to the main command."""
    app.add_typer(apps_app, name="apps")

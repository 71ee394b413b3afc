"""``fiduciary serve`` and ``fiduciary keys create | list | revoke``, as typer commands.

They are plain functions taking typer options; ``register(app)`` adds them to the main
``fiduciary`` command (``serve`` and a ``keys`` group). Failures are one red line and an exit
code, as in the rest of the CLI: 0 done, 1 refused, 2 could not start.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .._agent.sweep import SWEEP_SECONDS
from .._gc import for_many_runs
from ..cli._common import McpConfig, with_mcp
from ..cli._holding import holding
from ..exceptions import ConfigurationError, FiduciaryError
from ..stores.base import Store
from .auth import (
    ALL_SCOPES,
    DEFAULT_SCOPES,
    ApiKey,
    KeyStore,
    PostgresKeyStore,
    SQLiteKeyStore,
)
from .passkey_config import check_passkeys_env, passkeys_from_env
from .ratelimit import RateLimit
from .served import DEFAULT_AGENT
from .settings import AppsSettings, ServerConfig
from .webhooks import InboundChannel, WebhookTarget

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette


__all__ = [
    "ServerConfig",
    "keys_app",
    "keys_create",
    "keys_list",
    "keys_revoke",
    "register",
    "serve",
]

T = TypeVar("T")

DEFAULT_DB = Path(".fiduciary") / "fiduciary.sqlite3"

Db = Annotated[
    Path, typer.Option("--db", envvar="FIDUCIARY_DB", help="The SQLite file runs are stored in.")
]
Postgres = Annotated[
    str | None,
    typer.Option(
        "--postgres",
        envvar="FIDUCIARY_POSTGRES",
        help="A PostgreSQL DSN: runs and API keys are stored there instead of --db.",
    ),
]

keys_app = typer.Typer(
    help="Create, list and revoke API keys for the server.", no_args_is_help=True
)


def _fail(message: str, code: int = 2) -> typer.Exit:
    Console(stderr=True).print(
        f"[red]error:[/] {escape(' '.join(message.split()))}", soft_wrap=True
    )
    return typer.Exit(code)


def _origins(public_url: str | None, allowed: list[str]) -> list[str]:
    """``--allow-origin`` entries, each checked (as ``--public-url``): a ValueError names one."""
    try:
        from ..mcp.origins import origin_of
    except ImportError:  # no mcp extra: no /mcp, nothing they apply to
        return allowed
    if public_url is not None:
        origin_of(public_url)
    for entry in allowed:
        origin_of(entry.removesuffix(":*"))
    return allowed


# --- serve ------------------------------------------------------------------------------------


def serve(
    db: Db = DEFAULT_DB,
    postgres: Postgres = None,
    drive: Annotated[
        bool,
        typer.Option(
            help="Drive runs in this process; --no-drive leaves them to `fiduciary worker`s "
            "(PostgreSQL only)."
        ),
    ] = True,
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on.")] = 8000,
    agent: Annotated[
        str, typer.Option(help="The agent factory, module:attribute (store -> Agent).")
    ] = DEFAULT_AGENT,
    config: Annotated[
        Path | None, typer.Option(help="A TOML file: rate limit, channels, notifications.")
    ] = None,
    rate_limit: Annotated[
        str | None, typer.Option(help="Messages per principal, N/SECONDS (default 10/60).")
    ] = None,
    sweep_seconds: Annotated[
        float,
        typer.Option(
            help="Seconds between sweeps for runs that can make progress and nobody drives "
            "(a dead process's, or decided in another process)."
        ),
    ] = SWEEP_SECONDS,
    apps: Annotated[
        Path | None,
        typer.Option(
            help="Serve apps: a folder of <id>/app.md manifests, ticking in the background "
            "(else [apps] of --config; the sample apps when it names no dir)."
        ),
    ] = None,
    apps_engine: Annotated[
        str | None,
        typer.Option(help="The apps factory, module:attribute (store, tables, principal)."),
    ] = None,
    attention: Annotated[
        Path | None,
        typer.Option(help="An attention TOML file: serve its decision feed and run its watcher."),
    ] = None,
    mcp_config: McpConfig = None,
    public_url: Annotated[
        str | None,
        typer.Option(
            envvar="FIDUCIARY_PUBLIC_URL",
            help="Where people reach this server (behind a proxy): links to the console use "
            "it. Default: the address each request reached.",
        ),
    ] = None,
    allow_origin: Annotated[
        list[str] | None,
        typer.Option(
            help="A browser origin allowed to use /mcp besides the server's own "
            "(scheme://host[:port], or scheme://host:* for any port); repeatable.",
        ),
    ] = None,
) -> None:
    """Serve the HTTP API, live events and the web console (SQLite or PostgreSQL)."""
    if not drive and postgres is None:
        raise _fail("--no-drive leaves runs to workers, which need --postgres")
    if not sweep_seconds > 0:
        raise _fail("--sweep-seconds must be positive")
    try:
        settings = ServerConfig.load(config)
        limit = RateLimit.parse(rate_limit or settings.rate_limit)
        channels, targets = settings.inbound(), settings.targets()
        origins = _origins(public_url, allow_origin or [])
        if apps is not None or apps_engine is not None:
            settings.apps = settings.apps or AppsSettings()
            settings.apps.dir = apps or settings.apps.dir
            settings.apps.engine = apps_engine or settings.apps.engine
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if targets and not drive:
        raise _fail(
            "[[notify]] needs a server that drives runs: notifications are sent by the process "
            "that drives a run, and with --no-drive this one drives none"
        )
    try:
        passkeys = check_passkeys_env()
    except ConfigurationError as exc:
        raise _fail(str(exc)) from None
    where = _Where(db, postgres)
    # a SQLite file is held while it is served: demo --reset refuses to delete it under us
    held = contextlib.nullcontext() if postgres else holding(db, "fiduciary serve")
    try:
        with held:
            code = asyncio.run(
                _serve(
                    where,
                    host,
                    port,
                    agent,
                    drive,
                    settings,
                    limit,
                    channels,
                    targets,
                    sweep_seconds,
                    attention=attention,
                    mcp_files=mcp_config or [],
                    public_url=public_url,
                    origins=origins,
                    passkeys=passkeys,
                )
            )
    except KeyboardInterrupt:
        code = 130
    raise typer.Exit(code)


class _Where:
    """Where runs and keys live: a SQLite file, or a PostgreSQL database (``--postgres``)."""

    def __init__(self, db: Path, postgres: str | None) -> None:
        self.db, self.postgres = db, postgres

    def __str__(self) -> str:
        return "PostgreSQL" if self.postgres else str(self.db)

    async def store(self) -> Store:
        if self.postgres:
            from ..stores.postgres import PostgresStore

            return await PostgresStore.open(self.postgres)
        from ..stores.sqlite import SQLiteStore

        self.db.parent.mkdir(parents=True, exist_ok=True)
        return await SQLiteStore.open(self.db)

    async def keys(self, *, existing: bool = False) -> KeyStore:
        """The key store (``existing``: the SQLite file must be there already)."""
        if self.postgres:
            return await PostgresKeyStore.open(self.postgres)
        if existing and not self.db.is_file():
            raise ValueError(f"no database at {self.db}")
        self.db.parent.mkdir(parents=True, exist_ok=True)
        return SQLiteKeyStore(self.db)

    def key_hint(self) -> str:
        return "--postgres $FIDUCIARY_POSTGRES" if self.postgres else f"--db {self.db}"


async def _serve(
    where: _Where,
    host: str,
    port: int,
    agent_spec: str,
    drive: bool,
    settings: ServerConfig,
    limit: RateLimit,
    channels: list[InboundChannel],
    targets: list[WebhookTarget],
    sweep_seconds: float,
    *,
    attention: Path | None = None,
    mcp_files: list[Path] | None = None,
    public_url: str | None = None,
    origins: Sequence[str] = (),
    passkeys: bool = False,
) -> int:
    from .app import create_app
    from .features import Features, open_features
    from .served import load_factory, serve_setup
    from .webhooks import Notifier, UrlGuard

    console = Console(stderr=True)
    try:  # first: a port in use is one line, before anything starts
        sockets = listen(host, port)
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        console.print(
            f"[red]error:[/] cannot listen on {escape(_address(host, port))}: {escape(reason)}",
            soft_wrap=True,
        )
        return 2
    try:
        store = await where.store()
    except (OSError, ImportError, FiduciaryError) as exc:
        for sock in sockets:
            sock.close()
        console.print(f"[red]error:[/] cannot open {escape(str(where))}: {escape(str(exc))}")
        return 2
    keys: KeyStore | None = None
    features: Features | None = None
    external = AsyncExitStack()
    try:
        keys = await where.keys()
        setup = serve_setup(load_factory(agent_spec), store)
        agent = setup.agent
        if passkeys:  # the registry in the store's database: shared by its servers
            signing = passkeys_from_env(store=store)
            if signing is not None:
                external.callback(signing.registry.close)
                agent = agent.with_options(signatures=signing)
        agent, toolset = await external.enter_async_context(
            with_mcp(agent, settings.mcp, mcp_files or [])
        )
        if toolset is not None:
            console.print(
                f"fiduciary: {len(toolset)} tools from MCP servers "
                f"{escape(', '.join(sorted(set(toolset.origin.values()))))}",
                soft_wrap=True,
            )
        features = await open_features(
            store,
            agent,
            apps=settings.apps,
            hook_targets=settings.hook_targets(),
            attention=attention,
            channels=channels,
            heartbeat_seconds=settings.heartbeat_seconds,
        )
        notifier = None
        if targets:
            guard = UrlGuard(
                schemes=settings.webhooks.schemes, allow_private=settings.webhooks.allow_private
            )
            notifier = Notifier(targets, guard=guard, max_attempts=settings.webhooks.max_attempts)
        app = create_app(
            agent,
            keys=keys,
            balances=setup.balances,
            rate_limit=limit,
            channels=channels,
            notifier=notifier,
            heartbeat_seconds=settings.heartbeat_seconds,
            drive=drive,
            sweep_seconds=sweep_seconds,
            features=features,
            public_url=public_url,
            allowed_origins=origins,
        )
        if not await keys.list():
            console.print(
                "[yellow]no API keys yet:[/] create one with "
                f"`fiduciary keys create {escape(where.key_hint())} --principal demo-user`"
            )
        mode = "" if drive else ", runs driven by workers"
        url = f"http://{_address(host, sockets[0].getsockname()[1])}/"
        listening = f"fiduciary: console and API at {url} ({escape(str(where))}{mode})"
        server = _uvicorn(app, host, port, lambda: console.print(listening, soft_wrap=True))
        for_many_runs()  # start-up is over: the collector's policy for many runs at once
        await server.serve(sockets=sockets)
        return 0
    except FiduciaryError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    finally:
        for sock in sockets:
            sock.close()
        if features is not None:
            await features.stop()  # (again: what it opened, if the app never started)
        await external.aclose()  # the MCP servers' connections
        if keys is not None:
            await keys.aclose()
        await store.close()


def _uvicorn(app: Starlette, host: str, port: int, listening: Callable[[], None]) -> uvicorn.Server:
    """A uvicorn server for ``app`` that calls ``listening`` once its sockets accept
    connections, and ends the event streams at once when asked to exit."""
    import uvicorn

    loop = asyncio.get_running_loop()
    server_state = app.state.server

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:  # the app has started and the sockets accept connections
                listening()

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # end the event streams at once (their clients reconnect, to this server when
            # it is back or to another one), so the graceful shutdown need not wait for them
            loop.call_soon_threadsafe(server_state.end_streams)
            super().handle_exit(sig, frame)

    return Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="info",
            server_header=False,
            proxy_headers=False,
            timeout_graceful_shutdown=5,
        )
    )


def listen(host: str, port: int) -> list[socket.socket]:
    """Sockets bound and listening on every address ``host`` resolves to (as asyncio's
    ``create_server`` binds them); an ``OSError`` when one cannot be bound."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(2048)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --- keys -------------------------------------------------------------------------------------


def keys_create(
    principal: Annotated[str, typer.Option(help="Whom the key acts for (a run's principal).")],
    db: Db = DEFAULT_DB,
    postgres: Postgres = None,
    scope: Annotated[
        list[str] | None,
        typer.Option(help=f"A scope (repeat): {', '.join(sorted(ALL_SCOPES))}."),
    ] = None,
    label: Annotated[str, typer.Option(help="A note to recognise the key by.")] = "",
) -> None:
    """Create an API key. It is printed once; only its sha256 is stored."""
    scopes = scope or list(DEFAULT_SCOPES)

    async def create(keys: KeyStore) -> tuple[str, ApiKey]:
        return await keys.create(principal, scopes, label=label)

    key, record = _with_keys(_Where(db, postgres), create)
    console = Console()
    console.print(key, soft_wrap=True, highlight=False)
    Console(stderr=True).print(
        f"[dim]key {record.key_id} for {escape(principal)} "
        f"({', '.join(sorted(record.scopes))}); it is shown only now[/]"
    )


def keys_list(
    db: Db = DEFAULT_DB,
    postgres: Postgres = None,
    principal: Annotated[str | None, typer.Option(help="Only this principal's keys.")] = None,
) -> None:
    """List API keys (never the keys themselves)."""

    async def listed(keys: KeyStore) -> list[ApiKey]:
        return await keys.list(principal=principal)

    records = _with_keys(_Where(db, postgres), listed, existing=True)
    table = Table()
    table.add_column("key id", no_wrap=True)
    for title in ("principal", "scopes", "label", "created", "revoked"):
        table.add_column(title)
    for r in records:
        table.add_row(
            r.key_id,
            escape(r.principal),
            ", ".join(sorted(r.scopes)),
            escape(r.label),
            r.created_at.strftime("%Y-%m-%d %H:%M"),
            r.revoked_at.strftime("%Y-%m-%d %H:%M") if r.revoked_at else "",
        )
    Console().print(table)


def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key id (from keys list).")],
    db: Db = DEFAULT_DB,
    postgres: Postgres = None,
) -> None:
    """Revoke an API key: requests with it are refused from now on."""

    async def revoke(keys: KeyStore) -> bool:
        return await keys.revoke(key_id)

    done = _with_keys(_Where(db, postgres), revoke, existing=True)
    if not done:
        raise _fail(f"no active key {key_id}", 1)
    Console(stderr=True).print(f"revoked {escape(key_id)}")


def _with_keys(
    where: _Where, use: Callable[[KeyStore], Awaitable[T]], *, existing: bool = False
) -> T:
    """Open the key store, ``use`` it, close it; a failure is one red line (exit 2)."""

    async def run() -> T:
        keys = await where.keys(existing=existing)
        try:
            return await use(keys)
        finally:
            await keys.aclose()

    try:
        return asyncio.run(run())
    except (ValueError, OSError, FiduciaryError) as exc:
        raise _fail(str(exc)) from None


keys_app.command("create")(keys_create)
keys_app.command("list")(keys_list)
keys_app.command("revoke")(keys_revoke)


def register(app: typer.Typer) -> None:
    """Add ``serve`` and the ``keys`` group to the ``fiduciary`` command."""
    app.command("serve")(serve)
    app.add_typer(keys_app, name="keys")

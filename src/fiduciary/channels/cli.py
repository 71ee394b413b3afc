"""``fiduciary telegram``: a Telegram bot in front of an agent, by long polling.

```
fiduciary telegram link --principal alice [--db PATH | --postgres DSN]
FIDUCIARY_TELEGRAM_TOKEN=123456:ABC... fiduciary telegram --agent module:factory \\
    --allow 111111=alice --allow 222222=bob [--allow-groups] [--db PATH | --postgres DSN]
```

``link`` prints a one-time code; the person sends ``/link CODE`` to the bot from their own
account, and from then on only that account acts for the principal (``channels.links``). Each
allowed chat is its principal's chat with the agent (``AgentChat``): a message continues the
chat's run; pending actions arrive as cards with Approve / Deny buttons. The bot's offset,
handled updates, cards, links and audit rows live in the same SQLite file or PostgreSQL
database as the runs (``fiduciary.channels.records``). ``register(app)`` adds the commands to
``fiduciary``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ..agent_factory import agent_of, load_factory
from ..clock import SystemClock
from ..exceptions import ConfigurationError, FiduciaryError
from ..observability.environment import trace_from_env
from ..stores.base import Store
from .agent_chat import AgentChat
from .inbox import Inbox
from .links import CODE_TTL, PersonLinks
from .records import ChannelRecords

__all__ = ["UsageError", "parse_allow", "register"]

TOKEN_ENV = "FIDUCIARY_TELEGRAM_TOKEN"
DEFAULT_DB = Path(".fiduciary") / "fiduciary.sqlite3"


class UsageError(Exception):
    """A command line that cannot start: one red line, exit code 2."""


def parse_allow(values: list[str]) -> dict[int, str]:
    """``CHAT_ID=PRINCIPAL`` pairs → chat id → principal."""
    allow: dict[int, str] = {}
    for value in values:
        chat, sep, principal = value.partition("=")
        try:
            chat_id = int(chat.strip())
        except ValueError:
            chat_id = 0
        if not sep or not chat_id or not principal.strip():
            raise UsageError(f"--allow takes CHAT_ID=PRINCIPAL, like 123456=alice, not {value!r}")
        if chat_id in allow:
            raise UsageError(f"chat {chat_id} is allowed twice")
        allow[chat_id] = principal.strip()
    return allow


def register(app: typer.Typer) -> None:
    """Add ``telegram`` (and ``telegram link``) to the ``fiduciary`` command."""
    telegram_app = typer.Typer()
    app.add_typer(telegram_app, name="telegram")

    @telegram_app.callback(invoke_without_command=True)
    def telegram(
        ctx: typer.Context,
        agent: Annotated[
            str | None, typer.Option(help="The agent factory: module:callable(store) -> Agent.")
        ] = None,
        allow: Annotated[
            list[str] | None,
            typer.Option(help="CHAT_ID=PRINCIPAL: a chat allowed to talk, as whom (repeat)."),
        ] = None,
        allow_groups: Annotated[
            bool,
            typer.Option(
                "--allow-groups",
                help="Allow group chats in --allow (every member can write there; only the "
                "principal's linked account is obeyed).",
            ),
        ] = False,
        db: Annotated[
            Path, typer.Option("--db", envvar="FIDUCIARY_DB", help="The SQLite file.")
        ] = DEFAULT_DB,
        postgres: Annotated[
            str | None,
            typer.Option(envvar="FIDUCIARY_POSTGRES", help="A PostgreSQL DSN instead of --db."),
        ] = None,
        api: Annotated[str, typer.Option(help="The Bot API's address.")] = (
            "https://api.telegram.org"
        ),
        poll_timeout: Annotated[int, typer.Option(help="Seconds a long poll waits.")] = 30,
        rate: Annotated[
            str, typer.Option(help="Messages per seconds per chat, N/SECONDS.")
        ] = "10/60",
    ) -> None:
        """Answer Telegram chats with an agent; pending actions become Approve / Deny cards.
        The bot token is read from FIDUCIARY_TELEGRAM_TOKEN. Link each principal's account
        first: fiduciary telegram link --principal NAME."""
        if ctx.invoked_subcommand is not None:
            return
        try:
            if not agent or not allow:
                raise UsageError(
                    "fiduciary telegram needs --agent module:factory and "
                    "--allow CHAT_ID=PRINCIPAL (or: fiduciary telegram link --principal NAME)"
                )
            code = asyncio.run(
                _serve(agent, allow, allow_groups, db, postgres, api, poll_timeout, rate)
            )
        except KeyboardInterrupt:
            code = 0
        except UsageError as exc:
            code = _fail(str(exc), 2)
        except (FiduciaryError, sqlite3.Error, OSError) as exc:
            code = _fail(str(exc), 1)
        raise typer.Exit(code)

    @telegram_app.command("link")
    def link(
        principal: Annotated[str, typer.Option(help="The principal the person acts for.")],
        db: Annotated[
            Path, typer.Option("--db", envvar="FIDUCIARY_DB", help="The SQLite file.")
        ] = DEFAULT_DB,
        postgres: Annotated[
            str | None,
            typer.Option(envvar="FIDUCIARY_POSTGRES", help="A PostgreSQL DSN instead of --db."),
        ] = None,
        minutes: Annotated[
            int, typer.Option(help="Minutes the code stays valid.", min=1, max=1440)
        ] = int(CODE_TTL.total_seconds() // 60),
    ) -> None:
        """Print a one-time code that links a person's Telegram account to PRINCIPAL: they
        send /link CODE to the bot, from their own account, in a private chat."""
        try:
            if not principal.strip():
                raise UsageError("--principal must name someone")
            code = asyncio.run(_issue(principal.strip(), db, postgres, minutes))
        except UsageError as exc:
            raise typer.Exit(_fail(str(exc), 2)) from None
        except (FiduciaryError, sqlite3.Error, OSError) as exc:
            raise typer.Exit(_fail(str(exc), 1)) from None
        out = Console(highlight=False, soft_wrap=True)
        out.print(
            f"Link code for {escape(principal.strip())}: {code} "
            f"(valid {minutes} minutes, once; only its hash is stored)"
        )
        out.print("Send this to the bot from your own Telegram account, in a private chat:")
        out.print(f"/link {code}")


async def _issue(principal: str, db: Path, postgres: str | None, minutes: int) -> str:
    if not postgres:
        db.parent.mkdir(parents=True, exist_ok=True)
    links = await PersonLinks.open(sqlite_path=None if postgres else os.fspath(db), dsn=postgres)
    try:
        return await links.issue(principal, now=SystemClock().now(), ttl=timedelta(minutes=minutes))
    finally:
        await links.close()


def _fail(message: str, code: int) -> int:
    line = " ".join(message.split())
    Console(stderr=True).print(f"[red]error:[/] {escape(line)}", soft_wrap=True)
    return code


async def _serve(
    agent: str,
    allow: list[str],
    allow_groups: bool,
    db: Path,
    postgres: str | None,
    api: str,
    poll_timeout: int,
    rate: str,
) -> int:
    try:
        from .telegram import TelegramChannel, channel_name
    except ImportError as exc:
        raise UsageError(str(exc)) from exc
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise UsageError(f"set {TOKEN_ENV} to the bot's token")
    try:
        name = channel_name(token)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from exc
    chats = parse_allow(allow)
    groups = sorted(chat for chat in chats if chat < 0)  # Telegram's group ids are negative
    if groups and not allow_groups:
        raise UsageError(
            f"chat {groups[0]} is a group chat: add --allow-groups to allow group chats "
            "(every member can write in them; only the principal's linked account is obeyed)"
        )
    limit, window = _rate(rate)
    factory = _factory(agent)
    store = await _open_store(db, postgres)
    records = None
    try:
        made = trace_from_env(agent_of(factory(store), agent))
        records = await ChannelRecords.open(
            name,
            sqlite_path=None if postgres else os.fspath(db),
            dsn=postgres,
        )
        inbox = Inbox(limit=limit, window_seconds=window, clock=made.clock)
        inbox.add("chat", AgentChat(made, name="telegram"), per="principal")
        channel = TelegramChannel(
            token=token,
            agent=made,
            inbox=inbox,
            target="chat",
            allow=chats,
            records=records,
            groups=allow_groups,
            api=api,
            poll_timeout=poll_timeout,
            clock=made.clock,
        )
        records = None  # the channel closes them now
        await channel.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        polling = asyncio.create_task(channel.run_forever(stop=stop))
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({polling, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            polling.cancel()
            stopped.cancel()
            failed, _ = await asyncio.gather(polling, stopped, return_exceptions=True)
            await channel.close()
        if isinstance(failed, Exception):
            raise failed
    finally:
        if records is not None:
            await records.close()
        await store.close()
    return 0


def _factory(spec: str) -> Callable[[Store], object]:
    try:
        return load_factory(spec)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from exc


def _rate(text: str) -> tuple[int, float]:
    count, sep, window = text.partition("/")
    try:
        limit, seconds = int(count), float(window) if sep else 60.0
    except ValueError:
        limit, seconds = 0, 0.0
    if limit < 1 or not seconds > 0:
        raise UsageError(f"--rate is written N/SECONDS, like 10/60, not {text!r}")
    return limit, seconds


async def _open_store(db: Path, postgres: str | None) -> Store:
    if postgres:
        from ..stores.postgres import PostgresStore

        return await PostgresStore.open(postgres)
    from ..stores.sqlite import SQLiteStore

    db.parent.mkdir(parents=True, exist_ok=True)
    return await SQLiteStore.open(db)

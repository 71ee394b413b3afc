"""The root ``fiduciary`` command: the ``runs`` and ``approvals`` groups, ``worker``, and the
commands each domain registers (``fiduciary.server.cli``, ``fiduciary.wallet.cli``).

Every command works on one SQLite file: ``--db PATH``, else ``$FIDUCIARY_DB``, else
``.fiduciary/fiduciary.sqlite3``. Only ``demo`` and ``chat`` create it. Resuming a run and
deciding its approvals need the run's agent: ``--agent module:attribute`` names its factory (as
for ``serve`` and ``worker``); the default is the paper-wallet agent (``fiduciary.wallet``),
whose ledger lives in the same file. An agent that is not the run's is refused. Runs and
approvals are named by their full id or by a unique prefix of at least six hex characters.

No traceback reaches the person: fiduciary's errors, sqlite3's and the OS's are caught at the
boundary (``_common._run``) and printed as one red line. Exit codes: 0 done; 1 refused (a
decision refused, a run that did not complete); 2 could not start (usage, an unknown or
ambiguous id, no database, a storage error, a missing extra); 130 interrupted; 141 the reader
of the output went away (``| head``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.main
from rich.console import Console
from rich.markup import escape

from .._gc import for_many_runs
from ..agent_factory import agent_of
from ..observability.environment import trace_from_env
from ._common import McpConfig, _command, load_agent_factory, missing_extra, with_mcp
from .audit import audit_app
from .questions import questions_app
from .records import register as _register_records
from .runs import approvals_app, runs_app
from .timetravel import register as _register_timetravel

__all__ = ["app", "command_tree", "main"]

app = typer.Typer(
    help="fiduciary: a durable, approval-gated runtime for agents that act on someone's behalf.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold arguments a person must not see
)
app.add_typer(runs_app, name="runs")
_register_timetravel(runs_app)
app.add_typer(approvals_app, name="approvals")
app.add_typer(questions_app, name="questions")
_register_records(app, audit_app)
app.add_typer(audit_app, name="audit")


class _OneLineLog(logging.Handler):
    """fiduciary's log records as one line on stderr: no traceback reaches the terminal."""

    def emit(self, record: logging.LogRecord) -> None:
        kind = record.exc_info[0] if record.exc_info else None
        line = f"{record.levelname.lower()}: {record.getMessage()}"
        Console(stderr=True).print(
            f"[dim]{escape(line)}{f' ({kind.__name__})' if kind else ''}[/]", soft_wrap=True
        )


@app.callback()
def _root() -> None:
    """fiduciary: a durable, approval-gated runtime for agents that act on someone's behalf."""
    logger = logging.getLogger("fiduciary")
    if not any(isinstance(h, _OneLineLog) for h in logger.handlers):
        logger.addHandler(_OneLineLog(logging.WARNING))


@_command(app, "worker", interrupted=("stopped", 0))
async def worker(
    agent: Annotated[
        str,
        typer.Option(help="The agent factory to drive runs with: module:callable(store) -> Agent."),
    ],
    postgres: Annotated[
        str, typer.Option(envvar="FIDUCIARY_POSTGRES", help="The shared PostgreSQL DSN.")
    ],
    concurrency: Annotated[int, typer.Option(help="Runs driven at once.")] = 16,
    poll_interval: Annotated[
        float, typer.Option(help="Seconds between polls (besides NOTIFY).")
    ] = 1.0,
    drain_seconds: Annotated[float, typer.Option(help="Seconds to finish runs on SIGTERM.")] = 10.0,
    apps: Annotated[
        Path | None,
        typer.Option(help="Also tick apps: a folder of <id>/app.md manifests (each slot once)."),
    ] = None,
    apps_engine: Annotated[
        str | None,
        typer.Option(help="The apps factory, module:attribute (store, tables, principal)."),
    ] = None,
    apps_principal: Annotated[
        str, typer.Option(help="On whose behalf the apps act.")
    ] = "demo-user",
    mcp_config: McpConfig = None,
) -> int:
    """Claim and drive runs from a shared PostgreSQL database until SIGTERM or Ctrl-C; with
    --apps or --apps-engine, tick the apps too."""
    import signal

    try:
        from ..stores.postgres import PostgresStore
    except ImportError:
        missing_extra("worker", "postgres")
    from ..worker import run_worker

    factory = load_agent_factory(agent)
    store = await PostgresStore.open(postgres)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        made = trace_from_env(agent_of(factory(store), agent))
        async with (
            with_mcp(made, [], mcp_config or []) as (made, _),
            _ticking(store, apps, apps_engine, apps_principal, poll_interval),
        ):
            for_many_runs()  # start-up is over: the collector's policy for many runs at once
            await run_worker(
                made,
                stop=stop,
                concurrency=concurrency,
                poll_interval=poll_interval,
                drain_seconds=drain_seconds,
            )
    finally:
        await store.close()
    return 0


@contextlib.asynccontextmanager
async def _ticking(
    store: Any, folder: Path | None, factory: str | None, principal: str, every: float
) -> AsyncIterator[None]:
    """The apps engine stepping every ``every`` seconds beside the worker (none without
    ``--apps`` or ``--apps-engine``); stopped and closed when the worker stops."""
    if folder is None and factory is None:
        yield
        return
    from ..apps.served import open_apps
    from ._common import apps_engine

    served = await open_apps(
        store, principal=principal, folder=folder, factory=apps_engine(factory)
    )

    async def tick() -> None:
        while True:
            try:
                await served.engine.run_forever(every=every)
            except Exception as exc:  # one failed step must not stop the ticks
                logging.getLogger("fiduciary").warning("apps: a scheduler step failed: %s", exc)
                await asyncio.sleep(every)

    ticking = asyncio.create_task(tick())
    try:
        yield
    finally:
        ticking.cancel()
        with contextlib.suppress(BaseException):
            await ticking
        await served.close()


# Commands that exist without their extra, so that they say how to get it (typer would answer
# "No such command"). Any arguments are accepted: the answer is the same.
_ANY_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def _needs_server(typer_app: typer.Typer, name: str, help_text: str) -> None:
    def command(ctx: typer.Context) -> None:
        missing_extra(ctx.command_path, "server")

    typer_app.command(name, help=help_text, context_settings=_ANY_ARGS)(command)


def _register_server() -> None:
    """``serve`` and ``keys`` from the server extra; without it, commands that name it."""
    try:
        from ..server.cli import register
    except ImportError:
        note = " (needs the server extra: pip install 'fiduciary\\[server]')"
        _needs_server(app, "serve", "Serve the HTTP API and the web console" + note + ".")
        keys = typer.Typer(help="Create, list and revoke API keys" + note + ".")
        for name, what in (("create", "Create"), ("list", "List"), ("revoke", "Revoke")):
            _needs_server(keys, name, f"{what} API keys{note}.")
        app.add_typer(keys, name="keys")
        return
    register(app)


def _register_wallet() -> None:
    from ..wallet.cli import register

    register(app)


def _register_chain() -> None:
    """``chain`` (web3 is imported only when one of its commands runs)."""
    from ..chain.cli import register

    register(app)


_register_chain()


def _register_apps() -> None:
    """``apps`` (fiduciary.apps registers its own commands; PyYAML is the apps extra)."""
    try:
        from ..apps.cli import register
    except ImportError:
        return
    register(app)


def _register_channels() -> None:
    """``telegram`` (the Bot API client is imported only when the command runs)."""
    from ..channels.cli import register

    register(app)


_register_server()
_register_wallet()


def _register_attention() -> None:
    """``attention`` (run, decisions, eval)."""
    from ..attention.cli import register

    register(app)


def _register_memory() -> None:
    """``memory`` (list, forget)."""
    from ..memory.cli import register

    register(app)


def _register_mcp() -> None:
    """``mcp`` (fiduciary.mcp); without the mcp extra, a command that names it. The SDK is
    looked for, not imported: every command of the CLI would pay for loading it."""
    if importlib.util.find_spec("mcp") is None:
        help_text = "Serve the agent's capabilities over MCP (needs the mcp extra)."
        app.command("mcp", help=help_text, context_settings=_ANY_ARGS)(_needs_mcp)
        return
    from ..mcp.cli import register

    register(app)


def _needs_mcp(ctx: typer.Context) -> None:
    missing_extra(ctx.command_path, "mcp")


_register_apps()
_register_channels()
_register_attention()
_register_memory()
_register_mcp()


def _register_evals() -> None:
    """``eval`` (fiduciary.evals registers its own command)."""
    from ..evals.cli import register

    register(app)


_register_evals()


def _one_line_paragraphs(text: str | None) -> str | None:
    """A help text whose paragraphs are one line each: rich then wraps them at the terminal's
    width instead of also breaking them where the docstring's lines end. Lists keep their
    lines."""
    if text is None:
        return None
    paragraphs = inspect.cleandoc(text).split("\n\n")
    joined = []
    for paragraph in paragraphs:
        lines = paragraph.splitlines()
        if any(_LIST_ITEM.match(line) for line in lines[1:]):
            joined.append(paragraph)
        else:
            joined.append(" ".join(paragraph.split()))
    return "\n\n".join(joined)


_LIST_ITEM = re.compile(r"\s*(?:[-*•]|\d+\.)\s")


def _reflow(command: Any) -> None:
    # typer builds on its own copy of click: its classes are reached through the objects
    command.help = _one_line_paragraphs(command.help)
    command.short_help = _one_line_paragraphs(command.short_help)
    for param in command.params:
        if isinstance(getattr(param, "help", None), str):
            param.help = _one_line_paragraphs(param.help)
    for sub in getattr(command, "commands", {}).values():
        _reflow(sub)


def command_tree() -> Any:
    """The ``fiduciary`` command as click runs it, its help texts reflowed."""
    root = typer.main.get_command(app)
    _reflow(root)
    return root


def main() -> None:
    command_tree()(prog_name="fiduciary")

"""The ``fiduciary`` command line: the offline demo, and the inspection of runs and approvals.

```
fiduciary demo [--yes] [--model NAME]
fiduciary chat [--yes] [--model NAME] [--principal WHO]
fiduciary runs list | show RUN | events RUN [--follow] | export RUN
fiduciary runs resume RUN [--agent MODULE:FACTORY] [--any-model]
fiduciary approvals list | approve ID --by P [--agent ...] | deny ID --by P [--agent ...]
```

Every command works on one SQLite file: ``--db PATH``, else ``$FIDUCIARY_DB``, else
``.fiduciary/fiduciary.sqlite3``. Only ``demo`` and ``chat`` create it. Resuming a run and
deciding its approvals need the run's agent: ``--agent module:attribute`` names its factory (as
for ``serve`` and ``worker``); the default is the paper-wallet agent (``fiduciary.wallet``),
whose ledger lives in the same file. An agent that is not the run's is refused. Runs and
approvals are named by their full id or by a unique prefix of at least six hex characters.

The package: ``_common`` (the boundary, ids, formatting), ``terminal`` (rendering a run and
asking about its pending actions), ``runs`` (the ``runs`` and ``approvals`` groups); the rest is
here.

No traceback reaches the person: fiduciary's errors, sqlite3's and the OS's are caught at the
boundary (``_run``) and printed as one red line. Exit codes: 0 done; 1 refused (a decision
refused, a run that did not complete); 2 could not start (usage, an unknown or ambiguous id, no
database, a storage error); 130 interrupted.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ..agent_factory import agent_of
from ..exceptions import ConfigurationError
from ._common import DEFAULT_DB, CliError, Db, Yes, _command, load_agent_factory
from .runs import approvals_app, runs_app
from .terminal import (
    Renderer,
    describe,
    drive_with_approvals,
    follow_events,
    pending_card,
    resume_with_approvals,
)

__all__ = [
    "DEFAULT_DB",
    "Renderer",
    "app",
    "describe",
    "drive_with_approvals",
    "follow_events",
    "main",
    "pending_card",
    "resume_with_approvals",
]

app = typer.Typer(
    help="fiduciary: a durable, approval-gated runtime for agents that act on someone's behalf.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold arguments a person must not see
)
app.add_typer(runs_app, name="runs")
app.add_typer(approvals_app, name="approvals")


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


# --- demo -------------------------------------------------------------------------------------


ModelName = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="A model name (scripted, anthropic:..., openai:...). Default: a provider's when "
        "ANTHROPIC_API_KEY or OPENAI_API_KEY is set, else the scripted model.",
    ),
]


def _environment() -> dict[str, str]:
    return dict(os.environ)


@_command(app, "demo")
async def demo(yes: Yes = False, db: Db = DEFAULT_DB, model: ModelName = None) -> int:
    """The paper-wallet demo: reads in parallel, a small save, a send that waits for you, a
    refused send, a swap after a quote; then the balances and where the ledger is."""
    from ..wallet.console import run_demo

    try:
        return await run_demo(db, yes=yes, out=Console(), env=_environment(), model=model)
    except ConfigurationError as exc:
        raise CliError(str(exc)) from exc


@_command(app, "chat")
async def chat(
    yes: Yes = False,
    db: Db = DEFAULT_DB,
    model: ModelName = None,
    principal: Annotated[str, typer.Option(help="Whose wallet.")] = "demo-user",
) -> int:
    """Talk to the paper-wallet agent; pending actions are asked about at the terminal."""
    from ..wallet.console import run_chat

    if not principal.strip():
        raise CliError("--principal must name someone")
    try:
        return await run_chat(
            db, principal=principal, yes=yes, out=Console(), env=_environment(), model=model
        )
    except ConfigurationError as exc:
        raise CliError(str(exc)) from exc


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
) -> int:
    """Claim and drive runs from a shared PostgreSQL database until SIGTERM or Ctrl-C."""
    import signal

    from ..stores.postgres import PostgresStore
    from ..worker import run_worker

    factory = load_agent_factory(agent)
    store = await PostgresStore.open(postgres)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await run_worker(
            agent_of(factory(store), agent),
            stop=stop,
            concurrency=concurrency,
            poll_interval=poll_interval,
            drain_seconds=drain_seconds,
        )
    finally:
        await store.close()
    return 0


def _register_server() -> None:
    """``serve`` and ``keys`` need the server extra; without it, ``serve`` says how to get it."""
    try:
        from ..server.cli import register
    except ImportError:

        @app.command("serve", help="Serve the HTTP API and console (needs fiduciary[server]).")
        def serve_missing() -> None:
            err_console = Console(stderr=True)
            err_console.print(
                "[red]error:[/] the server needs the 'server' extra: "
                "pip install 'fiduciary[server]'"
            )
            raise typer.Exit(2)

        return
    register(app)


_register_server()


# --- MCP hook (fiduciary.mcp registers its own command; absent without the mcp extra) -------
def _register_mcp() -> None:
    try:
        from ..mcp.cli import register as register_mcp
    except ImportError:

        @app.command("mcp", help="Serve capabilities over MCP (needs fiduciary[mcp]).")
        def mcp_missing() -> None:
            Console(stderr=True).print(
                "[red]error:[/] MCP needs the 'mcp' extra: pip install 'fiduciary[mcp]'"
            )
            raise typer.Exit(2)

        return
    register_mcp(app)


_register_mcp()


def main() -> None:
    app(prog_name="fiduciary")


if __name__ == "__main__":  # pragma: no cover
    main()

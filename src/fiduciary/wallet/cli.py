"""The paper wallet's commands: ``fiduciary demo [--reset]`` and ``fiduciary chat``.
``register(app)`` adds them to the ``fiduciary`` command, as ``fiduciary.server.cli`` adds its
own; the terminal work is in ``console``, below them the CLI's ``terminal``."""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.console import Console

from ..cli._common import DEFAULT_DB, CliError, Db, Yes, _command
from ..cli._holding import holding
from ..exceptions import ConfigurationError

__all__ = ["register"]

ModelName = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="A model name: scripted, anthropic:MODEL, openai:MODEL, gemini:MODEL. Default: "
        "FIDUCIARY_MODEL, else a provider's when ANTHROPIC_API_KEY, OPENAI_API_KEY or "
        "GEMINI_API_KEY is set, else the scripted model.",
        show_default=False,
    ),
]


def _environment() -> dict[str, str]:
    return dict(os.environ)


def register(app: typer.Typer) -> None:
    """Add ``demo`` and ``chat`` to the ``fiduciary`` command."""

    @_command(app, "demo")
    async def demo(
        yes: Yes = False,
        db: Db = DEFAULT_DB,
        model: ModelName = None,
        reset: Annotated[
            bool,
            typer.Option(
                "--reset",
                help="Start afresh: delete the database file first, and everything in it: "
                "runs and their events, approvals, the audit and the idempotency ledger, "
                "memory, apps' and channels' state, and the paper wallet's books (the "
                "balances are the opening ones again). Its API keys are kept. Refused while "
                "another process (fiduciary serve, chat, demo, mcp) has the file open.",
            ),
        ] = False,
        reset_keys: Annotated[
            bool,
            typer.Option("--reset-keys", help="With --reset: delete the API keys too."),
        ] = False,
        chain: Annotated[
            bool,
            typer.Option(
                "--chain",
                help="The demo on a local anvil started for it (make chain-tools; the chain "
                "extra): deploy, the card with the simulation, the transaction hash and block "
                "after approval, the balances read from the chain and reconciled.",
            ),
        ] = False,
    ) -> int:
        """The paper-wallet demo: two reads in parallel, a small save, a send that waits for
        you, a refused send, and a swap after a quote; then the balances and where the ledger
        is.

        The paper wallet carries over from one demo to the next, in the database file; --reset
        starts from the opening balances."""
        from .console import run_demo
        from .reset import reset_database

        if reset_keys and not reset:
            raise CliError("--reset-keys goes with --reset")
        if chain:
            return await _chain_demo(yes=yes)
        out = Console()
        if reset:
            reset_database(db, out, keep_keys=not reset_keys)
        try:
            with holding(db, "fiduciary demo"):
                return await run_demo(db, yes=yes, out=out, env=_environment(), model=model)
        except ConfigurationError as exc:
            raise CliError(str(exc)) from exc

    async def _chain_demo(*, yes: bool) -> int:
        try:
            from ..chain.demo import run_chain_demo
        except ImportError:
            raise CliError(
                "the chain demo needs the chain extra: pip install 'fiduciary[chain]'"
            ) from None

        async def ask(card: object) -> bool:
            return yes or typer.confirm("Approve this send?", default=False)

        try:
            return await run_chain_demo(say=typer.echo, ask=ask)
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
        from .console import run_chat

        if not principal.strip():
            raise CliError("--principal must name someone")
        try:
            with holding(db, "fiduciary chat"):
                return await run_chat(
                    db, principal=principal, yes=yes, out=Console(), env=_environment(), model=model
                )
        except ConfigurationError as exc:
            raise CliError(str(exc)) from exc

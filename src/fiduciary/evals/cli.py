"""``fiduciary eval CASES``: run an agent over a dataset of cases, report each and the total.

Registered by ``register(app)`` (the CLI calls it at import). The agent is ``--agent``'s factory
(``module:attribute``, ``store -> Agent``), called once per case with a new in-memory store,
else the paper-wallet agent over new books in memory; ``--model`` replaces its model. Exit
codes: 0 every case passed, 1 a case failed, 2 the cases or the agent could not be loaded.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..agent import Agent
from ..agent_factory import agent_of
from ..cli._common import CliError, _command, load_agent_factory
from ..exceptions import ConfigurationError
from ..models.base import Model
from ..stores.memory import MemoryStore
from .dataset import load_dataset
from .runner import CaseResult, EvalReport, run_dataset

__all__ = ["register"]


def _model(name: str | None) -> Model | None:
    """The model ``--model`` names; ``scripted`` (or nothing) keeps the agent's own."""
    if name is None or name.strip() == "scripted":
        return None
    from ..wallet.demo import load_model, require_key

    try:
        require_key(name, os.environ)
        return load_model(name)
    except ConfigurationError as exc:
        raise CliError(str(exc)) from exc


def _table(report: EvalReport) -> Table:
    table = Table(title=f"{report.name or 'eval'} · {report.model}", show_lines=False)
    table.add_column("case")
    table.add_column("result")
    table.add_column("status")
    table.add_column("checks")
    table.add_column("why it failed")
    for case in report.cases:
        ok = sum(1 for c in case.checks if c.passed)
        why = case.error or "; ".join(f"{c.label}: {c.why}" for c in case.checks if not c.passed)
        table.add_row(
            escape(case.name),
            "[green]pass[/]" if case.passed else "[red]FAIL[/]",
            case.status,
            f"{ok}/{len(case.checks)}",
            escape(why),
        )
    ok, total = report.checks
    table.add_section()
    table.add_row(
        "total",
        f"{report.passed}/{len(report.cases)} passed",
        "",
        f"{ok}/{total}",
        "",
    )
    return table


def register(app: typer.Typer) -> None:
    @_command(app, "eval")
    async def eval_cases(
        cases: Annotated[
            Path,
            typer.Argument(
                metavar="CASES", help="A pydantic-evals dataset of cases (.yaml, .yml or .json)."
            ),
        ],
        agent: Annotated[
            str | None,
            typer.Option(
                "--agent",
                help="The agent factory, module:attribute (store -> Agent), called once per "
                "case. Default: the paper-wallet agent, over new books in memory.",
            ),
        ] = None,
        model: Annotated[
            str | None,
            typer.Option(
                "--model",
                help="provider:name: replaces the agent's model ('scripted': keeps its own).",
            ),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    ) -> int:
        """Run an agent over a file of cases and check each run: its calls and their
        arguments, their tiers, forbidden calls, its status and its answer."""
        try:
            dataset = load_dataset(cases)
        except ConfigurationError as exc:
            raise CliError(str(exc)) from exc
        chosen = _model(model)
        console = Console()
        with contextlib.ExitStack() as books:
            if agent is None:
                from ..wallet import PaperWallet
                from ..wallet.demo import build_wallet_agent

                def make() -> Agent:
                    wallet = books.enter_context(PaperWallet())
                    return build_wallet_agent(MemoryStore(), wallet)
            else:
                factory = load_agent_factory(agent)
                spec = agent

                def make() -> Agent:
                    try:
                        return agent_of(factory(MemoryStore()), spec)
                    except ConfigurationError as exc:
                        raise CliError(str(exc)) from exc

            def progress(result: CaseResult) -> None:
                if not as_json:
                    mark = "[green]pass[/]" if result.passed else "[red]FAIL[/]"
                    console.print(f"{mark} {escape(result.name)}", highlight=False)

            report = await run_dataset(dataset, make, model=chosen, on_case=progress)
        if as_json:
            typer.echo(json.dumps(report.as_json(), default=str))
        else:
            console.print(_table(report))
        return 0 if report.passed == len(report.cases) else 1

"""``fiduciary runs replay | fork | diff``: time travel over recorded runs (registered on the
``runs`` group by ``cli/app.py``; the work is ``fiduciary.observability``'s)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ..models.base import Model
from ..observability.diff import diff, render_diff
from ..observability.fork import fork, parse_decide
from ..observability.replay import replay
from ._common import (
    DEFAULT_DB,
    AgentSpec,
    CliError,
    Db,
    JsonFlag,
    RunRef,
    _command,
    _find_run,
    db_option,
    program,
)
from ._common import _open as open_store
from ._common import _styled as styled
from .runs import _agent, _recorded_model, _wallet_agent

__all__ = ["register"]


def register(runs_app: typer.Typer) -> None:
    """Add ``replay``, ``fork`` and ``diff`` to the ``runs`` group."""

    @_command(runs_app, "replay")
    async def runs_replay(
        run: RunRef,
        db: Db = DEFAULT_DB,
        model: Annotated[
            str | None,
            typer.Option("--model", help="The model to replay with (default: the run's)."),
        ] = None,
        upto: Annotated[
            int | None,
            typer.Option("--upto", help="Replay the person's messages up to this seq only."),
        ] = None,
        live_reads: Annotated[
            bool,
            typer.Option("--live-reads", help="Run reads the recording lacks (never writes)."),
        ] = False,
        agent_spec: AgentSpec = None,
    ) -> int:
        """Re-run a recorded run in a new run marked as a replay: reads answer from the
        recording, writes are never executed (each is recorded as what it would have called)."""
        out = Console()
        async with open_store(db) as store:
            record = await _find_run(store, run)
            recorded = await _recorded_model(store, record.run_id)
            async with _agent(store, agent_spec, model=recorded) as agent:
                chosen: Model | None = None
                if model is not None and model != recorded:
                    chosen = await _model_named(store, model, agent_spec)
                rid = await replay(
                    agent, record.run_id, model=chosen, upto=upto, live_reads=live_reads
                )
                final = await agent.get_run(rid)
        out.print(
            f"replay [bold]{rid}[/] of run {record.run_id} is {styled(final.status)} after "
            f"{final.last_seq} events; nothing was executed. Compare them with: {program()} runs "
            f"diff {str(record.run_id)[:8]} {str(rid)[:8]}{db_option(db)}",
            soft_wrap=True,
            highlight=False,
        )
        return 0

    @_command(runs_app, "fork")
    async def runs_fork(
        run: RunRef,
        at: Annotated[int, typer.Option("--at", help="The seq the fork's history ends at.")],
        db: Db = DEFAULT_DB,
        decide: Annotated[
            str | None,
            typer.Option(
                "--decide",
                help="Decide the approval pending at --at: approve, deny or edit:{json}.",
            ),
        ] = None,
        by: Annotated[
            str | None, typer.Option("--by", help="Who decides (default: the run's principal).")
        ] = None,
        agent_spec: AgentSpec = None,
    ) -> int:
        """A new, real run whose history is RUN's log up to --at, continuing from there: its
        writes go through the gates and execute like any run's."""
        out = Console()
        chosen = None if decide is None else parse_decide(decide)
        async with open_store(db) as store:
            record = await _find_run(store, run)
            recorded = await _recorded_model(store, record.run_id)
            async with _agent(store, agent_spec, model=recorded) as agent:
                rid = await fork(agent, record.run_id, at, decide=chosen, by=by)
                final = await agent.get_run(rid)
        out.print(
            f"[bold yellow]FORK[/] [bold]{rid}[/] of run {record.run_id} at seq {at} is "
            f"{styled(final.status)} after {final.last_seq} events. It is a real run: its "
            "writes executed.",
            soft_wrap=True,
        )
        return 0 if final.status in ("completed", "awaiting_approval") else 1

    @_command(runs_app, "diff")
    async def runs_diff(
        a: Annotated[str, typer.Argument(metavar="A", help="A run id or a unique prefix.")],
        b: Annotated[str, typer.Argument(metavar="B", help="A run id or a unique prefix.")],
        db: Db = DEFAULT_DB,
        as_json: JsonFlag = False,
    ) -> int:
        """Where two runs diverge: the first differing event, the calls and arguments that
        differ, tiers and amounts, the final text."""
        async with open_store(db) as store:
            run_a, run_b = await _find_run(store, a), await _find_run(store, b)
            found = await diff(store, run_a.run_id, run_b.run_id)
        if as_json:
            typer.echo(json.dumps(found.to_json(), default=str))
        else:
            Console().print(escape(render_diff(found)), soft_wrap=True, highlight=False)
        return 0 if found.same else 1


async def _model_named(store: object, name: str, spec: str | None) -> Model:
    """The model ``--model`` names: the paper wallet's loader for the default agent (its
    scripted demo included), the registry's otherwise."""
    if spec is None:
        from ..stores.sqlite import SQLiteStore

        assert isinstance(store, SQLiteStore)
        async with _wallet_agent(store, name) as other:
            return other.model
    from ..exceptions import ConfigurationError
    from ..models.registry import resolve_model

    try:
        return resolve_model(name)
    except ConfigurationError as exc:
        raise CliError(f"{exc} (--model)") from exc

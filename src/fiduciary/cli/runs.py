"""``fiduciary runs`` and ``fiduciary approvals``: inspect, export and resume runs; list and
decide pending actions."""

from __future__ import annotations

import json
import os
import shlex
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from .. import events as ev
from ..agent import Agent
from ..agent_factory import agent_of
from ..display import show_text, show_value
from ..dual_control import EDITED, as_voted, standing
from ..events import Event, encode_event
from ..exceptions import ApprovalError, ConfigurationError, RunError
from ..observability.environment import trace_from_env
from ..outputs import recorded_output
from ..run_tree import ancestors, run_tree
from ..stores.base import ApprovalRecord, ApprovalStatus, RunStatus, Store
from ..stores.sqlite import SQLiteStore
from ._app_decisions import app_engine, continue_apps, is_app_run
from ._common import (
    _FINISHED,
    DEFAULT_DB,
    AgentSpec,
    ApprovalRef,
    By,
    CliError,
    Db,
    JsonFlag,
    PromptInterruptedError,
    RunRef,
    Yes,
    _all_events,
    _command,
    _find_approval,
    _find_run,
    _jsonable,
    _open,
    _short,
    _styled,
    _usd,
    _when,
    db_option,
    load_agent_factory,
    program,
    resume_command,
    with_mcp,
)
from ._lineage import breadcrumbs, delegated_from, print_delegates, print_output
from .terminal import Renderer, describe, follow_events, resume_with_approvals

__all__ = ["approvals_app", "runs_app"]

runs_app = typer.Typer(help="Inspect, export and resume runs.", no_args_is_help=True)
approvals_app = typer.Typer(help="List and decide pending actions.", no_args_is_help=True)


# --- the run's agent ---


Check = Callable[[Agent], Awaitable[None]]


@asynccontextmanager
async def _wallet_agent(
    store: SQLiteStore, model: str | None = None, check: Check | None = None
) -> AsyncIterator[Agent]:
    """The paper-wallet agent, its ledger in the store's file; ``model`` names its model (the
    scripted demo's by default). ``check`` refuses it before its books are made in the file:
    it is given the same agent over books in memory (a refusal changes nothing)."""
    from ..wallet import PaperWallet
    from ..wallet.demo import build_wallet_agent, load_model, require_key, wallet_memory

    chosen = None
    if model is not None and model != "scripted":
        try:
            chosen = load_model(model)
            require_key(model, os.environ)
        except ConfigurationError as exc:
            raise CliError(f"{exc} (the run's model)") from exc
    if check is not None:
        with PaperWallet() as probe:  # the capabilities and the model, no table in the file
            await check(build_wallet_agent(store, probe, model=chosen))
    memory = wallet_memory(store)
    with PaperWallet(store.path) as wallet:
        agent = trace_from_env(build_wallet_agent(store, wallet, model=chosen, memory=memory))
        try:
            yield agent
        finally:
            if agent.memory is not None:
                await agent.memory.drain()
            await memory.close()


@asynccontextmanager
async def _agent(
    store: SQLiteStore, spec: str | None, *, model: str | None = None, check: Check | None = None
) -> AsyncIterator[Agent]:
    """The agent ``--agent`` names, else the paper-wallet agent running ``model``; ``check``
    (which may refuse it) is passed before it is used."""
    if spec is None:
        async with _wallet_agent(store, model, check) as wallet_agent:
            yield wallet_agent
        return
    factory = load_agent_factory(spec)
    try:
        made = factory(store)
    except Exception as exc:  # someone else's code: its failure is one line too
        raise CliError(f"the agent factory {spec} failed: {type(exc).__name__}: {exc}") from exc
    try:
        agent = trace_from_env(agent_of(made, spec))
    except ConfigurationError as exc:
        raise CliError(str(exc)) from exc
    # the external MCP servers the agent's server and workers are given (its runs may call them)
    servers = os.environ.get("FIDUCIARY_MCP_CONFIG", "").split()
    async with with_mcp(agent, [], servers) as (agent, _):
        if check is not None:
            await check(agent)  # with the servers' tools: the run may have called them
        yield agent


# --- runs -------------------------------------------------------------------------------------


@_command(runs_app, "list")
async def runs_list(
    db: Db = DEFAULT_DB,
    status: Annotated[RunStatus | None, typer.Option(help="Only runs in this status.")] = None,
    principal: Annotated[str | None, typer.Option(help="Only this principal's runs.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many (newest first).")] = 20,
    as_json: JsonFlag = False,
) -> int:
    """The newest runs: id, principal, status, events, last update, title (a delegated run's
    says whose delegate it is)."""
    async with _open(db) as store:
        runs = await store.list_runs(principal=principal, status=status, limit=limit)
        parents = {r.run_id: await delegated_from(store, r.run_id) for r in runs}
    if as_json:
        for run in runs:
            above = parents[run.run_id]
            link = {"delegate": above[0], "parent_run_id": above[1]} if above else {}
            typer.echo(_jsonable({**asdict(run), **link}))
        return 0
    out = Console()
    rows = [
        (_short(r.run_id), escape(r.principal), r.status, str(r.last_seq), _when(r.updated_at))
        for r in runs
    ]
    headers = ("id", "principal", "status", "events", "updated (UTC)")
    # one line per run at any width: the title takes what is left, cut with an ellipsis
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    left = out.width - sum(widths) - 2 * len(headers)  # two spaces between columns
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    for name in headers:
        table.add_column(name, no_wrap=True, justify="right" if name == "events" else "left")
    table.add_column("title", no_wrap=True, overflow="ellipsis", max_width=max(8, left))
    for r, row in zip(runs, rows, strict=True):
        title = escape(" ".join(r.title.split()))
        above = parents[r.run_id]
        if above is not None:  # a delegated run: whose delegate it is
            title = f"[dim]↳ {escape(above[0])} of {_short(above[1])}:[/] {title}"
        table.add_row(*row[:2], _styled(row[2]), *row[3:], title)
    out.print(table if runs else "[dim]no runs[/]")
    return 0


def _print_approvals(out: Console, records: Sequence[ApprovalRecord], notes: CardNotes) -> None:
    """The approvals' table, then each one's guard notes (their sentences for the person)."""
    now = datetime.now(UTC)
    table = Table("id", "run", "capability", "amount", "tier", "expires (UTC)", "status")
    for a in records:
        status = _styled(a.status)
        if a.status == "pending" and a.expires_at <= now:
            status += " [dim](expired)[/]"
        ids = (_short(a.approval_id), _short(a.run_id))
        row = (escape(a.capability), _usd(a.amount_usd), a.tier, _when(a.expires_at), status)
        table.add_row(*ids, *row)
    out.print(table)
    for a in records:
        if a.status == "pending" and a.approved_digest is not None:  # as_voted: amount, tier
            edited = escape(show_value(a.approved_args).text)
            line = f"{_short(a.approval_id)}: {EDITED}: {edited} (sha256 {a.approved_digest})"
            out.print(line, soft_wrap=True)
        for n in notes.get(a.approval_id, ()):
            said = escape(show_text(f"[{n.guard}] {n.shown}").text)
            out.print(f"{_short(a.approval_id)} {n.verdict}: {said}", soft_wrap=True)


CardNotes = dict[UUID, list[ev.GuardNote]]


async def _card_notes(store: Store, records: Sequence[ApprovalRecord]) -> CardNotes:
    """The guards' notes each approval's card showed (their sentences for the person)."""
    notes: CardNotes = {}
    for run_id in dict.fromkeys(r.run_id for r in records):
        async for event in _all_events(store, run_id):
            if isinstance(event, ev.PendingAction):
                notes[event.approval_id] = list(event.guard_notes)
    return notes


@_command(runs_app, "show")
async def runs_show(
    run: RunRef,
    db: Db = DEFAULT_DB,
    last: Annotated[int, typer.Option(min=0, help="How many of the last events to list.")] = 10,
) -> int:
    """A run: its record, its pending approvals, its totals, its typed output, its place in a
    delegation (the runs above it, those it delegated to), its last events."""
    async with _open(db) as store:
        record = await _find_run(store, run)
        pending = await store.list_approvals(run_id=record.run_id, status="pending")
        count: Counter[str] = Counter()  # by event type, plus tool errors and tokens
        tail: deque[Event] = deque(maxlen=last)
        notes: CardNotes = {}
        answered: Counter[str] = Counter()  # a FallbackModel's turns: the model that answered
        async for event in _all_events(store, record.run_id):
            count[event.type] += 1
            if isinstance(event, ev.PendingAction):
                notes[event.approval_id] = list(event.guard_notes)
            if isinstance(event, ev.TurnComplete) and event.model is not None:
                answered[event.model] += 1
            if isinstance(event, ev.ToolCallEnd) and event.is_error:
                count["errors"] += 1
            elif isinstance(event, ev.Usage):
                count.update(tokens_in=event.input_tokens, tokens_out=event.output_tokens)
            tail.append(event)
        above = await ancestors(store, record.run_id)
        below = await run_tree(store, record.run_id)
        output = await recorded_output(store, record)
    calls, refused = count["tool_call_start"], count["tool_call_rejected"]
    lease = "free"
    if record.lease_owner is not None:
        lease = f"{escape(record.lease_owner)} until {_when(record.lease_until)}"
    grid = Table.grid(padding=(0, 2))
    for name, value in (
        ("principal", escape(record.principal)),
        ("status", _styled(record.status)),
        ("title", escape(record.title)),
        ("created", _when(record.created_at)),
        ("updated", _when(record.updated_at)),
        ("events", str(record.last_seq)),
        ("lease", f"{lease} (epoch {record.epoch})"),
        ("tool calls", f"{calls} ({count['errors']} errors, {refused} refused)"),
        ("tokens", f"{count['tokens_in']} in / {count['tokens_out']} out"),
    ):
        grid.add_row(name, value)
    if above:
        grid.add_row("delegated by", breadcrumbs(above))
    for model, turns in answered.items():
        grid.add_row("answered by", f"{escape(model)} ({turns} turn{'s' * (turns > 1)}, fallback)")
    out = Console()
    out.print(Panel(grid, title=f"[bold]run {record.run_id}[/]", expand=False))
    print_output(out, output)
    if below is not None:
        print_delegates(out, below)
    if pending:
        out.print("[bold]waiting for a decision[/]")
        _print_approvals(out, pending, notes)
        hint = f"{program()} approvals approve ID --by {shlex.quote(record.principal)}"
        out.print(f"decide with: {hint}{db_option(db)}", markup=False, soft_wrap=True)
    if tail:
        out.print(f"[bold]last {len(tail)} events[/]")
        events = Table("seq", "at (UTC)", "type", "what", box=None)
        for e in tail:
            events.add_row(str(e.seq), _when(e.at), e.type, escape(describe(e)))
        out.print(events)
    return 0


@_command(runs_app, "events", interrupted=("stopped following", 0))  # how a person stops -f
async def runs_events(
    run: RunRef,
    db: Db = DEFAULT_DB,
    after: Annotated[int, typer.Option(min=0, help="Only the events after this seq.")] = 0,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Print new events until the run finishes.")
    ] = False,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Follow until the run is not running.")
    ] = False,
    poll: Annotated[float, typer.Option(min=0.01, help="Seconds between looks, following.")] = 0.5,
    as_json: JsonFlag = False,
) -> int:
    """A run's events, rendered or as JSON lines; --follow also prints new ones as they come.

    Following stops when the run is completed, failed or cancelled and every event is printed
    (with --until-idle, as soon as it is not running), or on Ctrl-C.
    """
    render = Renderer(Console())

    def emit(event: Event) -> None:
        if as_json:
            typer.echo(encode_event(event))
        else:
            render(event)

    async with _open(db) as store:
        record = await _find_run(store, run)
        try:
            if follow or until_idle:
                await follow_events(
                    store,
                    record.run_id,
                    emit,
                    after_seq=after,
                    until_idle=until_idle,
                    poll_seconds=poll,
                )
            else:
                async for event in _all_events(store, record.run_id, after_seq=after):
                    emit(event)
        finally:
            render.flush()
    return 0


@_command(runs_app, "export")
async def runs_export(
    run: RunRef,
    db: Db = DEFAULT_DB,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="A file, not stdout.")
    ] = None,
) -> int:
    """A run's whole log as JSONL: one event per line, in seq order (see decode_event)."""
    async with _open(db) as store:
        record = await _find_run(store, run)
        if output is None:
            async for event in _all_events(store, record.run_id):
                typer.echo(encode_event(event))
            return 0
        count = 0
        with output.open("w", encoding="utf-8", newline="\n") as sink:
            async for event in _all_events(store, record.run_id):
                sink.write(encode_event(event) + "\n")
                count += 1
    Console(stderr=True).print(
        f"{count} events of run {record.run_id} written to {output}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return 0


@_command(runs_app, "resume")
async def runs_resume(
    run: RunRef,
    db: Db = DEFAULT_DB,
    yes: Yes = False,
    by: Annotated[
        str | None, typer.Option(help="Who decides (default: the run's principal).")
    ] = None,
    agent_spec: AgentSpec = None,
    any_model: Annotated[
        bool,
        typer.Option(
            "--any-model", help="Drive the run with the agent's model even if it is not the run's."
        ),
    ] = False,
) -> int:
    """Continue a run from its log: after a crash, or once its approvals are decided.

    Resuming runs the run's agent: --agent names it (module:attribute, as for serve and
    worker); without it, the paper-wallet agent, on the model the run recorded. An agent that
    lacks the run's capabilities, or has another model (unless --any-model), is refused and
    the run is left as it was. Pending actions are asked about at the terminal, or approved
    with --yes.

    Resuming finishes what the run was last asked; it says nothing new to the agent (a demo
    run's remaining steps are played by fiduciary demo, which offers the run first).
    """
    out = Console()
    async with _open(db) as store:
        record = await _find_run(store, run)
        if record.status in _FINISHED:
            out.print(f"run {record.run_id} is already {record.status}: nothing to resume")
            return 0
        model = await _recorded_model(store, record.run_id)

        async def check(agent: Agent) -> None:
            await _check_agent(agent, record.run_id, agent_spec, any_model=any_model)

        async with _agent(store, agent_spec, model=model, check=check) as agent:
            try:
                await resume_with_approvals(
                    agent,
                    record.run_id,
                    by or record.principal,
                    yes=yes,
                    out=out,
                    any_model=any_model,
                )
            except PromptInterruptedError as exc:
                raise PromptInterruptedError(exc.run_id, db, agent_spec) from None
            final = await agent.get_run(record.run_id)
    out.print(
        f"run [bold]{final.run_id}[/] is {_styled(final.status)} after {final.last_seq} events."
    )
    return 0 if final.status == "completed" else 1


async def _recorded_model(store: Store, run_id: UUID) -> str | None:
    """The name of the model a run was started with (its ``run_started``)."""
    first = await store.read_events(run_id, limit=1)
    return first[0].model if first and isinstance(first[0], ev.RunStarted) else None


async def _check_agent(
    agent: Agent, run_id: UUID, spec: str | None, *, any_model: bool | None
) -> None:
    """Refuse an agent that is not the run's (``any_model`` None: only its capabilities count,
    as in deciding an approval)."""
    which = f"the agent {spec}" if spec else "the paper-wallet agent (the default)"
    try:
        await agent.check_resumable(run_id, any_model=True)
    except RunError as exc:
        raise CliError(
            f"{which} is not this run's agent: {exc.message}; name the run's agent with "
            f"--agent module:attribute ({exc.code})",
            1,
        ) from exc
    if any_model is None:
        return
    try:
        await agent.check_resumable(run_id, any_model=any_model)
    except RunError as exc:
        raise CliError(
            f"{which} is not this run's agent: {exc.message}; name the run's agent with "
            f"--agent module:attribute, or pass --any-model to drive the run with this agent's "
            f"model ({exc.code})",
            1,
        ) from exc


# --- approvals --------------------------------------------------------------------------------


@_command(approvals_app, "list")
async def approvals_list(
    db: Db = DEFAULT_DB,
    principal: Annotated[str | None, typer.Option(help="Only this principal's approvals.")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Decided ones too.")] = False,
    as_json: JsonFlag = False,
) -> int:
    """Pending actions waiting for a person (all of them with --all)."""
    async with _open(db) as store:
        status: ApprovalStatus | None = None if show_all else "pending"
        records = await store.list_approvals(principal=principal, status=status)
        notes = await _card_notes(store, records)
        # under dual control, after an approver's edit: the edited arguments the set votes on
        records = [as_voted(r, await store.list_votes(r.approval_id)) for r in records]
    if as_json:  # notes: the guards' sentences for the person, as the card shows them
        for record in records:
            shown = [
                {"guard": n.guard, "verdict": n.verdict, "message": n.shown}
                for n in notes.get(record.approval_id, ())
            ]
            edited = record.status == "pending" and record.approved_digest is not None
            extra = {"notes": shown, "edited": edited}
            if edited:
                extra["note"] = EDITED
            typer.echo(_jsonable({**asdict(record), **extra}))
    elif records:
        _print_approvals(Console(), records, notes)
    else:
        Console().print("[dim]no approvals[/]" if show_all else "[dim]no pending approvals[/]")
    return 0


def _parse_edits(items: Sequence[str]) -> dict[str, Any]:
    """``field=text`` sets a string (validation converts it); ``field:=json`` a JSON value."""
    edits: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.rstrip(":"):
            raise CliError(f"--edit {item!r}: expected field=value or field:=json")
        if not name.endswith(":"):
            edits[name] = value
            continue
        try:
            edits[name[:-1]] = json.loads(value)
        except ValueError as exc:
            raise CliError(f"--edit {item!r}: {value!r} is not JSON") from exc
    return edits


def _refusal(exc: ApprovalError, record: ApprovalRecord, by: str, agent: Agent) -> str:
    """An ApprovalError told in terms of the approval at hand, its code last."""
    short = _short(record.approval_id)
    match exc.code:
        case "already_decided" | "expired" if record.status != "pending":
            who = f" by {record.decided_by}" if record.decided_by else ""
            text = f"approval {short} is already {record.status}{who}"
        case "expired":
            text = f"approval {short} expired at {_when(record.expires_at)}"
        case "forbidden":
            text = f"{by} may not decide approval {short}: it belongs to {record.principal}"
        case "acknowledgement_required":
            text = f"{exc.message}; pass --amount {record.amount_usd}"
        case "field_not_modifiable":
            text = f"{exc.message} (editable: {', '.join(record.modifiable_fields) or 'none'})"
        case "unknown" if agent.gates.get(record.capability) is None:
            text = f"{record.capability} is not a capability of this agent (see --agent)"
        case "client_executed":
            text = "the client performs this action and reports its result; it is not approved"
        case _:
            text = exc.message
    return f"{text} ({exc.code})"


async def _decide(
    db: Path,
    ref: str,
    by: str,
    spec: str | None,
    decision: Callable[[Agent, ApprovalRecord], Awaitable[ApprovalRecord]],
    apps_engine: str | None = None,
) -> int:
    """Resolve an approval, decide it durably under the rules of the run's agent (``spec``, else
    the apps engine's for a run it started, else the paper-wallet agent), say what happened."""
    if not by.strip():
        raise CliError("--by must name who decides")
    continued: list[str] | None = None  # an app's: what the engine continued
    async with _open(db) as store:
        record = await _find_approval(store, ref)

        async def decided_by(agent: Agent) -> ApprovalRecord:
            try:
                return await decision(agent, record)
            except ApprovalError as exc:
                current = await store.get_approval(record.approval_id) or record
                raise CliError(_refusal(exc, current, by, agent), 1) from exc

        async def check(agent: Agent) -> None:
            await _check_agent(agent, record.run_id, spec, any_model=None)

        if spec is None and await is_app_run(store, record.run_id):
            async with app_engine(db, record.principal, apps_engine) as engine:
                decider = engine.decider()
                decided = await decided_by(decider)
                progress = await _progress(store, decider, decided)
                continued = await continue_apps(engine, record.run_id)
        else:
            async with _agent(store, spec, check=check) as agent:
                decided = await decided_by(agent)
                progress = await _progress(store, agent, decided)
    verb = "[green]approved[/]" if decided.status == "approved" else "[red]denied[/]"
    if decided.status == "superseded":  # a new approval, with fresh arguments, when it resumes
        verb = "[yellow]superseded, to be made anew with fresh arguments[/]"
    if decided.status == "pending":  # dual control: one vote of N
        verb = f"[yellow]approval recorded ({escape(progress)})[/]"
    shown = show_value(decided.approved_args or decided.args)
    args = shown.text
    amount = "" if decided.amount_usd is None else f" · {_usd(decided.amount_usd)}"
    why = f" ({decided.reason})" if decided.reason else ""
    out = Console()
    out.print(
        f"{verb} {_short(decided.approval_id)}: {escape(decided.capability)} {escape(args)}"
        f"{amount} · by {escape(by + why)}",
        soft_wrap=True,
    )
    if shown.warning:
        out.print(f"[bold red]look closely:[/] [red]{escape(shown.warning)}[/]", soft_wrap=True)
    if continued is not None:
        for line in continued or ["the apps engine had nothing waiting to continue"]:
            out.print(f"app {line}", soft_wrap=True, markup=False, highlight=False)
        return 0
    if decided.status != "pending":
        hint = f"resume the run with: {resume_command(decided.run_id, db, spec)}"
        out.print(hint, soft_wrap=True, markup=False, highlight=False)
    return 0


async def _progress(store: Store, agent: Agent, record: ApprovalRecord) -> str:
    """Where an approval under dual control stands ("1 of 2 approved (bob, 12:03)")."""
    cap = agent.gates.get(record.capability)
    rules = agent.gates.policy.dual_control
    found = await standing(store, rules, record, None if cap is None else cap.operation)
    return "" if found is None else found[1].text()


AppsEngine = Annotated[
    str | None,
    typer.Option(
        "--apps-engine",
        help="For an app's approval: the apps factory that serves it, module:attribute (as "
        "serve --apps-engine); default: the wallet's sample apps.",
        show_default=False,
    ),
]


@_command(approvals_app, "approve")
async def approvals_approve(
    approval: ApprovalRef,
    by: By,
    db: Db = DEFAULT_DB,
    amount: Annotated[str | None, typer.Option(help="The amount re-typed (explicit tier).")] = None,
    edit: Annotated[
        list[str] | None,
        typer.Option(help="Change a modifiable field: field=text or field:=json. Repeatable."),
    ] = None,
    agent_spec: AgentSpec = None,
    apps_engine: AppsEngine = None,
) -> int:
    """Approve a pending action (decide only: it runs when the run resumes; an app's is
    continued by its engine at once: an approved grant request creates the grant)."""
    edits = _parse_edits(edit or [])

    async def approve(agent: Agent, record: ApprovalRecord) -> ApprovalRecord:
        return await agent.approve(
            record.approval_id, by=by, edits=edits or None, confirm_amount=amount
        )

    return await _decide(db, approval, by, agent_spec, approve, apps_engine)


@_command(approvals_app, "deny")
async def approvals_deny(
    approval: ApprovalRef,
    by: By,
    db: Db = DEFAULT_DB,
    reason: Annotated[str, typer.Option(help="Why; the model is told.")] = "",
    agent_spec: AgentSpec = None,
    apps_engine: AppsEngine = None,
) -> int:
    """Decline a pending action: it never runs, and the model is told when the run resumes."""

    async def deny(agent: Agent, record: ApprovalRecord) -> ApprovalRecord:
        return await agent.deny(record.approval_id, by=by, reason=reason)

    return await _decide(db, approval, by, agent_spec, deny, apps_engine)
    return await _decide(db, approval, by, agent_spec, deny)


@_command(approvals_app, "regenerate")
async def approvals_regenerate(
    approval: ApprovalRef, by: By, db: Db = DEFAULT_DB, agent_spec: AgentSpec = None
) -> int:
    """Make a pending action anew with fresh arguments (a swap's new quote): this approval
    ends superseded; the run, once resumed, waits on a new one."""

    async def regenerate(agent: Agent, record: ApprovalRecord) -> ApprovalRecord:
        return await agent.regenerate(record.approval_id, by=by)

    return await _decide(db, approval, by, agent_spec, regenerate)

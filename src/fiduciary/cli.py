"""The ``fiduciary`` command line: the offline demo, and the inspection of runs and approvals.

```
fiduciary demo [--yes] [--model NAME]
fiduciary chat [--yes] [--model NAME] [--principal WHO]
fiduciary runs list | show RUN | events RUN [--follow] | export RUN | resume RUN
fiduciary approvals list | approve ID --by P | deny ID --by P
```

Every command works on one SQLite file: ``--db PATH``, else ``$FIDUCIARY_DB``, else
``.fiduciary/fiduciary.sqlite3``. Only ``demo`` and ``chat`` create it. The agent the CLI knows
is the paper-wallet agent (``fiduciary.wallet``), whose ledger lives in the same file. Runs and
approvals are named by their full id or by a unique prefix of at least six hex characters.

No traceback reaches the person: fiduciary's errors, sqlite3's and the OS's are caught at the
boundary (``_run``) and printed as one red line. Exit codes: 0 done; 1 refused (a decision
refused, a run that did not complete); 2 could not start (usage, an unknown or ambiguous id, no
database, a storage error); 130 interrupted.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import sqlite3
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar, assert_never
from uuid import UUID

import typer
from pydantic_core import to_jsonable_python
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from . import events as ev
from .agent import Agent
from .display import card_flags, show_text, show_usd, show_value
from .events import Event, PendingAction, encode_event
from .exceptions import ApprovalError, ConfigurationError, FiduciaryError, RunError, StoreError
from .stores.base import ApprovalRecord, ApprovalStatus, RunRecord, RunStatus, Store
from .stores.sqlite import SQLiteStore

__all__ = ["DEFAULT_DB", "Renderer", "app", "describe", "follow_events", "main"]

app = typer.Typer(
    help="fiduciary: a durable, approval-gated runtime for agents that act on someone's behalf.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold arguments a person must not see
)
runs_app = typer.Typer(help="Inspect, export and resume runs.", no_args_is_help=True)
approvals_app = typer.Typer(help="List and decide pending actions.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")
app.add_typer(approvals_app, name="approvals")

DEFAULT_DB = Path(".fiduciary") / "fiduciary.sqlite3"
_FINISHED: frozenset[RunStatus] = frozenset({"completed", "failed", "cancelled"})
_WAITING: frozenset[RunStatus] = frozenset({"awaiting_approval", "awaiting_client_result"})
_MIN_PREFIX = 6
_SCAN = 1_000_000  # the Store contract has no prefix lookup: resolve over every row
_PAGE = 1000
_STATUS_STYLE = {  # run and approval statuses; the waiting ones are yellow
    **dict.fromkeys(("completed", "approved", "client_result"), "green"),
    **dict.fromkeys(("failed", "denied"), "red"),
    **dict.fromkeys(("cancelled", "expired"), "dim"),
    "running": "cyan",
}
_INTERRUPTED = ("interrupted; the run can be resumed", 130)

Db = Annotated[
    Path, typer.Option("--db", envvar="FIDUCIARY_DB", help="The SQLite file runs are stored in.")
]
RunRef = Annotated[str, typer.Argument(metavar="RUN", help="A run id or a unique 6+ hex prefix.")]
ApprovalRef = Annotated[
    str, typer.Argument(metavar="ID", help="An approval id or a unique 6+ hex prefix.")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON, one line per item.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Approve every pending action.")]
By = Annotated[str, typer.Option("--by", help="Who decides (the run's principal).")]
T = TypeVar("T")
P = ParamSpec("P")


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


# --- the boundary -----------------------------------------------------------------------------


class CliError(Exception):
    """A failure reported as one line; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _explain(exc: Exception) -> tuple[str, int]:
    match exc:
        case CliError():
            return exc.message, exc.code
        case ApprovalError():
            return f"{exc.message} ({exc.code})", 1
        case RunError():
            return exc.message, 2 if exc.code == "not_found" else 1
        case StoreError() | sqlite3.Error():
            return f"the store failed: {exc}", 2
        case FiduciaryError():
            return str(exc), 1
        case _:
            return str(exc), 2  # OSError


def _run(coro: Coroutine[Any, Any, int], *, interrupted: tuple[str, int] = _INTERRUPTED) -> int:
    """Run a command's coroutine; every expected failure becomes one line and an exit code."""
    try:
        return asyncio.run(coro)
    except (CliError, FiduciaryError, sqlite3.Error, OSError) as exc:
        message, code = _explain(exc)
        line = " ".join(message.split())  # one line, whatever the error's text holds
        Console(stderr=True).print(f"[red]error:[/] {escape(line)}", soft_wrap=True)
        return code
    except KeyboardInterrupt:
        Console(stderr=True).print(interrupted[0])
        return interrupted[1]


def _command(
    typer_app: typer.Typer, name: str, *, interrupted: tuple[str, int] = _INTERRUPTED
) -> Callable[[Callable[P, Coroutine[Any, Any, int]]], Callable[P, None]]:
    """Register an async command whose result is its exit code, behind the boundary."""

    def register(command: Callable[P, Coroutine[Any, Any, int]]) -> Callable[P, None]:
        @functools.wraps(command)
        def sync(*args: P.args, **kwargs: P.kwargs) -> None:
            raise typer.Exit(_run(command(*args, **kwargs), interrupted=interrupted))

        typer_app.command(name)(sync)
        return sync

    return register


def _open(db: Path) -> AbstractAsyncContextManager[SQLiteStore]:
    """The store of an existing file: inspection never creates a database."""
    if not db.is_file():
        raise CliError(f"no database at {db}")
    return _closing(SQLiteStore(db))


@asynccontextmanager
async def _closing(store: SQLiteStore) -> AsyncIterator[SQLiteStore]:
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def _wallet_agent(store: SQLiteStore) -> AsyncIterator[Agent]:
    """The agent the CLI knows: the paper-wallet agent, its ledger in the store's file."""
    from .wallet import PaperWallet
    from .wallet.demo import build_wallet_agent

    with PaperWallet(store.path) as wallet:
        yield build_wallet_agent(store, wallet)


# --- ids and reading --------------------------------------------------------------------------

_HEX = re.compile(r"[0-9a-f]+")


def _prefix(text: str, what: str) -> str:
    """An id or a prefix of one, as lowercase hex without hyphens."""
    prefix = text.strip().lower().replace("-", "")
    if not _HEX.fullmatch(prefix) or not _MIN_PREFIX <= len(prefix) <= 32:
        raise CliError(f"{what} {text!r} is neither an id nor a prefix of {_MIN_PREFIX}+ hex")
    return prefix


def _unique(prefix: str, text: str, what: str, candidates: Sequence[tuple[UUID, T]]) -> T:
    hits = [(key, item) for key, item in candidates if key.hex.startswith(prefix)]
    if not hits:
        raise CliError(f"no {what} matches {text!r}")
    if len(hits) > 1:
        shown = ", ".join(str(key) for key, _ in hits[:3]) + (", ..." if len(hits) > 3 else "")
        raise CliError(
            f"{what} prefix {text!r} is ambiguous: it matches {len(hits)} {what}s ({shown}); "
            "give more characters"
        )
    return hits[0][1]


async def _find_run(store: Store, text: str) -> RunRecord:
    prefix = _prefix(text, "run")
    if len(prefix) == 32 and (run := await store.get_run(UUID(prefix))) is not None:
        return run
    runs = await store.list_runs(limit=_SCAN)
    return _unique(prefix, text, "run", [(r.run_id, r) for r in runs])


async def _find_approval(store: Store, text: str) -> ApprovalRecord:
    prefix = _prefix(text, "approval")
    if len(prefix) == 32 and (found := await store.get_approval(UUID(prefix))) is not None:
        return found
    records = await store.list_approvals()
    return _unique(prefix, text, "approval", [(a.approval_id, a) for a in records])


async def _all_events(store: Store, run_id: UUID, *, after_seq: int = 0) -> AsyncIterator[Event]:
    """A run's log (after a seq) in seq order, read a page at a time."""
    after = after_seq
    while True:
        page = await store.read_events(run_id, after_seq=after, limit=_PAGE)
        for event in page:
            yield event
        if len(page) < _PAGE:
            return
        after = page[-1].seq


# --- formatting -------------------------------------------------------------------------------


def _short(value: UUID) -> str:
    return str(value)[:8]


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _usd(value: Decimal | None) -> str:
    return show_usd(value)  # never 1.5E+2, never rounded


def _styled(status: str) -> str:
    return f"[{_STATUS_STYLE.get(status, 'yellow')}]{status}[/]"


def _clip(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _jsonable(value: Any) -> str:
    return json.dumps(to_jsonable_python(value), ensure_ascii=False)


def describe(event: Event) -> str:
    """One line that says what an event is (for summaries; ``Renderer`` is for live output)."""
    match event:
        case ev.RunStarted():
            return f"{event.principal} · model {event.model} · {', '.join(event.capabilities)}"
        case ev.UserMessage() | ev.TextDelta() | ev.ThinkingDelta():
            return _clip(event.text)
        case ev.ThinkingDone():
            return f"thinking block {event.block_index} done"
        case ev.ToolCallStart():
            return f"{event.name} {_clip(show_value(event.input).text)}"
        case ev.ToolCallEnd():
            tag = f" ({event.recovery})" if event.recovery else ""
            return f"{event.name} {'error' if event.is_error else 'ok'}{tag}: {_clip(event.output)}"
        case ev.ToolCallRejected():
            return f"{event.name} refused ({event.reason}): {_clip(event.message)}"
        case ev.GuardFired():
            return f"{event.guard} {event.verdict} ({event.phase}): {_clip(event.message)}"
        case PendingAction():
            approval = f"approval {_short(event.approval_id)} ({event.tier})"
            return f"{approval}: {show_text(event.description).text}, {_usd(event.amount_usd)}"
        case ev.ActionResolved():
            who = f" by {event.by}" if event.by else ""
            why = f": {event.reason}" if event.reason else ""
            return f"approval {_short(event.approval_id)} {event.decision}{who}{why}"
        case ev.ToolProgress():
            return f"{event.name}: {_clip(event.message)}"
        case ev.Compaction():
            return f"compaction {event.phase}"
        case ev.Usage():
            return f"{event.model}: {event.input_tokens} in / {event.output_tokens} out"
        case ev.TurnComplete():
            return f"stop: {event.stop_reason}"
        case ev.TurnRetracted():
            return f"partial turn from seq {event.from_seq} retracted"
        case ev.RunCompleted():
            return f"{event.tool_calls} tool calls · {_clip(event.text)}"
        case ev.RunFailed():
            return f"{event.reason}: {event.message}"
        case _:
            assert_never(event)


_MARKS = {
    "tool_call_start": "[cyan]→[/]",
    "tool_call_rejected": "[red]⊘[/]",
    "guard_fired": "[yellow]![/]",
    "action_resolved": "[magenta]◆[/]",
}


class Renderer:
    """Prints a run's events for a person at a terminal."""

    def __init__(self, out: Console) -> None:
        self.out = out
        self._in_text = False

    def flush(self) -> None:
        """End a line of streamed text left open."""
        if self._in_text:
            self.out.print()
            self._in_text = False

    def __call__(self, event: Event) -> None:
        if isinstance(event, ev.TextDelta):
            self.out.print(event.text, end="", markup=False, highlight=False)
            self._in_text = True
            return
        self.flush()
        if isinstance(event, PendingAction):
            self.out.print(pending_card(event))
        elif isinstance(event, ev.ToolCallEnd):
            mark = "[red]✗[/]" if event.is_error else "[green]✓[/]"
            tag = f" [yellow]({event.recovery})[/]" if event.recovery else ""
            body = event.output if len(event.output) < 160 else event.output[:157] + "..."
            self.out.print(f"  {mark} {event.name}{tag} [dim]{escape(body)}[/]", highlight=False)
        elif isinstance(event, ev.RunCompleted):
            self.out.print(
                f"[dim]run completed · {event.tool_calls} tool calls · "
                f"{event.input_tokens}/{event.output_tokens} tokens[/]"
            )
        elif isinstance(event, ev.RunFailed):
            self.out.print(f"[red]run failed ({event.reason}): {escape(event.message)}[/]")
        elif event.type in _MARKS:
            line = f"  {_MARKS[event.type]} {escape(describe(event))}"
            self.out.print(line, highlight=False)


def pending_card(event: PendingAction) -> Panel:
    """The card a person decides on: every value through ``display`` (escaped, flagged)."""
    table = Table.grid(padding=(0, 2))
    args = show_value(event.input)
    table.add_row("action", escape(show_text(event.description).text))
    table.add_row("amount", _usd(event.amount_usd))
    table.add_row("tier", event.tier + (" (re-type the amount)" if event.acknowledge else ""))
    table.add_row("arguments", escape(args.text))
    for flag in card_flags(event.description, args):
        table.add_row("[bold red]look closely[/]", f"[red]{escape(flag.detail)}[/]")
    if event.modifiable_fields:
        table.add_row("editable", ", ".join(event.modifiable_fields))
    for note in event.guard_notes:
        table.add_row(note.verdict, escape(show_text(f"[{note.guard}] {note.message}").text))
    table.add_row("expires", event.expires_at.isoformat(timespec="seconds"))
    table.add_row("approval id", str(event.approval_id))
    return Panel(table, title="[bold]approval needed[/]", border_style="yellow", expand=False)


# --- driving a run with a person at the terminal ----------------------------------------------


def _ask(event: PendingAction, out: Console) -> tuple[bool, str | None]:
    """Ask the person at the terminal. End of input counts as a refusal."""
    try:
        if event.tier == "explicit" and event.amount_usd is not None:
            typed = out.input(
                f"Type the amount (${event.amount_usd:,.2f}) to approve, "
                "or anything else to decline: "
            )
            return True, typed
        # the backslash keeps rich from taking [y/N] for markup (it printed "Approve? " alone)
        answer = out.input("Approve? \\[y/N] ").strip().lower()
    except EOFError:
        out.print("[dim](no input: declining)[/]")
        return False, None
    return answer in ("y", "yes"), None


async def _decide_at_terminal(
    agent: Agent, actions: Sequence[PendingAction], principal: str, *, yes: bool, out: Console
) -> None:
    for action in actions:
        typed: Decimal | str | None = action.amount_usd
        if yes:
            out.print(f"  [green]auto-approving ({action.name}) because of --yes[/]")
            approved = True
        else:
            approved, typed = _ask(action, out)
        try:
            if approved:
                digest = action.args_digest
                await agent.approve(
                    action.approval_id, by=principal, confirm_amount=typed, args_digest=digest
                )
            else:
                await agent.deny(
                    action.approval_id, by=principal, reason="declined at the terminal"
                )
        except FiduciaryError as exc:
            out.print(f"[red]{escape(str(exc))}[/] — declining instead")
            await agent.deny(action.approval_id, by=principal, reason=str(exc))


async def _drive(
    agent: Agent, stream: AsyncIterator[Event], principal: str, *, yes: bool, out: Console
) -> list[Event]:
    """Stream a run to its end, deciding each pending action at the terminal and resuming."""
    render = Renderer(out)
    seen: list[Event] = []
    while True:
        pending: list[PendingAction] = []
        async for event in stream:
            seen.append(event)
            render(event)
            if isinstance(event, PendingAction):
                pending.append(event)
        render.flush()
        if not pending:
            return seen
        await _decide_at_terminal(agent, pending, principal, yes=yes, out=out)
        stream = agent.resume(pending[0].run_id)


async def drive_with_approvals(
    agent: Agent,
    message: str,
    principal: str,
    *,
    yes: bool,
    out: Console,
    run_id: UUID | None = None,
) -> list[Event]:
    """Run a message to its end (in the idle run ``run_id``, or a new one), asking the person
    (or approving with --yes) when needed."""
    stream = agent.run(message, principal=principal, run_id=run_id)
    return await _drive(agent, stream, principal, yes=yes, out=out)


async def resume_with_approvals(
    agent: Agent, run_id: UUID, principal: str, *, yes: bool, out: Console
) -> list[Event]:
    """Continue a run from its log, first deciding the actions it is waiting for."""
    waiting = {a.approval_id for a in await agent.pending_approvals(run_id=run_id)}
    if waiting:
        actions = [
            e
            async for e in _all_events(agent.store, run_id)
            if isinstance(e, PendingAction) and e.approval_id in waiting
        ]
        for action in actions:
            out.print(pending_card(action))
        await _decide_at_terminal(agent, actions, principal, yes=yes, out=out)
    return await _drive(agent, agent.resume(run_id), principal, yes=yes, out=out)


async def follow_events(
    store: Store,
    run_id: UUID,
    emit: Callable[[Event], None],
    *,
    after_seq: int = 0,
    until_idle: bool = False,
    poll_seconds: float = 0.5,
) -> int:
    """Emit a run's events, then new ones as they are committed (by any process), until it ends.

    It ends once every event of the run is emitted and the run is finished (completed, failed,
    cancelled) or, with ``until_idle``, not running (waiting for a person counts as idle).
    Returns the seq of the last event emitted. Another process's commits are only seen by
    reading the store, so it polls (``Agent.events(follow=True)`` would too, but it spins once
    its subscription times out, so it is not used here).
    """
    stop_at = _FINISHED | _WAITING if until_idle else _FINISHED
    printed = after_seq
    while True:
        run = await store.get_run(run_id)  # looked at first: its last_seq is then read below
        if run is None:
            raise CliError(f"no run {run_id}")
        async for event in _all_events(store, run_id, after_seq=printed):
            emit(event)
            printed = event.seq
        if printed >= run.last_seq and run.status in stop_at:
            return printed
        await asyncio.sleep(poll_seconds)


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
    from .wallet.console import run_demo

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
    from .wallet.console import run_chat

    if not principal.strip():
        raise CliError("--principal must name someone")
    try:
        return await run_chat(
            db, principal=principal, yes=yes, out=Console(), env=_environment(), model=model
        )
    except ConfigurationError as exc:
        raise CliError(str(exc)) from exc


# --- runs -------------------------------------------------------------------------------------


@_command(runs_app, "list")
async def runs_list(
    db: Db = DEFAULT_DB,
    status: Annotated[RunStatus | None, typer.Option(help="Only runs in this status.")] = None,
    principal: Annotated[str | None, typer.Option(help="Only this principal's runs.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many (newest first).")] = 20,
    as_json: JsonFlag = False,
) -> int:
    """The newest runs: id, principal, status, events, last update, title."""
    async with _open(db) as store:
        runs = await store.list_runs(principal=principal, status=status, limit=limit)
    if as_json:
        for run in runs:
            typer.echo(_jsonable(asdict(run)))
        return 0
    table = Table("id", "principal", "status", "events", "updated (UTC)", "title")
    for r in runs:
        title = escape(_clip(r.title, 60))
        row = (escape(r.principal), _styled(r.status), str(r.last_seq), _when(r.updated_at), title)
        table.add_row(_short(r.run_id), *row)
    Console().print(table if runs else "[dim]no runs[/]")
    return 0


def _approvals_table(records: Sequence[ApprovalRecord]) -> Table:
    now = datetime.now(UTC)
    table = Table("id", "run", "capability", "amount", "tier", "expires (UTC)", "status")
    for a in records:
        status = _styled(a.status)
        if a.status == "pending" and a.expires_at <= now:
            status += " [dim](expired)[/]"
        ids = (_short(a.approval_id), _short(a.run_id))
        row = (escape(a.capability), _usd(a.amount_usd), a.tier, _when(a.expires_at), status)
        table.add_row(*ids, *row)
    return table


@_command(runs_app, "show")
async def runs_show(
    run: RunRef,
    db: Db = DEFAULT_DB,
    last: Annotated[int, typer.Option(min=0, help="How many of the last events to list.")] = 10,
) -> int:
    """A run: its record, its pending approvals, its totals, its last events."""
    async with _open(db) as store:
        record = await _find_run(store, run)
        pending = await store.list_approvals(run_id=record.run_id, status="pending")
        count: Counter[str] = Counter()  # by event type, plus tool errors and tokens
        tail: deque[Event] = deque(maxlen=last)
        async for event in _all_events(store, record.run_id):
            count[event.type] += 1
            if isinstance(event, ev.ToolCallEnd) and event.is_error:
                count["errors"] += 1
            elif isinstance(event, ev.Usage):
                count.update(tokens_in=event.input_tokens, tokens_out=event.output_tokens)
            tail.append(event)
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
    out = Console()
    out.print(Panel(grid, title=f"[bold]run {record.run_id}[/]", expand=False))
    if pending:
        out.print("[bold]waiting for a decision[/]")
        out.print(_approvals_table(pending))
        by = escape(record.principal)
        out.print(f"decide with: fiduciary approvals approve ID --by {by}", soft_wrap=True)
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
    Console(stderr=True).print(f"{count} events of run {record.run_id} written to {output}")
    return 0


@_command(runs_app, "resume")
async def runs_resume(
    run: RunRef,
    db: Db = DEFAULT_DB,
    yes: Yes = False,
    by: Annotated[
        str | None, typer.Option(help="Who decides (default: the run's principal).")
    ] = None,
) -> int:
    """Continue a run from its log: after a crash, or once its approvals are decided.

    Resuming runs the agent, so it needs the agent's capabilities: the CLI knows the
    paper-wallet agent's, whose ledger is in the same file. Pending actions are asked about at
    the terminal, or approved with --yes.
    """
    out = Console()
    async with _open(db) as store:
        record = await _find_run(store, run)
        if record.status in _FINISHED:
            out.print(f"run {record.run_id} is already {record.status}: nothing to resume")
            return 0
        async with _wallet_agent(store) as agent:
            await resume_with_approvals(
                agent, record.run_id, by or record.principal, yes=yes, out=out
            )
            final = await agent.get_run(record.run_id)
    out.print(
        f"run [bold]{final.run_id}[/] is {_styled(final.status)} after {final.last_seq} events."
    )
    return 0 if final.status == "completed" else 1


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
    if as_json:
        for record in records:
            typer.echo(_jsonable(asdict(record)))
    elif records:
        Console().print(_approvals_table(records))
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
        case "unknown" if agent.registry.get(record.capability) is None:
            text = (
                f"{record.capability} is not a capability of the wallet agent (the CLI's only one)"
            )
        case "client_executed":
            text = "the client performs this action and reports its result; it is not approved"
        case _:
            text = exc.message
    return f"{text} ({exc.code})"


async def _decide(
    db: Path,
    ref: str,
    by: str,
    decision: Callable[[Agent, ApprovalRecord], Awaitable[ApprovalRecord]],
) -> int:
    """Resolve an approval, decide it durably under the wallet agent's rules, say what happened."""
    if not by.strip():
        raise CliError("--by must name who decides")
    async with _open(db) as store:
        record = await _find_approval(store, ref)
        async with _wallet_agent(store) as agent:
            try:
                decided = await decision(agent, record)
            except ApprovalError as exc:
                current = await store.get_approval(record.approval_id) or record
                raise CliError(_refusal(exc, current, by, agent), 1) from exc
    verb = "[green]approved[/]" if decided.status == "approved" else "[red]denied[/]"
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
    where = "" if db == DEFAULT_DB else f" --db {db}"
    hint = f"resume the run with: fiduciary runs resume {decided.run_id}{where}"
    out.print(hint, soft_wrap=True, markup=False, highlight=False)
    return 0


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
) -> int:
    """Approve a pending action (decide only: it runs when the run resumes)."""
    edits = _parse_edits(edit or [])

    async def approve(agent: Agent, record: ApprovalRecord) -> ApprovalRecord:
        return await agent.approve(
            record.approval_id, by=by, edits=edits or None, confirm_amount=amount
        )

    return await _decide(db, approval, by, approve)


@_command(approvals_app, "deny")
async def approvals_deny(
    approval: ApprovalRef,
    by: By,
    db: Db = DEFAULT_DB,
    reason: Annotated[str, typer.Option(help="Why; the model is told.")] = "",
) -> int:
    """Decline a pending action: it never runs, and the model is told when the run resumes."""

    async def deny(agent: Agent, record: ApprovalRecord) -> ApprovalRecord:
        return await agent.deny(record.approval_id, by=by, reason=reason)

    return await _decide(db, approval, by, deny)


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
    import importlib
    import signal

    from .stores.postgres import PostgresStore
    from .worker import run_worker

    module_name, sep, attribute = agent.partition(":")
    if not sep:
        raise CliError(f"--agent must be module:callable, not {agent!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise CliError(f"cannot load {agent}: {exc}") from exc
    store = await PostgresStore.open(postgres)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        made = factory(store)
        driven: Agent = getattr(made, "agent", made)  # an Agent, or a ServedAgent holding one
        if not isinstance(driven, Agent):
            raise CliError(f"{agent} did not return an Agent")
        await run_worker(
            driven,
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
        from .server.cli import register
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


def main() -> None:
    app(prog_name="fiduciary")


if __name__ == "__main__":  # pragma: no cover
    main()

"""What every ``fiduciary`` command shares: the boundary that turns failures into one line and
an exit code, the database option, id prefixes, reading a run's log, formatting, and the
external MCP servers an agent is given (``--mcp-config``)."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import shlex
import shutil
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, NoReturn, ParamSpec, TypeVar
from uuid import UUID

import typer
from pydantic import ValidationError
from pydantic_core import to_jsonable_python
from rich.console import Console
from rich.markup import escape

from ..agent_factory import load_factory
from ..display import show_usd
from ..events import Event
from ..exceptions import ApprovalError, ConfigurationError, FiduciaryError, RunError, StoreError
from ..stores.base import ApprovalRecord, RunRecord, RunStatus, Store
from ..stores.sqlite import SQLiteStore

DEFAULT_DB = Path(".fiduciary") / "fiduciary.sqlite3"
# The apps factory of ``serve --apps``, ``worker --apps`` and ``fiduciary apps`` unless one is
# named: the wallet's sample apps (the entry points compose; fiduciary.apps knows no wallet).
DEFAULT_APPS_ENGINE = "fiduciary.wallet.apps:paper_engine"
_MOVED_APPS_ENGINES = {"fiduciary.apps.served:paper_engine": DEFAULT_APPS_ENGINE}


def apps_engine(name: str | None) -> str:
    """The apps factory to load for ``name``: the default for None, and where a factory is now
    for the name it had before it moved (``fiduciary.apps.served:paper_engine``)."""
    if name is None:
        return DEFAULT_APPS_ENGINE
    return _MOVED_APPS_ENGINES.get(name, name)


_FINISHED: frozenset[RunStatus] = frozenset({"completed", "failed", "cancelled"})
_WAITING: frozenset[RunStatus] = frozenset(
    {"awaiting_approval", "awaiting_client_result", "awaiting_input", "awaiting_child"}
)
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
McpConfig = Annotated[
    list[Path] | None,
    typer.Option(
        "--mcp-config",
        envvar="FIDUCIARY_MCP_CONFIG",
        help="External MCP servers whose tools the agent gets (gated like its own): a TOML file "
        "of \\[\\[mcp]] tables, or a JSON file with mcpServers (Claude Desktop, Cursor). "
        "Repeatable.",
    ),
]

RunRef = Annotated[str, typer.Argument(metavar="RUN", help="A run id or a unique 6+ hex prefix.")]
ApprovalRef = Annotated[
    str, typer.Argument(metavar="ID", help="An approval id or a unique 6+ hex prefix.")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON, one line per item.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Approve every pending action.")]
By = Annotated[str, typer.Option("--by", help="Who decides (the run's principal).")]
AgentSpec = Annotated[
    str | None,
    typer.Option(
        "--agent",
        help="The run's agent, as for serve and worker: a factory module:attribute "
        "(store -> Agent). Default: the paper-wallet agent.",
    ),
]
T = TypeVar("T")
P = ParamSpec("P")


# --- the boundary -----------------------------------------------------------------------------


class CliError(Exception):
    """A failure reported as one line; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class PromptInterruptedError(Exception):
    """Ctrl-C while the person was asked about a pending action of ``run_id``: the run waits,
    and can be resumed; ``db`` names its file for the command that resumes it."""

    def __init__(
        self,
        run_id: UUID,
        db: Path | None = None,
        agent: str | None = None,
        *,
        demo: bool = False,
    ) -> None:
        super().__init__(f"interrupted at run {run_id}")
        self.run_id = run_id
        self.db = db
        self.agent = agent
        self.demo = demo  # the demo's run: the demo, not `runs resume`, plays its other steps

    def advice(self) -> str:
        if self.demo:
            return (
                f"interrupted: run {self.run_id} waits for your decision. Continue the demo "
                f"with: {program()} demo{db_option(self.db)} (it offers this run first, then "
                "plays the demo's remaining steps)"
            )
        return (
            f"interrupted: run {self.run_id} waits for your decision. Continue it with: "
            f"{resume_command(self.run_id, self.db, self.agent)}"
        )


def resume_command(run_id: UUID, db: Path | None = None, agent: str | None = None) -> str:
    """The command that resumes a run, with the options it needs, as it runs when pasted."""
    with_agent = f" --agent {shlex.quote(agent)}" if agent else ""
    return f"{program()} runs resume {run_id}{db_option(db)}{with_agent}"


def db_option(db: Path | None) -> str:
    """`` --db PATH`` for a hint, or nothing for the default file."""
    return "" if db is None or db == DEFAULT_DB else f" --db {shlex.quote(str(db))}"


def program() -> str:
    """This ``fiduciary`` as a hint must name it to run when pasted in the same directory:
    ``fiduciary`` when that name on PATH is this program, else the absolute path of the script
    that runs (``make demo`` does not put ``.venv/bin`` on PATH), else this Python ``-m
    fiduciary`` (started some other way)."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is None or script.name != "fiduciary" or not script.is_file():
        return f"{shlex.quote(sys.executable)} -m fiduciary"
    found = shutil.which("fiduciary")
    if found is not None and Path(found).resolve() == script.resolve():
        return "fiduciary"
    return shlex.quote(str(script.absolute()))


_TYPES = {
    "string": "text",
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "list": "a list",
    "dict": "a table",
    "model": "a table",
    "model_attributes": "a table",
}
_BOUNDS = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}


def _field(location: Sequence[int | str]) -> str:
    """``("notify", 0, "url")`` → ``notify[0].url``."""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "(the whole file)"


def _shown(value: Any) -> str:
    text = json.dumps(to_jsonable_python(value, fallback=str), ensure_ascii=False)
    return text if len(text) <= 40 else text[:39] + "…"


def plain_errors(exc: ValidationError) -> str:
    """What a validation error means, one ``field: what was expected`` per problem, in plain
    words: without pydantic's type names, its error class names and its documentation URL."""
    problems = []
    for error in exc.errors(include_url=False):
        kind, ctx, given = error["type"], error.get("ctx") or {}, error.get("input")
        if kind == "missing":
            what = "is required"
        elif kind == "extra_forbidden":
            what = "is not a setting (check its spelling)"
        elif kind == "literal_error":
            what = f"expected one of {ctx.get('expected', '?')}, got {_shown(given)}"
        elif kind.endswith(("_type", "_parsing")) and kind.rsplit("_", 1)[0] in _TYPES:
            what = f"expected {_TYPES[kind.rsplit('_', 1)[0]]}, got {_shown(given)}"
        elif kind in _BOUNDS:
            key, words = _BOUNDS[kind]
            what = f"must be {words} {ctx.get(key)}, got {_shown(given)}"
        elif kind in ("string_too_short", "too_short"):
            what = f"must have at least {ctx.get('min_length')} (characters or items)"
        elif kind in ("string_too_long", "too_long"):
            what = f"must have at most {ctx.get('max_length')} (characters or items)"
        else:
            what = f"{error['msg'][0].lower()}{error['msg'][1:]}, got {_shown(given)}"
        problems.append(f"{_field(error['loc'])} {what}")
    return "; ".join(problems)


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


def print_error(message: str) -> None:
    """``error: message`` in red on stderr, as one line, the message never taken for markup."""
    line = " ".join(message.split())  # one line, whatever the error's text holds
    Console(stderr=True).print(f"[red]error:[/] {escape(line)}", soft_wrap=True)


def missing_extra(what: str, extra: str) -> NoReturn:
    """Stop a command that needs an extra this installation lacks, naming how to get it."""
    print_error(f"{what} needs the '{extra}' extra: pip install 'fiduciary[{extra}]'")
    raise typer.Exit(2)


def _run(coro: Coroutine[Any, Any, int], *, interrupted: tuple[str, int] = _INTERRUPTED) -> int:
    """Run a command's coroutine; every expected failure becomes one line and an exit code."""
    try:
        return asyncio.run(coro)
    except BrokenPipeError:
        # the reader went away (`| head`): nothing to tell it; exit as a SIGPIPE'd command does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the flush at exit must not fail again
        return 141
    except (CliError, FiduciaryError, sqlite3.Error, OSError) as exc:
        message, code = _explain(exc)
        print_error(message)
        return code
    except PromptInterruptedError as exc:
        Console(stderr=True).print(exc.advice(), markup=False, highlight=False, soft_wrap=True)
        return 130
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


def load_agent_factory(spec: str) -> Callable[[Store], object]:
    """``--agent module:attribute`` → its factory; a bad name is a usage error."""
    try:
        return load_factory(spec)
    except ConfigurationError as exc:
        raise CliError(str(exc)) from exc


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
    """``text`` on one line in ``width`` characters, cut between words."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    head = flat[: width - 1]
    cut = head.rsplit(" ", 1)[0] if " " in head else head
    return cut.rstrip(" ,;:") + "…"


def _jsonable(value: Any) -> str:
    return json.dumps(to_jsonable_python(value), ensure_ascii=False)


# --- external MCP servers ---------------------------------------------------------------------


def with_mcp(
    agent: Any, tables: Sequence[dict[str, Any]], files: Sequence[str | Path]
) -> AbstractAsyncContextManager[tuple[Any, Any]]:
    """For a block: ``agent`` with the configured MCP servers' tools and prompts, and their
    toolset (``agent`` and None when none is configured: the ``mcp`` extra is needed only
    when some are)."""
    if not tables and not files:
        return nullcontext((agent, None))
    try:
        from ..mcp.attach import attached_mcp, configured_servers
    except ImportError:
        raise ConfigurationError(
            "MCP servers are configured: that needs pip install 'fiduciary[mcp]'"
        ) from None
    return attached_mcp(agent, configured_servers(tables, files))

"""``fiduciary audit`` and ``fiduciary ledger``: what the gates decided and what was executed,
read back from the store, filtered by run, principal, capability and time.

Rows are stored redacted; they are shown through a ``Redactor`` once more (credentials in
text, signed URLs, secret-looking keys), so nothing that looks like a secret reaches the terminal.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..redaction import Redactor
from ..stores.base import RecordQuery
from ._common import (
    DEFAULT_DB,
    CliError,
    Db,
    JsonFlag,
    _command,
    _find_run,
    _jsonable,
    _open,
    _run,
    _short,
    _usd,
    _when,
)

__all__ = ["parse_time", "register"]

_OUTCOME_STYLE = {
    **dict.fromkeys(("ok", "ledger", "done"), "green"),
    **dict.fromkeys(("pending", "started"), "yellow"),
}

RunOption = Annotated[
    str | None, typer.Option("--run", help="Only this run's rows: an id or a unique 6+ hex prefix.")
]
PrincipalOption = Annotated[str | None, typer.Option(help="Only this principal's rows.")]
CapabilityOption = Annotated[str | None, typer.Option(help="Only the calls of this capability.")]
SinceOption = Annotated[
    str | None,
    typer.Option(
        help="Rows at or after this time: ISO 8601 (2026-03-01, 2026-03-01T09:30, "
        "2026-03-01T09:30+02:00); without a zone, UTC."
    ),
]
UntilOption = Annotated[str | None, typer.Option(help="Rows before this time (as --since).")]
LimitOption = Annotated[
    int, typer.Option(min=1, max=100_000, help="At most this many (newest first).")
]


def parse_time(text: str, option: str) -> datetime:
    """An ISO 8601 date or time, in UTC (without a zone it is UTC). A bad one is a usage
    error, as is one whose UTC falls outside the years 1 to 9999."""
    try:
        value = datetime.fromisoformat(text.strip())
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except ValueError:
        raise CliError(
            f"{option} {text!r} is not a time: give ISO 8601, e.g. 2026-03-01 or 2026-03-01T09:30Z"
        ) from None
    except OverflowError:
        raise CliError(f"{option} {text!r} is out of range in UTC") from None


def _table(
    headers: tuple[str, ...], rows: Sequence[tuple[str, ...]], last: str, texts: Sequence[str]
) -> Table:
    """One line per row at any width: every column whole, the ``last`` one (``texts``) taking
    what is left, cut with an ellipsis (as ``runs list`` does with titles)."""
    plain = [[Text.from_markup(cell).plain for cell in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in plain)]) for i, h in enumerate(headers)]
    left = Console().width - sum(widths) - 2 * len(headers)  # two spaces between columns
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    for name in headers:
        table.add_column(name, no_wrap=True)
    table.add_column(last, no_wrap=True, overflow="ellipsis", max_width=max(8, left))
    for row, text in zip(rows, texts, strict=True):
        table.add_row(*row, escape(" ".join(text.split())))
    return table


def _outcome(outcome: str) -> str:
    """An outcome or a ledger status, coloured: green done, yellow waiting, red otherwise."""
    style = _OUTCOME_STYLE.get(outcome.partition(":")[0], "red")
    return f"[{style}]{escape(outcome)}[/]"


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    """Add ``ledger`` to the root command, and the audit listing to ``audit_app``: what
    ``fiduciary audit`` does without a subcommand (``audit verify`` is the passkeys')."""

    async def audit(
        db: Path,
        run: str | None,
        principal: str | None,
        capability: str | None,
        since: str | None,
        until: str | None,
        limit: int,
        as_json: bool,
    ) -> int:
        """The listing ``audit_rows`` (below) declares the options and the help of."""
        redactor = Redactor()
        async with _open(db) as store:
            run_id = None if run is None else (await _find_run(store, run)).run_id
            query = _record_query(run_id, principal, capability, since, until, limit)
            rows = await store.find_audit(query)
        if as_json:
            for row in rows:
                typer.echo(_jsonable(redactor.redact(_plain(asdict(row)))))
            return 0
        cells = [
            (
                _when(r.at),
                _short(r.run_id),
                escape(r.principal),
                escape(r.capability),
                r.tier or "-",
                "-" if r.amount_usd is None else _usd(r.amount_usd),
                _outcome(r.outcome),
            )
            for r in rows
        ]
        inputs = [json.dumps(redactor.redact(r.input), ensure_ascii=False) for r in rows]
        headers = ("at (UTC)", "run", "principal", "capability", "tier", "amount", "outcome")
        Console().print(
            _table(headers, cells, "input", inputs) if rows else "[dim]no audit rows[/]"
        )
        return 0

    @audit_app.callback(invoke_without_command=True)
    def audit_rows(
        ctx: typer.Context,
        db: Db = DEFAULT_DB,
        run: RunOption = None,
        principal: PrincipalOption = None,
        capability: CapabilityOption = None,
        since: SinceOption = None,
        until: UntilOption = None,
        limit: LimitOption = 50,
        as_json: JsonFlag = False,
    ) -> None:
        """The audit trail, newest first: every call the gates decided — when, which run and
        principal, the capability, its tier and amount, its outcome (ok, error, pending,
        rejected:<reason>, ledger, unknown) and its input, redacted. `audit verify RUN` checks a
        run's passkey signatures offline."""
        if ctx.invoked_subcommand is None:
            coro = audit(db, run, principal, capability, since, until, limit, as_json)
            raise typer.Exit(_run(coro))

    @_command(app, "ledger")
    async def ledger(
        db: Db = DEFAULT_DB,
        run: RunOption = None,
        principal: PrincipalOption = None,
        capability: CapabilityOption = None,
        since: SinceOption = None,
        until: UntilOption = None,
        limit: LimitOption = 50,
        as_json: JsonFlag = False,
    ) -> int:
        """The idempotency ledger, newest first: every write executed at most once — started
        (its outcome may be unknown), done with its recorded result, or failed."""
        redactor = Redactor()
        async with _open(db) as store:
            run_id = None if run is None else (await _find_run(store, run)).run_id
            query = _record_query(run_id, principal, capability, since, until, limit)
            rows = await store.find_ledger(query)
        if as_json:
            for row in rows:
                line = {"principal": row.principal, **_plain(asdict(row.entry))}
                typer.echo(_jsonable(redactor.redact(line)))
            return 0
        cells = [
            (
                _when(row.entry.started_at),
                _short(row.entry.run_id),
                escape(row.principal),
                escape(row.entry.capability),
                _outcome(row.entry.status),
                _when(row.entry.finished_at),
            )
            for row in rows
        ]
        results = [
            redactor.redact_text(row.entry.error)
            if row.entry.error is not None
            else json.dumps(redactor.redact(row.entry.result), ensure_ascii=False)
            for row in rows
        ]
        headers = ("started (UTC)", "run", "principal", "capability", "status", "finished (UTC)")
        shown = _table(headers, cells, "result", results) if rows else "[dim]no ledger rows[/]"
        Console().print(shown)
        return 0


def _record_query(
    run_id: UUID | None,
    principal: str | None,
    capability: str | None,
    since: str | None,
    until: str | None,
    limit: int,
) -> RecordQuery:
    return RecordQuery(
        run_id=run_id,
        principal=principal,
        capability=capability,
        since=None if since is None else parse_time(since, "--since"),
        until=None if until is None else parse_time(until, "--until"),
        limit=limit,
    )


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """A row as JSON values (times, ids and amounts as strings)."""
    loaded: dict[str, Any] = json.loads(_jsonable(row))
    return loaded

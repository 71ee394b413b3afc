"""``fiduciary memory list|forget``: what an agent keeps about a person, and deleting it.

``register(app)`` adds the ``memory`` group to the ``fiduciary`` command, on the SQLite file
(``--db``) or the PostgreSQL database (``--postgres``) the runs are stored in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated
from uuid import UUID

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..cli._common import DEFAULT_DB, CliError, Db, JsonFlag, _command, _jsonable, _when
from .base import Memory

__all__ = ["register"]

memory_app = typer.Typer(
    help="See and delete what agents remember about a person.", no_args_is_help=True
)

Postgres = Annotated[
    str | None,
    typer.Option(
        "--postgres",
        envvar="FIDUCIARY_POSTGRES",
        help="A PostgreSQL DSN: the memory kept there instead of in --db.",
    ),
]
Principal = Annotated[str, typer.Option("--principal", help="Whose memory.")]


@asynccontextmanager
async def _memory(db: Path, postgres: str | None) -> AsyncIterator[Memory]:
    memory: Memory
    if postgres:
        try:
            from .postgres import PostgresMemory
        except ImportError as exc:
            raise CliError(
                "--postgres needs fiduciary's postgres extra: pip install 'fiduciary[postgres]'"
            ) from exc
        memory = PostgresMemory(postgres)
    else:
        memory = _sqlite(db)
    try:
        yield memory
    finally:
        await memory.close()


def _sqlite(db: Path) -> Memory:
    """The memory in an existing file: seeing what is kept never creates a database."""
    if not db.is_file():
        raise CliError(f"no database at {db}")
    from .sqlite import SQLiteMemory

    return SQLiteMemory(db)


@_command(memory_app, "list")
async def memory_list(
    db: Db = DEFAULT_DB,
    postgres: Postgres = None,
    principal: Principal = "demo-user",
    kind: Annotated[
        str | None, typer.Option(help="Only records of this kind (note, advice, fact).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many (newest first).")] = 50,
    as_json: JsonFlag = False,
) -> int:
    """The newest records kept about a principal: id, kind, when, text."""
    async with _memory(db, postgres) as memory:
        records = await memory.records(namespace=principal, kind=kind, limit=limit)
    if as_json:
        for record in records:
            typer.echo(_jsonable(asdict(record)))
        return 0
    out = Console()
    if not records:
        out.print(f"nothing remembered about {escape(principal)}")
        return 0
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    for name in ("id", "kind", "at (UTC)"):
        table.add_column(name, no_wrap=True)
    table.add_column("text", overflow="fold")
    for record in records:
        table.add_row(
            str(record.record_id), escape(record.kind), _when(record.at), escape(record.text)
        )
    out.print(table)
    return 0


@_command(memory_app, "forget")
async def memory_forget(
    record_id: Annotated[str, typer.Argument(metavar="RECORD_ID", help="A record's id.")],
    principal: Annotated[str, typer.Option("--principal", help="Whose memory.")],
    db: Db = DEFAULT_DB,
    postgres: Postgres = None,
) -> int:
    """Delete one record from a principal's memory."""
    try:
        rid = UUID(record_id.strip())
    except ValueError:
        raise CliError(f"not a record id: {record_id!r}") from None
    async with _memory(db, postgres) as memory:
        deleted = await memory.forget(rid, namespace=principal)
    if not deleted:
        raise CliError(f"no record {rid} in the memory of {principal}", code=1)
    Console().print(f"forgot {rid} ({escape(principal)})")
    return 0


def register(app: typer.Typer) -> None:
    """Add ``memory`` to the ``fiduciary`` command."""
    app.add_typer(memory_app, name="memory")

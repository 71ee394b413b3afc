"""Private: named queries — each dialect's SQL, read from one ``.sql`` file of its own.

A file is a sequence of sections, each opened by a line ``-- name: <query_name>``; the comment
lines that follow it document the query, the statement runs to the next section (a trailing
``;`` is dropped). SQL stays SQL (an editor, a linter or ``psql`` can read it), one file shows a
dialect whole, and the two files can be read side by side.

``load(cls, path)`` fills the frozen dataclass ``cls`` with one field per query: a file that
lacks a field's query, or holds a query no field names, is refused when the module that loads it
is imported, and a misspelt query name in Python is a type error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import LiteralString, TypeVar

__all__ = ["SharedQueries", "load", "parse"]

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$")

Q = TypeVar("Q")


def parse(text: str, source: str = "<sql>") -> dict[str, str]:
    """The queries of a named-query file, by name."""
    queries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        match = _NAME.match(line.strip())
        if match is not None:
            name = match.group(1)
            if name in queries:
                raise ValueError(f"{source}: query {name!r} is defined twice")
            current = queries[name] = []
        elif current is not None:
            if not current and line.lstrip().startswith("--"):
                continue  # the query's own comment, before its statement
            current.append(line)
        elif line.strip() and not line.lstrip().startswith("--"):
            raise ValueError(f"{source}: SQL before the first '-- name:' line: {line[:60]!r}")
    result: dict[str, str] = {}
    for name, lines in queries.items():
        statement = "\n".join(lines).strip().removesuffix(";").strip()
        if not statement:
            raise ValueError(f"{source}: query {name!r} is empty")
        result[name] = statement
    return result


def load(cls: type[Q], path: Path) -> Q:
    """The queries of ``path`` as an instance of the dataclass ``cls`` (one field a query)."""
    queries = parse(path.read_text(encoding="utf-8"), path.name)
    wanted = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    missing, extra = wanted - queries.keys(), queries.keys() - wanted
    if missing or extra:
        raise ValueError(
            f"{path.name}: queries missing {sorted(missing)}, not expected {sorted(extra)}"
        )
    # the package's own files, never user input: as safe as a literal
    return cls(**{name: queries[name] for name in wanted})


@dataclass(frozen=True, slots=True)
class SharedQueries:
    """The queries the shared core runs; every dialect's file defines them, with positional
    parameters in the order given in each section's comment."""

    select_runs: LiteralString
    select_approvals: LiteralString
    read_events: LiteralString
    read_global: LiteralString
    get_ledger: LiteralString
    audit_records: LiteralString
    select_audit: LiteralString
    select_ledger: LiteralString
    autonomous_spend: LiteralString
    runs_to_resume: LiteralString
    acquire: LiteralString
    renew: LiteralString
    release: LiteralString
    decide_approval: LiteralString
    add_vote: LiteralString
    select_votes: LiteralString
    ledger_finish: LiteralString
    ledger_retry: LiteralString
    release_autonomous: LiteralString

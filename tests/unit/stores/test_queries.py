"""Named-query files: each dialect's SQL in one file, loaded into a typed dataclass."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from fiduciary.stores._sql.queries import SharedQueries, load, parse
from fiduciary.stores._sql.sqlite_writer import QUERIES as SQLITE_QUERIES

SQL_DIR = Path(__file__).parents[3] / "src" / "fiduciary" / "stores" / "_sql"


def test_a_section_runs_from_its_name_to_the_next_without_its_comment_or_semicolon() -> None:
    text = """-- the file's own comment
-- name: first
-- what first does
SELECT 1
FROM runs;

-- name: second
UPDATE runs SET epoch = epoch + 1 -- a comment inside stays
WHERE run_id = :run_id
"""
    assert parse(text) == {
        "first": "SELECT 1\nFROM runs",
        "second": "UPDATE runs SET epoch = epoch + 1 -- a comment inside stays\n"
        "WHERE run_id = :run_id",
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "query 'a' is defined twice"),
        ("SELECT 1\n-- name: a\nSELECT 2\n", "SQL before the first '-- name:' line"),
        ("-- name: a\n-- only a comment\n", "query 'a' is empty"),
    ],
)
def test_a_malformed_file_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(text, "broken.sql")


@dataclass(frozen=True, slots=True)
class Two:
    first: str
    second: str


def test_a_file_must_hold_exactly_the_queries_its_dataclass_names(tmp_path: Path) -> None:
    path = tmp_path / "dialect.sql"
    path.write_text("-- name: first\nSELECT 1\n-- name: second\nSELECT 2\n")
    assert load(Two, path) == Two("SELECT 1", "SELECT 2")

    path.write_text("-- name: first\nSELECT 1\n-- name: third\nSELECT 3\n")
    with pytest.raises(ValueError, match=r"missing \['second'\], not expected \['third'\]"):
        load(Two, path)


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_each_dialect_defines_every_query_of_the_shared_core(dialect: str) -> None:
    queries = parse((SQL_DIR / f"{dialect}.sql").read_text(), f"{dialect}.sql")
    assert {f.name for f in fields(SharedQueries)} <= queries.keys()


def test_the_sqlite_queries_are_valid_sqlite() -> None:
    import sqlite3

    from fiduciary.stores.sqlite import MIGRATIONS_DIR, apply_migrations, load_migrations

    conn = sqlite3.connect(":memory:", isolation_level=None)
    apply_migrations(conn, load_migrations(MIGRATIONS_DIR))
    for field in fields(SQLITE_QUERIES):
        sql = getattr(SQLITE_QUERIES, field.name)
        conn.execute(f"EXPLAIN {sql}", _null_params(sql))  # prepared: names and columns exist


def _null_params(sql: str) -> dict[str, None] | tuple[None, ...]:
    import re

    names = re.findall(r":([a-z_]+)", sql)
    if names:
        return dict.fromkeys(names)
    numbered = re.findall(r"\?(\d+)", sql)
    return (None,) * (max(map(int, numbered)) if numbered else sql.count("?"))

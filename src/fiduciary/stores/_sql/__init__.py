"""Private: one SQL core over two small dialects (SQLite, PostgreSQL).

- ``core``: ``SQLStore``, the ``Store`` contract's reads and one-statement writes, over a
  ``Dialect`` (named queries, codecs, parameter style);
- ``codec``: records into rows and back; a dialect gives its ids, times, money and arrays;
- ``queries``: named-query files (``-- name: x`` sections), loaded into typed dataclasses;
- ``migrations``: numbered migrations, the rules every dialect applies them by;
- ``sqlite.sql`` + ``sqlite`` + ``sqlite_writer``: the SQLite dialect (file, WAL, group
  commit on the event-loop thread);
- ``postgres.sql`` + ``postgres`` + ``postgres_writer`` + ``postgres_listen`` +
  ``postgres_locks``: the PostgreSQL dialect (pool, batch writer, LISTEN/NOTIFY, advisory
  locks). Imported only when psycopg is installed.

The commit and ledger rules all three stores (memory included) apply are in ``.._rules``.
"""

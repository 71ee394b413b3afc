"""Private: the ``Store`` contract over a SQL dialect — what both SQL stores do the same way.

``SQLStore`` holds every read (runs, events, approvals, ledger, audit, the autonomous spend,
the runs to resume), the writes of one statement (lease renewal and release, decisions, the
ledger's finish and retry, releasing a reservation) and the encoding of ``commit`` and
``create_run`` into rows. A dialect (``SQLiteStore``, ``PostgresStore``) gives:

- ``dialect``: its named queries (``sqlite.sql``, ``postgres.sql``), its codecs (``Codec``) and
  its parameter style;
- ``_fetch(sql, params)``: the rows of one read; ``_write(sql, params, mode)``: the row count
  of one write (``WriteMode``);
- ``_append(append)``: a ``commit`` or ``create_run`` through its group-commit writer, which
  checks it with the shared rules (``_rules``) against the run row in its transaction and hands
  its events to listeners after the COMMIT;
- ``_lease(params)``: ``acquire``'s statement, returning the leased run's row;
- ``_reserve(reservation)``: ``reserve_autonomous``, whose lock is the dialect's own;
- ``ledger_begin``, ``subscribe``, ``close`` and opening, which differ in locking and in
  notifications;
- ``read_global``'s query (the global order is the dialect's; the core filters what it
  read), ``_held_back`` (rows were committed but may not be read yet: look again
  soon) and the commit bell (``commit_generation``, ``wait_for_commits``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, LiteralString
from uuid import UUID

from ...events import Event, decode_event
from ...exceptions import StoreError
from ..base import (
    ApprovalRecord,
    ApprovalStatus,
    ApprovalVote,
    AuditRecord,
    GlobalEvent,
    GlobalPage,
    LedgerEntry,
    LedgerRow,
    LedgerStatus,
    RecordQuery,
    RunRecord,
    RunStatus,
)
from .codec import APPROVAL_FIELDS, Codec, EventRow, Params, json_text_or_none
from .queries import SharedQueries

__all__ = ["Append", "Dialect", "Named", "Reservation", "SQLStore", "WriteMode"]

Named = dict[str, Any]  # the named parameters of a query
WriteMode = Literal["plain", "durable", "always"]
"""How a one-statement write is made: ``durable`` on disk before it returns (a ledger row: the
side effect starts next); ``always`` written even if its caller is cancelled meanwhile."""


@dataclass(frozen=True, slots=True)
class Dialect:
    """What the shared core needs to know of a SQL dialect."""

    queries: SharedQueries
    codec: Codec
    param: Callable[[str], str]
    """The placeholder of a named parameter (``:name``, ``%(name)s``)."""
    no_limit: Any
    """The value of a LIMIT parameter that limits nothing."""

    def where(self, filters: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """``WHERE column = <param> AND ...`` for the filters that are not None (only those,
        so that each query can use its index), and their parameters."""
        given = {column: value for column, value in filters.items() if value is not None}
        if not given:
            return "", given
        return "WHERE " + " AND ".join(f"{c} = {self.param(c)}" for c in given), given


@dataclass(slots=True)
class Append:
    """One ``commit`` or ``create_run``, encoded once, before it is queued."""

    run_id: UUID
    epoch: int  # of a commit; a create's run is new
    events: tuple[Event, ...]
    event_rows: list[EventRow]
    consecutive: bool  # the events are of run_id with consecutive seqs
    status: RunStatus | None
    approvals: list[Params]
    audit: list[Params]
    create: Params | None = None  # the runs row of a create_run
    release: bool = False  # a commit that then clears the run's lease
    ledger: LedgerEntry | None = None  # a commit that then begins this ledger row
    ledger_row: Params | None = None  # its row, encoded


@dataclass(frozen=True, slots=True)
class Reservation:
    """One ``reserve_autonomous``: times encoded for the dialect."""

    principal: str
    amount_usd: Decimal
    limit: Decimal
    since: Any
    key: str
    at: Any


class SQLStore:
    """The shared core of the SQL stores (see the module docstring)."""

    dialect: Dialect

    # --- what a dialect provides ------------------------------------------------------------
    async def _fetch(self, sql: LiteralString, params: Params | dict[str, Any] = ()) -> list[Any]:
        raise NotImplementedError

    async def _write(self, sql: LiteralString, params: Named, mode: WriteMode = "plain") -> int:
        raise NotImplementedError

    async def _reserve(self, reservation: Reservation) -> bool:
        raise NotImplementedError

    async def _append(self, append: Append) -> LedgerEntry | None:
        raise NotImplementedError

    async def _lease(self, params: dict[str, Any]) -> Sequence[Any] | None:
        raise NotImplementedError

    def _held_back(self) -> None:
        """``read_global`` met rows it may not read yet: ring the commit bell again soon."""

    # --- runs -----------------------------------------------------------------------------
    async def create_run(self, run: RunRecord, events: Sequence[Event] = ()) -> None:
        codec = self.dialect.codec
        events = tuple(events)
        rows, consecutive = codec.event_rows(run.run_id, events)
        await self._append(
            Append(
                run.run_id,
                run.epoch,
                events,
                rows,
                consecutive,
                None,
                [],
                [],
                create=codec.run_row(run, len(events)),
            )
        )

    async def commit(
        self,
        run_id: UUID,
        *,
        epoch: int,
        events: Sequence[Event] = (),
        status: RunStatus | None = None,
        approvals: Sequence[ApprovalRecord] = (),
        audit: Sequence[AuditRecord] = (),
        release: bool = False,
        ledger_begin: LedgerEntry | None = None,
    ) -> LedgerEntry | None:
        codec = self.dialect.codec
        if ledger_begin is not None and ledger_begin.run_id != run_id:
            raise StoreError(f"ledger row of run {ledger_begin.run_id} in a commit of {run_id}")
        events = tuple(events)
        rows, consecutive = codec.event_rows(run_id, events)
        return await self._append(
            Append(
                run_id,
                epoch,
                events,
                rows,
                consecutive,
                status,
                [codec.approval_row(a) for a in approvals] if approvals else [],
                [codec.audit_row(a) for a in audit] if audit else [],
                release=release,
                ledger=ledger_begin,
                ledger_row=None if ledger_begin is None else codec.ledger_row(ledger_begin),
            )
        )

    async def get_run(self, run_id: UUID) -> RunRecord | None:
        d = self.dialect
        rows = await self._fetch(
            f"{d.queries.select_runs} WHERE run_id = {d.param('run_id')}",
            {"run_id": d.codec.uuid(run_id)},
        )
        return d.codec.run_from_row(rows[0]) if rows else None

    async def list_runs(
        self,
        *,
        principal: str | None = None,
        status: RunStatus | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        d = self.dialect
        where, params = d.where({"principal": principal, "status": status})
        rows = await self._fetch(
            f"{d.queries.select_runs} {where} "
            f"ORDER BY created_at DESC, run_id DESC LIMIT {d.param('limit')}",
            {**params, "limit": limit},
        )
        return [d.codec.run_from_row(row) for row in rows]

    async def read_events(
        self, run_id: UUID, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        d = self.dialect
        rows = await self._fetch(
            d.queries.read_events,
            {
                "run_id": d.codec.uuid(run_id),
                "after_seq": after_seq,
                "limit": d.no_limit if limit is None else limit,
            },
        )
        try:
            return [decode_event(payload) for (payload,) in rows]
        except ValueError as exc:  # pydantic.ValidationError is a ValueError
            raise StoreError(f"run {run_id}: a stored event cannot be decoded: {exc}") from exc

    async def read_global(
        self,
        *,
        after: int = 0,
        limit: int = 500,
        principal: str | None = None,
        statuses: Collection[RunStatus] | None = None,
        types: Collection[str] | None = None,
    ) -> GlobalPage:
        if limit < 1:
            return GlobalPage([], after, True)
        d = self.dialect
        # every event after the position is read, and the filters applied here: a reader of a
        # few runs among many reads past the others' events once, never again
        rows = await self._fetch(d.queries.read_global, {"after": after, "limit": limit})
        out: list[GlobalEvent] = []
        next_after = after
        for position, kind, payload, owner, status, held in rows:
            if held:  # the rest waits for older transactions (PostgreSQL)
                self._held_back()
                return GlobalPage(out, next_after, False)
            next_after = int(position)
            if (
                (principal is not None and owner != principal)
                or (statuses is not None and status not in statuses)
                or (types is not None and kind not in types)
            ):
                continue
            try:
                event = decode_event(payload)
            except ValueError as exc:  # pydantic.ValidationError is a ValueError
                raise StoreError(
                    f"event {position}: a stored event cannot be decoded: {exc}"
                ) from exc
            out.append(GlobalEvent(next_after, owner, status, event))
        return GlobalPage(out, next_after, len(rows) == limit)

    async def acquire(
        self, run_id: UUID, *, owner: str, now: datetime, ttl_seconds: float
    ) -> RunRecord | None:
        codec = self.dialect.codec
        row = await self._lease(
            {
                "owner": owner,
                "until": codec.time(now + timedelta(seconds=ttl_seconds)),
                "run_id": codec.uuid(run_id),
                "now": codec.time(now),
            }
        )
        return None if row is None else codec.run_from_row(row)

    async def renew(self, run_id: UUID, *, epoch: int, now: datetime, ttl_seconds: float) -> bool:
        d = self.dialect
        params = {
            "until": d.codec.time(now + timedelta(seconds=ttl_seconds)),
            "run_id": d.codec.uuid(run_id),
            "epoch": epoch,
        }
        return await self._write(d.queries.renew, params, "always") == 1

    async def release(self, run_id: UUID, *, epoch: int) -> None:
        d = self.dialect
        params = {"run_id": d.codec.uuid(run_id), "epoch": epoch}
        await self._write(d.queries.release, params, "always")

    async def runs_to_resume(self, *, now: datetime, limit: int = 100) -> list[RunRecord]:
        d = self.dialect
        rows = await self._fetch(
            d.queries.runs_to_resume, {"now": d.codec.time(now), "limit": limit}
        )
        return [d.codec.run_from_row(row) for row in rows]

    # --- approvals ------------------------------------------------------------------------
    async def get_approval(self, approval_id: UUID) -> ApprovalRecord | None:
        d = self.dialect
        rows = await self._fetch(
            f"{d.queries.select_approvals} WHERE approval_id = {d.param('approval_id')}",
            {"approval_id": d.codec.uuid(approval_id)},
        )
        return d.codec.approval_from_row(rows[0]) if rows else None

    async def list_approvals(
        self,
        *,
        principal: str | None = None,
        run_id: UUID | None = None,
        status: ApprovalStatus | None = None,
    ) -> list[ApprovalRecord]:
        d = self.dialect
        where, params = d.where(
            {
                "principal": principal,
                "run_id": None if run_id is None else d.codec.uuid(run_id),
                "status": status,
            }
        )
        rows = await self._fetch(
            f"{d.queries.select_approvals} {where} ORDER BY created_at, approval_id", params
        )
        return [d.codec.approval_from_row(row) for row in rows]

    async def decide_approval(
        self, approval: ApprovalRecord, *, expected_status: ApprovalStatus = "pending"
    ) -> bool:
        d = self.dialect
        params = dict(zip(APPROVAL_FIELDS, d.codec.approval_row(approval), strict=True))
        params["expected_status"] = expected_status
        return await self._write(d.queries.decide_approval, params, "always") == 1

    async def add_vote(self, vote: ApprovalVote) -> bool:
        d = self.dialect
        return await self._write(d.queries.add_vote, d.codec.vote_params(vote), "always") == 1

    async def list_votes(self, approval_id: UUID) -> list[ApprovalVote]:
        d = self.dialect
        rows = await self._fetch(d.queries.select_votes, {"approval_id": d.codec.uuid(approval_id)})
        return [d.codec.vote_from_row(row) for row in rows]

    # --- ledger ---------------------------------------------------------------------------
    async def ledger_finish(
        self,
        key: str,
        *,
        status: LedgerStatus,
        at: datetime,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        d = self.dialect
        params = {
            "status": status,
            "finished_at": d.codec.time(at),
            "result": json_text_or_none(result),
            "error": error,
            "key": key,
        }
        if await self._write(d.queries.ledger_finish, params, "always") != 1:
            raise StoreError(f"no ledger entry {key!r}")

    async def ledger_retry(self, key: str, *, at: datetime) -> bool:
        d = self.dialect
        params = {"started_at": d.codec.time(at), "key": key}
        # durable: a new attempt's row is on disk before the caller starts it
        return await self._write(d.queries.ledger_retry, params, "durable") == 1

    async def ledger_get(self, key: str) -> LedgerEntry | None:
        d = self.dialect
        rows = await self._fetch(d.queries.get_ledger, {"key": key})
        return d.codec.ledger_from_row(rows[0]) if rows else None

    async def find_ledger(self, query: RecordQuery) -> list[LedgerRow]:
        d = self.dialect
        where, params = self._filter(
            query, run_id="l.run_id", principal="r.principal", capability="l.capability",
            at="l.started_at",
        )  # fmt: skip
        rows = await self._fetch(
            f"{d.queries.select_ledger} {where} "
            f"ORDER BY l.started_at DESC, l.key DESC LIMIT {d.param('limit')}",
            params,
        )
        return [LedgerRow(row[9], d.codec.ledger_from_row(row)) for row in rows]

    # --- audit and spend ------------------------------------------------------------------
    async def audit_records(self, run_id: UUID) -> list[AuditRecord]:
        d = self.dialect
        rows = await self._fetch(d.queries.audit_records, {"run_id": d.codec.uuid(run_id)})
        return [d.codec.audit_from_row(row) for row in rows]

    async def find_audit(self, query: RecordQuery) -> list[AuditRecord]:
        d = self.dialect
        where, params = self._filter(
            query, run_id="run_id", principal="principal", capability="capability", at="at"
        )
        rows = await self._fetch(
            f"{d.queries.select_audit} {where} ORDER BY at DESC, id DESC LIMIT {d.param('limit')}",
            params,
        )
        return [d.codec.audit_from_row(row) for row in rows]

    def _filter(
        self, query: RecordQuery, *, run_id: str, principal: str, capability: str, at: str
    ) -> tuple[str, Named]:
        """The WHERE of a ``RecordQuery`` over these columns (only its filters that are set),
        and its parameters, ``limit`` included."""
        d, codec = self.dialect, self.dialect.codec
        params: Named = {"limit": query.limit}
        tests: list[str] = []
        for column, name, value in (
            (run_id, "run_id", None if query.run_id is None else codec.uuid(query.run_id)),
            (principal, "principal", query.principal),
            (capability, "capability", query.capability),
        ):
            if value is not None:
                tests.append(f"{column} = {d.param(name)}")
                params[name] = value
        if query.since is not None:
            tests.append(f"{at} >= {d.param('since')}")
            params["since"] = codec.time(query.since)
        if query.until is not None:
            tests.append(f"{at} < {d.param('until')}")
            params["until"] = codec.time(query.until)
        return ("WHERE " + " AND ".join(tests) if tests else ""), params

    async def autonomous_spend(self, principal: str, *, since: datetime) -> Decimal:
        d = self.dialect
        rows = await self._fetch(
            d.queries.autonomous_spend, {"principal": principal, "since": d.codec.time(since)}
        )
        return self._spent(rows)

    def _spent(self, rows: Sequence[Sequence[Any]]) -> Decimal:
        """The sum of the amounts of ``autonomous_spend``'s rows (as Decimal, never float)."""
        money_in = self.dialect.codec.money_in
        total = Decimal(0)
        for (amount,) in rows:
            total += money_in(amount) or 0
        return total

    async def reserve_autonomous(
        self,
        principal: str,
        amount_usd: Decimal,
        *,
        limit: Decimal,
        since: datetime,
        key: str,
        at: datetime,
    ) -> bool:
        codec = self.dialect.codec
        return await self._reserve(
            Reservation(principal, amount_usd, limit, codec.time(since), key, codec.time(at))
        )

    async def release_autonomous(self, key: str) -> None:
        await self._write(self.dialect.queries.release_autonomous, {"key": key}, "always")

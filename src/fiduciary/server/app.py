"""The HTTP application: ``create_app(agent, keys=...)`` builds it from an ``Agent``.

Every endpoint is one ``Operation`` in ``OPERATIONS`` (route, scope, body and query models,
answers); the same table routes requests and builds the OpenAPI document served at
``/openapi.json``. Every request is answered with JSON, an event stream, or a problem
(``problems.py``); an unexpected exception is logged and answered ``internal_error``, with no
traceback. The web console is served at ``/``.

Tenancy: a key acts for one principal. It sees and decides only that principal's runs and
approvals; anything else is ``not_found``, exactly as if it did not exist. An ``admin`` key sees
and decides everyone's.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from .._logs import logger
from .._sweep import SWEEP_SECONDS, sweep_forever
from ..agent import Agent
from ..capabilities import Principal
from ..events import Event, GuardNote, PendingAction
from ..exceptions import ApprovalError, ConfigurationError, FiduciaryError
from ..stores.base import (
    ApprovalRecord,
    CancelChannel,
    CancelRequest,
    RunRecord,
    follow_poll_seconds,
)
from ..worker import WorkQueue
from . import auth
from .auth import ApiKey, KeyStore
from .drives import Drives
from .openapi import Operation, Param, build_openapi
from .problems import ProblemError, from_core_error, problem_response, validation_errors
from .ratelimit import RateLimit, RateLimiter
from .schemas import (
    MAX_JSON_DEPTH,
    MAX_SEQ,
    ApprovalList,
    ApprovalOut,
    ApproveBody,
    BalancesOut,
    CreateRunBody,
    DenyBody,
    EventsQuery,
    HookBody,
    ListApprovalsQuery,
    ListRunsQuery,
    MessageBody,
    ResultBody,
    RunAccepted,
    RunList,
    RunOut,
    WhoAmI,
    nests_deeper_than,
)
from .sse import EventHub, SSEResponse
from .webhooks import InboundChannel, Notifier, SignatureError, SignatureVerifier

__all__ = ["OPERATIONS", "BalancesHook", "Server", "create_app"]

log = logger("fiduciary.server")

STATIC_DIR = Path(__file__).with_name("static")
_STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]

BalancesHook = Callable[[str], Awaitable[Mapping[str, Decimal]] | Mapping[str, Decimal]]
"""``balances(principal)``: the principal's balances by asset (shown in the console)."""

M = TypeVar("M", bound=BaseModel)

_RUN_ID = Param("run_id", "path", {"type": "string", "format": "uuid"})
_APPROVAL_ID = Param("approval_id", "path", {"type": "string", "format": "uuid"})

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "POST", "/runs", "createRun", "Start a run with a message", "create_run",
        scope=auth.RUNS_WRITE, body=CreateRunBody, status=202, response=RunAccepted,
        problems=("rate_limited", "run_busy"), tags=("runs",),
        description="Returns once the run and its first events are committed; the run goes on "
        "in the background. Follow it at `events_url`.",
    ),
    Operation(
        "GET", "/runs", "listRuns", "List runs, newest first", "list_runs",
        scope=auth.RUNS_READ, query=ListRunsQuery, response=RunList, tags=("runs",),
    ),
    Operation(
        "GET", "/runs/{run_id}", "getRun", "Get a run", "get_run",
        scope=auth.RUNS_READ, params=(_RUN_ID,), response=RunOut, problems=("not_found",),
        tags=("runs",),
    ),
    Operation(
        "POST", "/runs/{run_id}/messages", "postMessage", "Continue a run with a message",
        "post_message", scope=auth.RUNS_WRITE, params=(_RUN_ID,), body=MessageBody,
        status=202, response=RunAccepted,
        problems=("not_found", "run_busy", "run_state", "rate_limited"), tags=("runs",),
    ),
    Operation(
        "GET", "/runs/{run_id}/events", "runEvents", "Follow a run's events (SSE)", "events",
        scope=auth.RUNS_READ,
        params=(
            _RUN_ID,
            Param(
                "Last-Event-ID", "header", {"type": "string", "maxLength": 20}, required=False,
                description="The seq of the last event received: resume after it.",
            ),
        ),
        query=EventsQuery, media_type="text/event-stream",
        problems=("not_found", "invalid_last_event_id"), tags=("runs",),
        description="Server-sent events: `id:` is the event's seq. Resume with Last-Event-ID "
        "(or `?after=`); no event is skipped or repeated. An `event: reconnect` message with "
        '`{"after": seq}` asks the client to reconnect from there.',
    ),
    Operation(
        "POST", "/runs/{run_id}/cancel", "cancelRun", "Cancel a run", "cancel_run",
        scope=auth.RUNS_WRITE, params=(_RUN_ID,), response=RunOut,
        problems=("not_found", "run_busy", "run_state"), tags=("runs",),
    ),
    Operation(
        "GET", "/approvals", "listApprovals", "List approvals (pending by default)",
        "list_approvals", scope=auth.RUNS_READ, query=ListApprovalsQuery, response=ApprovalList,
        tags=("approvals",),
    ),
    Operation(
        "GET", "/approvals/{approval_id}", "getApproval", "Get an approval", "get_approval",
        scope=auth.RUNS_READ, params=(_APPROVAL_ID,), response=ApprovalOut,
        problems=("not_found",), tags=("approvals",),
    ),
    Operation(
        "POST", "/approvals/{approval_id}/approve", "approve", "Approve a pending action",
        "approve", scope=auth.APPROVALS_DECIDE, params=(_APPROVAL_ID,), body=ApproveBody,
        response=ApprovalOut,
        problems=(
            "not_found", "already_decided", "expired", "digest_mismatch",
            "field_not_modifiable", "invalid_edit", "acknowledgement_required",
            "client_executed",
        ),
        tags=("approvals",),
        description="`args_digest` must be the digest shown with the action: a decision binds "
        "to the exact arguments. The run resumes in the background.",
    ),
    Operation(
        "POST", "/approvals/{approval_id}/deny", "deny", "Deny a pending action", "deny",
        scope=auth.APPROVALS_DECIDE, params=(_APPROVAL_ID,), body=DenyBody,
        response=ApprovalOut, problems=("not_found", "already_decided", "expired"),
        tags=("approvals",),
    ),
    Operation(
        "POST", "/approvals/{approval_id}/result", "submitResult",
        "Report the result of a client-executed action", "submit_result",
        scope=auth.APPROVALS_DECIDE, params=(_APPROVAL_ID,), body=ResultBody,
        response=ApprovalOut,
        problems=("not_found", "already_decided", "expired", "not_client_executed", "invalid_edit"),
        tags=("approvals",),
    ),
    Operation(
        "GET", "/me", "whoAmI", "The principal and scopes of the key", "who_am_i",
        response=WhoAmI, tags=("auth",),
    ),
    Operation(
        "GET", "/balances", "balances", "The principal's balances (when a wallet is loaded)",
        "balances", scope=auth.RUNS_READ, response=BalancesOut, problems=("not_available",),
        tags=("wallet",),
    ),
    Operation(
        "POST", "/hooks/{channel}", "inboundHook", "An inbound message from a channel",
        "hook", auth="signature",
        params=(
            Param("channel", "path", {"type": "string", "maxLength": 100}),
            Param("X-Fiduciary-Timestamp", "header", {"type": "string"}, required=True),
            Param("X-Fiduciary-Signature", "header", {"type": "string"}, required=True),
        ),
        body=HookBody, status=202, response=RunAccepted,
        problems=(
            "unknown_channel", "invalid_signature", "stale_signature", "replayed",
            "rate_limited", "not_found", "run_busy", "run_state",
        ),
        tags=("webhooks",),
        description="Signed with HMAC-SHA256 over `<timestamp>.<body>`; refused when the "
        "timestamp is more than 5 minutes away or the delivery was already received.",
    ),
)  # fmt: skip


@dataclass(slots=True)
class Call:
    """What an endpoint receives once the request is authenticated and validated."""

    request: Request
    key: ApiKey | None
    body: BaseModel | None
    query: BaseModel | None
    raw: bytes

    def body_as(self, model: type[M]) -> M:
        assert isinstance(self.body, model)
        return self.body

    def query_as(self, model: type[M]) -> M:
        assert isinstance(self.query, model)
        return self.query

    @property
    def caller(self) -> ApiKey:
        assert self.key is not None
        return self.key

    @property
    def principal(self) -> Principal:
        return Principal(self.caller.principal, self.caller.scopes)


class Server:
    """The state behind the app: the agent, keys, background drives, live events, webhooks."""

    def __init__(
        self,
        agent: Agent,
        *,
        keys: KeyStore,
        balances: BalancesHook | None = None,
        rate_limit: RateLimit | None = None,
        channels: Sequence[InboundChannel] = (),
        notifier: Notifier | None = None,
        heartbeat_seconds: float = 15.0,
        subscriber_buffer: int = 1000,
        poll_seconds: float | None = None,
        max_body_bytes: int = 64 * 1024,
        coalesce_seconds: float = 0.01,
        drive: bool = True,
    ) -> None:
        if not drive and not isinstance(agent.store, WorkQueue):
            raise ConfigurationError(
                "drive=False leaves runs to workers, and workers need a store that hands out "
                f"work (PostgresStore), not {type(agent.store).__name__}"
            )
        if not drive and notifier is not None:
            raise ConfigurationError(
                "notifications are sent by the process that drives a run, and with "
                "drive=False (--no-drive) this one drives none: it would never send them"
            )
        self.agent = agent
        self.drive = drive
        self.keys = keys
        self.balances_hook = balances
        self.limiter = RateLimiter(rate_limit or RateLimit(), clock=agent.clock)
        self.channels = {c.name: c for c in channels}
        self.verifier = SignatureVerifier(clock=agent.clock)
        self.notifier = notifier
        self.max_body_bytes = max_body_bytes
        self.drives = Drives(agent, on_event=self._on_event)
        self.hub = EventHub(
            agent,
            buffer=subscriber_buffer,
            heartbeat_seconds=heartbeat_seconds,
            poll_seconds=follow_poll_seconds(agent.store) if poll_seconds is None else poll_seconds,
            coalesce_seconds=coalesce_seconds,
        )
        self.openapi = build_openapi(
            OPERATIONS,
            title="fiduciary",
            version=__version__,
            description="Runs, live events, approvals and webhooks of a fiduciary agent.",
        )
        self._principals: dict[UUID, str] = {}
        # cancel requests from other processes (PostgreSQL) for the runs driven here
        self._cancelling: set[asyncio.Task[None]] = set()
        self._asked: dict[UUID, float] = {}  # by request id: when one being honoured last arrived
        self._unlisten = (
            agent.store.on_cancel_request(self._on_cancel_request)
            if drive and isinstance(agent.store, CancelChannel)
            else None
        )

    def _on_event(self, event: Event) -> None:
        if self.notifier is None:
            return
        principal = self._principals.get(event.run_id)
        if principal is not None:
            self.notifier.notify(event, principal=principal)

    def _on_cancel_request(self, request: CancelRequest) -> None:
        now = asyncio.get_running_loop().time()
        if request.request_id in self._asked:  # the same request again: its sender still waits
            self._asked[request.request_id] = now
            return
        if not self.drives.has_drive(request.run_id):  # (this process's own request included)
            return
        self._asked[request.request_id] = now
        task = asyncio.create_task(self._cancel_requested(request))
        self._cancelling.add(task)
        task.add_done_callback(self._cancelling.discard)
        task.add_done_callback(lambda _: self._asked.pop(request.request_id, None))

    async def _cancel_requested(self, request: CancelRequest) -> None:
        by = Principal(request.by, frozenset(request.scopes))
        try:
            run = await self.agent.get_run(request.run_id)
            if not request.allowed_for(run.principal):  # checked before anything is stopped
                log.warning(
                    "run %s: ignored a cancel request of %s, who may not cancel it",
                    request.run_id,
                    request.by,
                )
                return
            # kept (and the principal's lock awaited again) while the request keeps arriving
            await self.drives.cancel(
                request.run_id,
                by,
                request.reason,
                keep=lambda since: self._asked.get(request.request_id, since) > since,
            )
        except FiduciaryError as exc:
            log.info(
                "run %s: %s's cancel request was not recorded: %s", request.run_id, request.by, exc
            )

    async def close(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
        for task in list(self._cancelling):
            task.cancel()
        await asyncio.gather(*self._cancelling, return_exceptions=True)
        await self.drives.close()
        await self.hub.close()
        if self.notifier is not None:
            await self.notifier.close()

    # --- the request pipeline ---------------------------------------------------------------
    def endpoint(self, op: Operation) -> Callable[[Request], Awaitable[Response]]:
        handler: Callable[[Call], Awaitable[Response]] = getattr(self, op.handler)

        async def endpoint(request: Request) -> Response:
            try:
                key = await self._authenticate(request) if op.auth == "key" else None
                if key is not None and op.scope is not None and not key.allows(op.scope):
                    raise ProblemError("insufficient_scope", f"this needs the scope {op.scope}")
                query = _validate(op.query, _query(request)) if op.query is not None else None
                raw = await self._read_body(request) if op.body is not None else b""
                body = None
                if op.body is not None and op.auth != "signature":
                    body = _validate(op.body, _json(raw, request))
                return await handler(Call(request, key, body, query, raw))
            except ProblemError as refused:
                return refused.response()
            except FiduciaryError as exc:
                mapped = from_core_error(exc)
                if mapped.code in ("internal_error", "store_unavailable"):
                    log.warning("%s %s: %s: %s", op.method, op.path, type(exc).__name__, exc)
                return mapped.response()
            except Exception:
                log.exception("%s %s failed", op.method, op.path)
                return problem_response("internal_error", "the server failed; it was logged")

        endpoint.__name__ = op.operation_id
        return endpoint

    async def _authenticate(self, request: Request) -> ApiKey:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        challenge = {"www-authenticate": 'Bearer realm="fiduciary"'}
        if scheme.lower() != "bearer" or not value.strip() or len(value) > 200:
            raise ProblemError(
                "unauthenticated", "send Authorization: Bearer <API key>", headers=challenge
            )
        key = await self.keys.verify(value.strip())
        if key is None:
            raise ProblemError("unauthenticated", "the API key is not valid", headers=challenge)
        return key

    async def _read_body(self, request: Request) -> bytes:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise ProblemError("unsupported_media_type", "send the body as application/json")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            raise ProblemError("payload_too_large", f"at most {self.max_body_bytes} bytes")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                raise ProblemError("payload_too_large", f"at most {self.max_body_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def _limit(self, principal: str) -> None:
        wait = self.limiter.acquire(principal)
        if wait > 0:
            raise ProblemError(
                "rate_limited",
                f"at most {self.limiter.rule.limit} messages per "
                f"{self.limiter.rule.window_seconds:g} s",
                headers={"retry-after": RateLimiter.retry_after(wait)},
            )

    # --- tenancy ----------------------------------------------------------------------------
    async def _visible_run(self, key: ApiKey, text: str) -> RunRecord:
        run_id = _uuid(text, "run")
        run = await self.agent.store.get_run(run_id)
        if run is None or not (key.is_admin or run.principal == key.principal):
            raise ProblemError("not_found", f"no run {run_id}")
        return run

    async def _visible_approval(self, key: ApiKey, text: str) -> ApprovalRecord:
        approval_id = _uuid(text, "approval")
        record = await self.agent.store.get_approval(approval_id)
        if record is None or not (key.is_admin or record.principal == key.principal):
            raise ProblemError("not_found", f"no approval {approval_id}")
        return record

    @staticmethod
    def _decider(key: ApiKey) -> Principal:
        return Principal(key.principal, frozenset({auth.ADMIN}) if key.is_admin else frozenset())

    # --- runs -------------------------------------------------------------------------------
    async def create_run(self, call: Call) -> Response:
        body = call.body_as(CreateRunBody)
        self._limit(call.caller.principal)
        return _accepted(
            *await self._start(
                body.message,
                call.principal,
                capabilities=body.capabilities,
                plan_first=body.plan_first,
            )
        )

    async def _start(
        self,
        message: str,
        principal: Principal,
        *,
        capabilities: Sequence[str] | None = None,
        plan_first: bool = False,
    ) -> tuple[UUID, int]:
        """A new run, driven here or recorded for workers: its id and first seq."""
        if not self.drive:
            run = await self.agent.submit(
                message, principal=principal, capabilities=capabilities, plan_first=plan_first
            )
            return run.run_id, 1
        first = await self.drives.start(
            message,
            principal,
            capabilities=capabilities,
            plan_first=plan_first,
            on_claim=self._remember(principal.actor_id),
        )
        return first.run_id, first.seq

    async def _say(self, run: RunRecord, message: str, principal: Principal) -> tuple[UUID, int]:
        """A message continuing an idle run, driven here or left to workers."""
        if not self.drive:
            submitted = await self.agent.submit(message, principal=principal, run_id=run.run_id)
            return run.run_id, submitted.last_seq
        first = await self.drives.say(
            run.run_id, message, principal, on_claim=self._remember(run.principal)
        )
        return first.run_id, first.seq

    def _remember(self, principal: str) -> Callable[[UUID], None]:
        def remember(run_id: UUID) -> None:
            self._principals[run_id] = principal
            if len(self._principals) > 100_000:  # bounded: the oldest runs are forgotten
                del self._principals[next(iter(self._principals))]

        return remember

    async def post_message(self, call: Call) -> Response:
        run = await self._visible_run(call.caller, call.request.path_params["run_id"])
        body = call.body_as(MessageBody)
        self._limit(call.caller.principal)
        principal = Principal(run.principal, call.caller.scopes)
        return _accepted(*await self._say(run, body.message, principal))

    async def get_run(self, call: Call) -> Response:
        run = await self._visible_run(call.caller, call.request.path_params["run_id"])
        return _json_response(RunOut.of(run))

    async def list_runs(self, call: Call) -> Response:
        query = call.query_as(ListRunsQuery)
        key = call.caller
        runs = await self.agent.store.list_runs(
            principal=None if key.is_admin else key.principal,
            status=query.status,
            limit=query.limit,
        )
        return _json_response(RunList(runs=[RunOut.of(r) for r in runs]))

    async def events(self, call: Call) -> Response:
        run = await self._visible_run(call.caller, call.request.path_params["run_id"])
        query = call.query_as(EventsQuery)
        after = query.after
        header = call.request.headers.get("last-event-id")
        if header is not None and header.strip():
            text = header.strip()
            if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) > MAX_SEQ:
                raise ProblemError(
                    "invalid_last_event_id", "Last-Event-ID must be a seq (an integer)"
                )
            after = int(text)
        body = self.hub.stream(run.run_id, after, last_seq=run.last_seq, follow=query.follow)
        return SSEResponse(body)

    async def cancel_run(self, call: Call) -> Response:
        run = await self._visible_run(call.caller, call.request.path_params["run_id"])
        if run.status in ("completed", "failed", "cancelled"):
            raise ProblemError("run_state", f"the run is already {run.status}")
        record = await self.drives.cancel(run.run_id, self._decider(call.caller))
        return _json_response(RunOut.of(record))

    # --- approvals --------------------------------------------------------------------------
    async def _out(self, records: Sequence[ApprovalRecord]) -> list[ApprovalOut]:
        """Approvals with the description and guard notes their pending_action showed."""
        shown: dict[UUID, PendingAction] = {}
        for run_id in dict.fromkeys(r.run_id for r in records):
            for logged in await self.agent.store.read_events(run_id):
                if isinstance(logged, PendingAction):
                    shown[logged.approval_id] = logged
        out: list[ApprovalOut] = []
        for record in records:
            event = shown.get(record.approval_id)
            notes: list[GuardNote] = list(event.guard_notes) if event else []
            out.append(
                ApprovalOut.of(
                    record,
                    self.agent.redactor,
                    description=event.description if event else "",
                    guard_notes=notes,
                )
            )
        return out

    async def list_approvals(self, call: Call) -> Response:
        query = call.query_as(ListApprovalsQuery)
        key = call.caller
        records = await self.agent.store.list_approvals(
            principal=None if key.is_admin else key.principal,
            run_id=query.run_id,
            status=query.status,
        )
        return _json_response(ApprovalList(approvals=await self._out(records[:500])))

    async def get_approval(self, call: Call) -> Response:
        record = await self._visible_approval(call.caller, call.request.path_params["approval_id"])
        return _json_response((await self._out([record]))[0])

    async def _decide(
        self, record: ApprovalRecord, decide: Callable[[], Awaitable[ApprovalRecord]]
    ) -> Response:
        try:
            decided = await decide()
        except ApprovalError as exc:
            if exc.code == "expired":  # the run records the expiry and tells the model
                self._resume(record)
            raise
        self._resume(record)
        return _json_response((await self._out([decided]))[0])

    def _resume(self, record: ApprovalRecord) -> None:
        if not self.drive:  # the decision itself makes the run claimable for the workers
            return
        self._remember(record.principal)(record.run_id)
        self.drives.resume(record.run_id)

    async def approve(self, call: Call) -> Response:
        record = await self._visible_approval(call.caller, call.request.path_params["approval_id"])
        body = call.body_as(ApproveBody)
        return await self._decide(
            record,
            lambda: self.agent.approve(
                record.approval_id,
                by=self._decider(call.caller),
                edits=body.edits,
                confirm_amount=body.confirm_amount,
                args_digest=body.args_digest,
            ),
        )

    async def deny(self, call: Call) -> Response:
        record = await self._visible_approval(call.caller, call.request.path_params["approval_id"])
        body = call.body_as(DenyBody)
        return await self._decide(
            record,
            lambda: self.agent.deny(
                record.approval_id, by=self._decider(call.caller), reason=body.reason
            ),
        )

    async def submit_result(self, call: Call) -> Response:
        record = await self._visible_approval(call.caller, call.request.path_params["approval_id"])
        body = call.body_as(ResultBody)
        return await self._decide(
            record,
            lambda: self.agent.submit_result(
                record.approval_id, body.result, by=self._decider(call.caller)
            ),
        )

    # --- the rest ---------------------------------------------------------------------------
    async def who_am_i(self, call: Call) -> Response:
        key = call.caller
        return _json_response(
            WhoAmI(principal=key.principal, scopes=sorted(key.scopes), key_id=key.key_id)
        )

    async def balances(self, call: Call) -> Response:
        if self.balances_hook is None:
            raise ProblemError("not_available", "no wallet is loaded on this server")
        result = self.balances_hook(call.caller.principal)
        if inspect.isawaitable(result):
            result = await result
        return _json_response(BalancesOut(principal=call.caller.principal, balances=dict(result)))

    async def hook(self, call: Call) -> Response:
        channel = self.channels.get(call.request.path_params["channel"])
        if channel is None:
            raise ProblemError("unknown_channel", "no such channel")
        try:
            self.verifier.verify(channel.secret, call.request.headers, call.raw)
        except SignatureError as exc:
            raise ProblemError(exc.code, exc.message) from exc
        body = _validate(HookBody, _json(call.raw, call.request))
        self._limit(channel.principal)
        principal = Principal(channel.principal)
        if body.run_id is None:
            return _accepted(*await self._start(body.text, principal))
        run = await self.agent.store.get_run(body.run_id)
        if run is None or run.principal != channel.principal:
            raise ProblemError("not_found", f"no run {body.run_id}")
        return _accepted(*await self._say(run, body.text, principal))

    # --- documents and the console ---------------------------------------------------------
    async def openapi_document(self, request: Request) -> Response:
        return Response(json.dumps(self.openapi), media_type="application/json")

    async def healthz(self, request: Request) -> Response:
        return Response('{"status":"ok"}', media_type="application/json")

    async def console(self, request: Request) -> Response:
        return _static("index.html", "text/html; charset=utf-8", csp=True)

    async def static(self, request: Request) -> Response:
        name = str(request.path_params["name"])
        media = _STATIC_TYPES.get(Path(name).suffix)
        if media is None or name not in ("app.js", "style.css"):
            return problem_response("not_found", "no such file")
        return _static(name, media)


def _static(name: str, media_type: str, *, csp: bool = False) -> Response:
    headers = {"cache-control": "no-cache"}
    if csp:
        headers["content-security-policy"] = _CSP
    return Response((STATIC_DIR / name).read_bytes(), media_type=media_type, headers=headers)


def _accepted(run_id: UUID, first_seq: int) -> Response:
    url = f"/runs/{run_id}/events?after={first_seq - 1}"
    return _json_response(
        RunAccepted(run_id=run_id, first_seq=first_seq, events_url=url),
        status=202,
        headers={"location": f"/runs/{run_id}"},
    )


def _json_response(
    model: BaseModel, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        model.model_dump_json(),
        status_code=status,
        media_type="application/json",
        headers=dict(headers or {}),
    )


def _uuid(text: str, what: str) -> UUID:
    try:
        return UUID(text)
    except ValueError:
        raise ProblemError("not_found", f"no {what} {text[:60]!r}") from None


def _query(request: Request) -> dict[str, str]:
    return dict(request.query_params)


def _json(raw: bytes, request: Request) -> Any:
    too_deep = f"the body is nested more than {MAX_JSON_DEPTH} levels deep"
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProblemError("invalid_json", f"the body is not JSON: {exc}") from None
    except RecursionError:  # the parser's own limit (about 1,000 levels) was reached first
        raise ProblemError("invalid_json", too_deep) from None
    if nests_deeper_than(data, MAX_JSON_DEPTH):
        raise ProblemError("invalid_json", too_deep)
    return data


def _validate(model: type[M], data: Any) -> M:
    if (
        model.model_config.get("extra") == "forbid"
        and isinstance(data, dict)
        and model
        in (
            ListRunsQuery,
            ListApprovalsQuery,
            EventsQuery,
        )
    ):
        # query strings may carry parameters for caches or proxies: ignore unknown ones
        data = {k: v for k, v in data.items() if k in model.model_fields}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ProblemError(
            "invalid_request",
            f"{exc.error_count()} error(s) in the request",
            extra={"errors": validation_errors(exc.errors(include_input=False, include_url=False))},
        ) from None


class _Boundary:
    """The outermost layer: security headers on every response, and a problem instead of
    anything that escaped (never a traceback)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def guarded(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in _SECURITY_HEADERS if k not in names]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, guarded)
        except Exception:
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if not started:
                response = problem_response("internal_error", "the server failed; it was logged")
                with suppress(Exception):
                    await response(scope, receive, guarded)


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return problem_response("method_not_allowed", "", headers=dict(exc.headers or {}))
    return problem_response("not_found", f"no route {request.url.path[:200]}")


def create_app(
    agent: Agent,
    *,
    keys: KeyStore,
    balances: BalancesHook | None = None,
    rate_limit: RateLimit | None = None,
    channels: Sequence[InboundChannel] = (),
    notifier: Notifier | None = None,
    heartbeat_seconds: float = 15.0,
    subscriber_buffer: int = 1000,
    poll_seconds: float | None = None,
    max_body_bytes: int = 64 * 1024,
    coalesce_seconds: float = 0.01,
    resume_on_start: bool = True,
    drive: bool = True,
    sweep_seconds: float = SWEEP_SECONDS,
) -> Starlette:
    """The ASGI app serving ``agent``: the API, live events, webhooks and the console.

    ``app.state.server`` is the ``Server`` behind it. While it runs (with a lifespan), every
    ``sweep_seconds`` from start-up on, the runs that can make progress and that nobody drives
    are resumed in the background (``resume_on_start=False``: never): runs left ``running`` by
    a process that died or froze past its lease, runs whose store failed, runs whose approval
    was decided in another process. On shutdown, drives stop (runs resume from the store later)
    and streams close.

    ``drive=False`` (PostgreSQL, with ``fiduciary worker`` processes): this process drives no
    run. A new run or message is recorded for the workers (``Agent.submit``), a decision only
    makes the run claimable again, and nothing is resumed on startup; the API, the approvals
    and the live events (LISTEN/NOTIFY) work as when driving, whichever process drives the run.
    """
    if sweep_seconds <= 0:
        raise ConfigurationError("sweep_seconds must be positive")
    server = Server(
        agent,
        keys=keys,
        balances=balances,
        rate_limit=rate_limit,
        channels=channels,
        notifier=notifier,
        heartbeat_seconds=heartbeat_seconds,
        subscriber_buffer=subscriber_buffer,
        poll_seconds=poll_seconds,
        max_body_bytes=max_body_bytes,
        coalesce_seconds=coalesce_seconds,
        drive=drive,
    )
    routes = [
        Route(op.path, server.endpoint(op), methods=[op.method], name=op.operation_id)
        for op in OPERATIONS
    ]
    routes += [
        Route("/", server.console, methods=["GET"], include_in_schema=False),
        Route("/static/{name}", server.static, methods=["GET"], include_in_schema=False),
        Route("/openapi.json", server.openapi_document, methods=["GET"]),
        Route("/healthz", server.healthz, methods=["GET"]),
    ]
    # --- MCP hook: the agent's capabilities over streamable HTTP at /mcp (the mcp extra) ------
    with suppress(ImportError):
        from ..mcp.server import mcp_route

        routes.append(mcp_route(agent, keys))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        resumer = (
            asyncio.create_task(_keep_runs_moving(server, sweep_seconds))
            if resume_on_start and drive
            else None
        )
        try:
            yield
        finally:
            if resumer is not None:
                resumer.cancel()
                with suppress(BaseException):
                    await resumer
            await server.close()

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_exception},
    )
    app.add_middleware(_Boundary)
    app.state.server = server
    return app


async def _keep_runs_moving(server: Server, every: float) -> None:
    """The sweep (``fiduciary._sweep``): resume what can make progress, unless driven here."""
    agent = server.agent

    async def find() -> list[RunRecord]:
        return await agent.store.runs_to_resume(now=agent.clock.now())

    def start(run: RunRecord) -> None:
        if not server.drives.is_driving(run.run_id) and not agent.leaves_alone(run.run_id):
            server._remember(run.principal)(run.run_id)
            server.drives.resume(run.run_id)

    await sweep_forever(find, start, every=every)

"""The apps over HTTP: routes a server mounts beside its own (``Mount("/apps", routes=...)``).

``GET /`` the apps (enabled, counters); ``GET /{id}`` one app (state, last ticks, pending
actions); ``POST /{id}/enable``, ``/{id}/disable``, ``/{id}/tick``; ``POST /{id}/messages``
(``{"text": ...}``) — the console's way in to the message hook, the same path as every other
channel (``AppEngine.inbox``: one rate limit per app). The server supplies ``authenticate``:
the caller's principal, or a ``RunError("unauthenticated")`` answered 401; only the engine's
principal, or a caller with the ``admin`` scope, may use them.
``POST /{id}/approvals/{approval_id}/approve | deny`` decides an app's pending action
(``{"confirm_amount": ...}`` where the amount must be re-typed): through the engine, whose
agent knows the apps' own capabilities; a message run that waited for it (a write's card, a
grant the model asked for with ``request_grant``) then continues, and the answer carries its
``run_id``, ``reply`` and ``waiting``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal
from typing import Any

try:
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "fiduciary.apps.http needs the server extra: pip install 'fiduciary[server]'"
    ) from exc

from ..capabilities import Principal
from ..exceptions import ApprovalError, RunError
from ..stores.base import ApprovalRecord
from .engine import AppEngine
from .manifest import Manifest
from .tables import AppRecord, TickRecord

__all__ = ["apps_routes"]

Authenticate = Callable[[Request], Awaitable[Principal]]
_STATUS = {
    "unauthenticated": 401,
    "not_found": 404,
    "forbidden": 403,
    "busy": 429,
    "state": 409,
    "invalid": 422,
}


Handle = Callable[[Request], Awaitable[Any]]


def _guard(
    engine: AppEngine, authenticate: Authenticate
) -> Callable[[Handle], Callable[[Request], Awaitable[Response]]]:
    """An endpoint of ``handle``: the caller checked first (the engine's principal, or an
    admin), put in ``request.state.principal``; the answer JSON, a refusal an error body."""

    async def caller(request: Request) -> Principal:
        who = await authenticate(request)
        if who.actor_id != engine.principal.actor_id and "admin" not in who.scopes:
            raise RunError("forbidden", "these apps act for another principal")
        return who

    def guarded(handle: Handle) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                request.state.principal = await caller(request)
                return JSONResponse(await handle(request))
            except (RunError, ApprovalError) as exc:
                body = {"error": exc.code, "message": exc.message}
                status = _STATUS.get(exc.code, 400) if isinstance(exc, RunError) else 409
                return JSONResponse(body, status_code=status)

        return endpoint

    return guarded


def apps_routes(engine: AppEngine, authenticate: Authenticate) -> list[Route]:
    """The routes of the apps of ``engine``; every one checks the caller first."""

    guarded = _guard(engine, authenticate)

    async def list_apps(request: Request) -> Any:
        out = []
        for app_id, manifest in sorted(engine.manifests.items()):
            record = await engine.record(app_id)
            out.append(_summary(app_id, manifest, record))
        return out

    async def show(request: Request) -> Any:
        app_id = request.path_params["app_id"]
        manifest = engine.manifest(app_id)
        record = await engine.record(app_id)
        ticks = await engine.tables.ticks(app_id, limit=20)
        return _detail(app_id, manifest, record, ticks, await engine.pending(app_id))

    async def enable(request: Request) -> Any:
        record = await engine.enable(request.path_params["app_id"])
        return {"enabled": record.enabled, "waiting": record.enable_run is not None}

    async def disable(request: Request) -> Any:
        record = await engine.disable(request.path_params["app_id"])
        return {"enabled": record.enabled}

    async def tick(request: Request) -> Any:
        result = await engine.tick(request.path_params["app_id"])
        return {"slot": result.slot, "outcome": result.outcome, "detail": result.detail}

    async def message(request: Request) -> Any:
        try:
            body = await request.json()
        except ValueError as exc:
            raise RunError("invalid", 'the body must be JSON: {"text": ...}') from exc
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise RunError("invalid", "a message needs non-empty text")
        answer = await engine.message(
            request.path_params["app_id"],
            text,
            principal=request.state.principal,
            channel="console",
        )
        return {"run_id": str(answer.run_id), "reply": answer.reply, "waiting": answer.waiting}

    async def decide(request: Request) -> Any:
        app_id, verdict = request.path_params["app_id"], request.path_params["verdict"]
        approval_id = request.path_params["approval_id"]
        mine = {str(a.approval_id): a for a in await engine.pending(app_id)}
        found = mine.get(approval_id)
        if found is None:
            raise RunError("not_found", f"no pending action {approval_id} of app {app_id}")
        by = request.state.principal
        if verdict == "approve":
            body = await request.json() if await request.body() else {}
            amount = body.get("confirm_amount") if isinstance(body, dict) else None
            confirm = None if amount is None else Decimal(str(amount))
            record = await engine.approve(found.approval_id, by=by, confirm_amount=confirm)
        elif verdict == "deny":
            record = await engine.deny(found.approval_id, by=by)
        else:
            raise RunError("not_found", "approve or deny")
        decided = {"approval_id": approval_id, "status": record.status}
        try:
            answer = await engine.resume_message(app_id, found.run_id)
        except RunError as exc:
            if exc.code not in ("unknown", "invalid", "state"):
                raise
            return decided  # not a message run (an enabling, a tick's intents: the scheduler's)
        reply = {"run_id": str(answer.run_id), "reply": answer.reply, "waiting": answer.waiting}
        return {**decided, **reply}

    return [
        Route("/", guarded(list_apps), methods=["GET"]),
        Route("/{app_id}/approvals/{approval_id}/{verdict}", guarded(decide), methods=["POST"]),
        Route("/{app_id}", guarded(show), methods=["GET"]),
        Route("/{app_id}/enable", guarded(enable), methods=["POST"]),
        Route("/{app_id}/disable", guarded(disable), methods=["POST"]),
        Route("/{app_id}/tick", guarded(tick), methods=["POST"]),
        Route("/{app_id}/messages", guarded(message), methods=["POST"]),
    ]


# --- what an app looks like over HTTP -----------------------------------------------------------
def _summary(app_id: str, manifest: Manifest, record: AppRecord) -> dict[str, Any]:
    return {
        "id": app_id,
        "name": manifest.name,
        "tier": manifest.tier,
        "enabled": record.enabled,
        "paused_until": record.paused_until,
        "counters": record.counters,
    }


def _detail(
    app_id: str,
    manifest: Manifest,
    record: AppRecord,
    ticks: Sequence[TickRecord],
    pending: Sequence[ApprovalRecord],
) -> dict[str, Any]:
    return {
        "id": app_id,
        "name": manifest.name,
        "hooks": sorted(manifest.hooks),
        "tier": manifest.tier,
        "mode": manifest.config.mode,
        "permissions": list(manifest.permissions),
        "limits": {k: str(v) for k, v in manifest.limits.items()},
        "enabled": record.enabled,
        "state": record.state,
        "counters": record.counters,
        "ticks": [
            {"slot": t.slot, "status": t.status, "outcome": t.outcome, "detail": t.detail}
            for t in ticks
        ],
        "pending": [
            {"approval_id": str(a.approval_id), "capability": a.capability, "args": a.args}
            for a in pending
        ],
    }

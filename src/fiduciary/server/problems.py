"""Errors as JSON problem details (RFC 9457) with stable codes; nothing returns a traceback.

Every error response of the server is ``application/problem+json``::

    {"type": "urn:fiduciary:problem:digest_mismatch", "title": "Digest mismatch",
     "status": 409, "code": "digest_mismatch", "detail": "..."}

``code`` is the stable, machine-readable part (the table ``PROBLEMS`` below); ``detail`` is for
people and may change. Errors of the core (``ApprovalError``, ``RunError``, ``StoreError``) are
mapped here, at the boundary, and only here. A ``CapabilityError`` is ``capability_refused``
(422) with its own code beside: ``"error_code"``, one of ``ErrorCode`` (the closed set, listed
in the OpenAPI document as ``CapabilityErrorCode`` and in docs/capabilities.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from starlette.responses import Response

from ..exceptions import ApprovalError, CapabilityError, FiduciaryError, RunError, StoreError

__all__ = ["PROBLEMS", "ProblemBody", "ProblemError", "from_core_error", "problem_response"]

# code -> (status, title). Codes are API: add new ones, never rename or reuse one.
PROBLEMS: Mapping[str, tuple[int, str]] = {
    # requests
    "invalid_json": (400, "The body is not valid JSON"),
    "invalid_last_event_id": (400, "Last-Event-ID is not a seq"),
    "invalid_request": (422, "The request does not match its schema"),
    "payload_too_large": (413, "The body is too large"),
    "unsupported_media_type": (415, "The body must be application/json"),
    "not_found": (404, "Not found"),
    "method_not_allowed": (405, "Method not allowed"),
    # auth and limits
    "unauthenticated": (401, "A valid API key is required"),
    "insufficient_scope": (403, "The API key lacks a scope this needs"),
    "rate_limited": (429, "Too many messages; retry later"),
    # runs
    "run_busy": (409, "The run is being driven"),
    "run_state": (409, "The run cannot do that in its current state"),
    # approvals (the codes of ApprovalError)
    "already_decided": (409, "The approval was already decided"),
    "expired": (410, "The approval has expired"),
    "digest_mismatch": (409, "The arguments shown are not the ones awaiting approval"),
    "field_not_modifiable": (422, "A field that is not modifiable was edited"),
    "invalid_edit": (422, "The edited arguments are refused"),
    "acknowledgement_required": (422, "The amount must be re-typed to approve this"),
    "client_executed": (409, "The client performs this action; submit its result"),
    "not_client_executed": (409, "The server performs this action; approve or deny it"),
    "tampered": (409, "The stored approval does not match the run's log"),
    "separation_of_duties": (403, "This person may not approve this action"),
    "already_voted": (409, "You have already approved these arguments"),
    "signature_required": (403, "This approval must be signed with a passkey"),
    "signature_refused": (403, "The passkey signature was refused"),
    "result_refused": (422, "The reported result was checked and refused"),
    "not_regenerable": (409, "This action cannot make its arguments anew; approve or deny it"),
    # questions (fiduciary.questions)
    "question": (409, "This is a question to the person; answer it"),
    "invalid_answer": (422, "The answer is refused"),
    # webhooks
    "unknown_channel": (404, "No such webhook channel"),
    "invalid_signature": (401, "The webhook signature is missing or wrong"),
    "stale_signature": (401, "The webhook timestamp is outside the accepted window"),
    "replayed": (409, "This webhook delivery was already received"),
    # a capability's own refusal (CapabilityError): its code is the body's "error_code"
    "capability_refused": (422, "The capability refused the call"),
    # the server
    "not_available": (404, "Not available on this server"),
    "store_unavailable": (503, "The store failed; retry"),
    "internal_error": (500, "Internal error"),
}

_MEDIA_TYPE = "application/problem+json"


class ProblemBody(BaseModel):
    """The body of every error response."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    code: str
    detail: str = ""


class ProblemError(Exception):
    """Raised inside the server to answer with a problem; ``code`` is a key of ``PROBLEMS``."""

    def __init__(
        self,
        code: str,
        detail: str = "",
        *,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        if code not in PROBLEMS:
            raise ValueError(f"unknown problem code {code!r}")
        super().__init__(detail or code)
        self.code = code
        self.status = PROBLEMS[code][0]
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    def response(self) -> Response:
        return problem_response(self.code, self.detail, headers=self.headers, extra=self.extra)


def problem_response(
    code: str,
    detail: str = "",
    *,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Response:
    status, title = PROBLEMS[code]
    body = ProblemBody(
        type=f"urn:fiduciary:problem:{code}",
        title=title,
        status=status,
        code=code,
        detail=" ".join(detail.split())[:1000],
        **dict(extra or {}),
    )
    return Response(
        body.model_dump_json(),
        status_code=status,
        headers=dict(headers or {}),
        media_type=_MEDIA_TYPE,
    )


_RUN_CODES: Mapping[str, str] = {
    "not_found": "not_found",
    "forbidden": "not_found",  # another principal's run does not exist, as far as you know
    "busy": "run_busy",
    "state": "run_state",
    "invalid": "invalid_request",
}


def from_core_error(exc: FiduciaryError) -> ProblemError:
    """The problem a core error answers with (the message is the core's, already redacted)."""
    if isinstance(exc, ApprovalError):
        code = {"unknown": "not_found", "forbidden": "not_found"}.get(exc.code, exc.code)
        if code not in PROBLEMS:
            code = "invalid_request"
        return ProblemError(code, exc.message)
    if isinstance(exc, RunError):
        return ProblemError(_RUN_CODES.get(exc.code, "run_state"), exc.message)
    if isinstance(exc, CapabilityError):
        return ProblemError("capability_refused", exc.message, extra={"error_code": exc.code})
    if isinstance(exc, StoreError):
        return ProblemError("store_unavailable", "the store failed; the request may be retried")
    return ProblemError("internal_error", "")


def validation_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """pydantic's errors without the input values (they may hold what a person typed)."""
    return [
        {
            "loc": [str(p) for p in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": e.get("type"),
        }
        for e in errors[:20]
    ]

"""The request pipeline: from a request to the ``Call`` a handler receives, and back.

``endpoint(server, op)`` authenticates the key, checks the operation's scope, validates the
query and the body, calls ``op.handler(server, call)`` and turns every refusal into a problem
(``problems.py``): a core error mapped by its code, anything unexpected logged and answered
``internal_error`` with no traceback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from .._logs import logger
from ..capabilities import Principal
from ..exceptions import FiduciaryError
from .auth import ApiKey
from .openapi import Operation
from .problems import ProblemError, from_core_error, problem_response, validation_errors
from .schemas import MAX_JSON_DEPTH, nests_deeper_than
from .state import Server

__all__ = ["Call", "Handler", "endpoint", "json_response", "parse_json", "validate"]

log = logger("fiduciary.server")

M = TypeVar("M", bound=BaseModel)


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

    def path(self, name: str) -> str:
        """A path parameter of the route."""
        return str(self.request.path_params[name])


Handler = Callable[[Server, Call], Awaitable[Response]]
"""What an operation's handler is: ``async def handler(server, call) -> Response``."""


def endpoint(server: Server, op: Operation[Handler]) -> Callable[[Request], Awaitable[Response]]:
    """The Starlette endpoint of ``op``, served by ``server``."""
    handler = op.handler

    async def endpoint(request: Request) -> Response:
        try:
            key = await _authenticate(server, request) if op.auth == "key" else None
            if key is not None and op.scope is not None and not key.allows(op.scope):
                raise ProblemError("insufficient_scope", f"this needs the scope {op.scope}")
            query = None
            if op.query is not None:
                query = validate(op.query, dict(request.query_params), query=True)
            raw = await _read_body(request, server.max_body_bytes) if op.body is not None else b""
            body = None
            if op.body is not None and op.auth != "signature":
                body = validate(op.body, parse_json(raw))
            return await handler(server, Call(request, key, body, query, raw))
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


async def _authenticate(server: Server, request: Request) -> ApiKey:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    challenge = {"www-authenticate": 'Bearer realm="fiduciary"'}
    if scheme.lower() != "bearer" or not value.strip() or len(value) > 200:
        raise ProblemError(
            "unauthenticated", "send Authorization: Bearer <API key>", headers=challenge
        )
    key = await server.keys.verify(value.strip())
    if key is None:
        raise ProblemError("unauthenticated", "the API key is not valid", headers=challenge)
    return key


async def _read_body(request: Request, max_bytes: int) -> bytes:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise ProblemError("unsupported_media_type", "send the body as application/json")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise ProblemError("payload_too_large", f"at most {max_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise ProblemError("payload_too_large", f"at most {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


# what a depth count skips: JSON strings (their brackets are text), then every byte but brackets
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def brackets_deeper_than(raw: bytes, limit: int) -> bool:
    """Whether the brackets of ``raw`` (outside strings) nest more than ``limit`` deep, counted
    before parsing: the parser recurses once per level, and a process whose recursion limit a
    library raised (py_ecc, under web3, sets 100,000) overflows the C stack on a deep body
    instead of raising RecursionError."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    for byte in _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS):
        depth += 1 if byte in b"[{" else -1
        if depth > limit:
            return True
    return False


def parse_json(raw: bytes) -> Any:
    """The body as JSON; ``invalid_json`` when it is not, or nests too deep."""
    too_deep = f"the body is nested more than {MAX_JSON_DEPTH} levels deep"
    if brackets_deeper_than(raw, MAX_JSON_DEPTH):
        raise ProblemError("invalid_json", too_deep)
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProblemError("invalid_json", f"the body is not JSON: {exc}") from None
    except RecursionError:  # the parser's own limit (about 1,000 levels) was reached first
        raise ProblemError("invalid_json", too_deep) from None
    if nests_deeper_than(data, MAX_JSON_DEPTH):
        raise ProblemError("invalid_json", too_deep)
    return data


def validate(model: type[M], data: Any, *, query: bool = False) -> M:
    """``data`` as ``model``; ``invalid_request`` with each error (never the input values)."""
    if query and model.model_config.get("extra") == "forbid" and isinstance(data, dict):
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


def json_response(
    model: BaseModel, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        model.model_dump_json(),
        status_code=status,
        media_type="application/json",
        headers=dict(headers or {}),
    )

"""HTTP actions: an app's external endpoints as declared capabilities, behind the SSRF guard.

There is no "call any URL" tool (seed 002 forbids an arbitrary HTTP proxy). Each ``Endpoint``
is one fixed URL and method, declared in code, and becomes one capability an app whitelists by
name: ``GET`` a read, any other method a write (``execute``) that must name the *operation* —
the permission — it serves. A manifest's permission must be the operation of one of its
capabilities, and a per-action intent's permissions must be exactly its capability's operation
(``intents.py``), so each permission maps to its endpoints and a mismatch either way is refused
before any request.

Every call goes through ``UrlGuard`` (``fiduciary.signing``): http/https only (https by
default), the host resolved and every address public unless the guard allows private ones, the
connection made to the checked address; plus the endpoints' ``allowed_hosts``, checked when they
are declared and again at each call. Redirects are never followed (a 3xx is refused); the
timeout is 30 s. Outcomes, as the gates read them:

- refused before anything was sent (guard, host, connection refused): a ``CapabilityError`` —
  no effect;
- 4xx: ``CapabilityError`` — the other side refused it: ``unauthorized`` (401, 403),
  ``not_found`` (404, 410), ``conflict`` (409), ``precondition`` (412, 422),
  ``rate_limited`` (429), else ``refused`` (the status is in the message);
- a timeout: ``TimeoutError`` — on a write, the gates record the outcome as **unknown** (never
  retried; the model must check with a read);
- 5xx or the connection lost after sending, on a write: an error whose outcome is unknown too;
  on a read, a ``CapabilityError`` (``http_error``).

The response body is returned as JSON (or ``{"text": ...}``), cut to 4 KB by the hooks' limits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field

from ..capabilities import CallContext, Capability, capability
from ..exceptions import CapabilityError, ConfigurationError, ErrorCode
from ..signing import UnsafeUrlError, UrlGuard

__all__ = ["DEFAULT_TIMEOUT", "Endpoint", "EndpointCallError", "endpoint_capabilities"]

# an HTTP refusal's status -> the capability error code it is reported with
_REFUSALS: Mapping[int, ErrorCode] = {
    401: "unauthorized",
    403: "unauthorized",
    404: "not_found",
    409: "conflict",
    410: "not_found",
    412: "precondition",
    422: "precondition",
    429: "rate_limited",
}

DEFAULT_TIMEOUT = 30.0
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})


class EndpointCallError(Exception):
    """A write that reached the other side and failed there, or lost its connection after
    sending: it may have acted (the gates record the outcome as unknown)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """One external endpoint an app may call: ``name`` (the capability), a fixed ``url``, a
    ``method``; a write names its ``operation`` (the permission); ``amount_field`` is an
    argument holding the USD amount the policy tiers price the call by."""

    name: str
    url: str
    method: str = "POST"
    operation: str | None = None
    description: str = ""
    amount_field: str | None = None

    @property
    def is_write(self) -> bool:
        return self.method.upper() != "GET"


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    payload: dict[str, Any] = Field(
        default_factory=dict,
        description="The request's JSON body (a write) or its query parameters (a read).",
    )


def _check(endpoint: Endpoint, hosts: frozenset[str], guard: UrlGuard) -> None:
    where = f"endpoint {endpoint.name}"
    if endpoint.method.upper() not in _METHODS:
        raise ConfigurationError(f"{where}: method {endpoint.method!r} is not one of {_METHODS}")
    parts = urlsplit(endpoint.url)
    if parts.scheme.lower() not in guard.schemes:
        raise ConfigurationError(f"{where}: scheme {parts.scheme or '(none)'} is not allowed")
    if (parts.hostname or "").lower() not in hosts:
        raise ConfigurationError(f"{where}: host {parts.hostname!r} is not an allowed host")
    if endpoint.is_write and not endpoint.operation:
        raise ConfigurationError(f"{where}: a write must name the operation it serves")


def endpoint_capabilities(
    endpoints: Iterable[Endpoint],
    *,
    allowed_hosts: Sequence[str],
    guard: UrlGuard | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    transport: httpx.AsyncBaseTransport | None = None,
) -> list[Capability]:
    """One capability per endpoint (``ConfigurationError`` for one that is not allowed)."""
    guard = guard or UrlGuard()
    hosts = frozenset(h.lower() for h in allowed_hosts)
    made: list[Capability] = []
    names: set[str] = set()
    for endpoint in endpoints:
        _check(endpoint, hosts, guard)
        if endpoint.name in names:
            raise ConfigurationError(f"endpoint {endpoint.name} is declared twice")
        names.add(endpoint.name)
        made.append(_capability(endpoint, hosts, guard, timeout, transport))
    return made


def _capability(
    endpoint: Endpoint,
    hosts: frozenset[str],
    guard: UrlGuard,
    timeout: float,
    transport: httpx.AsyncBaseTransport | None,
) -> Capability:
    method = endpoint.method.upper()

    def amount(args: Any, ctx: CallContext) -> Decimal | None:
        if endpoint.amount_field is None:
            return None
        raw = args.payload.get(endpoint.amount_field)
        try:
            return Decimal(str(raw))
        except InvalidOperation:
            raise CapabilityError(
                "invalid_amount", f"{endpoint.amount_field} must be a USD amount"
            ) from None

    async def call(args: _Payload) -> dict[str, Any]:
        return await _send(endpoint, method, args.payload, hosts, guard, timeout, transport)

    return capability(
        name=endpoint.name,
        description=endpoint.description or f"{method} {endpoint.url}",
        kind="execute" if endpoint.is_write else "read",
        risk="high" if endpoint.is_write else "low",
        operation=endpoint.operation,
        amount_usd=amount if endpoint.amount_field else None,
        timeout=timeout,
        input_model=_Payload,
    )(call)


async def _send(
    endpoint: Endpoint,
    method: str,
    payload: Mapping[str, Any],
    hosts: frozenset[str],
    guard: UrlGuard,
    seconds: float,
    transport: httpx.AsyncBaseTransport | None,
) -> dict[str, Any]:
    if (urlsplit(endpoint.url).hostname or "").lower() not in hosts:
        raise CapabilityError("host_not_allowed", f"{endpoint.name}: the host is not allowed")
    try:
        checked = await guard.check(endpoint.url)
    except UnsafeUrlError as exc:
        raise CapabilityError("unsafe_url", f"{endpoint.name}: {exc}") from None
    headers = {"host": checked.host_header, "user-agent": "fiduciary-apps/1"}
    extensions: dict[str, Any] = {}
    if checked.sni_hostname is not None:
        extensions["sni_hostname"] = checked.sni_hostname
    options: dict[str, Any] = (
        {"json": dict(payload)} if endpoint.is_write else {"params": dict(payload)}
    )
    async with httpx.AsyncClient(
        transport=transport, follow_redirects=False, timeout=seconds, trust_env=False
    ) as client:
        try:
            response = await client.request(
                method, checked.connect_url, headers=headers, extensions=extensions, **options
            )
        except httpx.TimeoutException:
            raise TimeoutError(f"{endpoint.name} did not answer within {seconds:g}s") from None
        except httpx.ConnectError as exc:  # nothing was sent
            raise CapabilityError("unreachable", f"{endpoint.name}: cannot connect") from exc
        except httpx.HTTPError as exc:
            if endpoint.is_write:
                raise EndpointCallError(f"{endpoint.name}: {type(exc).__name__}") from exc
            raise CapabilityError("http_error", f"{endpoint.name}: {type(exc).__name__}") from exc
    status = response.status_code
    if 300 <= status < 400:
        raise CapabilityError(
            "redirect_refused", f"{endpoint.name} answered a redirect ({status}): not followed"
        )
    if 400 <= status < 500:
        code = _REFUSALS.get(status, "refused")
        raise CapabilityError(code, f"{endpoint.name} refused the call ({status})")
    if status >= 500:
        if endpoint.is_write:
            raise EndpointCallError(f"{endpoint.name} failed on the other side ({status})")
        raise CapabilityError("http_error", f"{endpoint.name} failed ({status})")
    try:
        body: Any = response.json()
    except ValueError:
        body = {"text": response.text}
    return {"status": status, "body": body}

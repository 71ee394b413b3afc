"""The HTTP server: API, live events over SSE, approvals from any device, webhooks, console.

Needs the ``server`` extra (``pip install 'fiduciary[server]'``). Build the ASGI app with
``create_app(agent, keys=SQLiteKeyStore(path))`` (``PostgresKeyStore(dsn)`` on PostgreSQL) and
serve it with any ASGI server, or run ``fiduciary serve``.
"""

from __future__ import annotations

try:
    import httpx  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "fiduciary.server needs the 'server' extra: pip install 'fiduciary[server]'"
    ) from exc

from .app import OPERATIONS, BalancesHook, Server, create_app
from .auth import (
    ALL_SCOPES,
    DEFAULT_SCOPES,
    ApiKey,
    KeyStore,
    MemoryKeyStore,
    PostgresKeyStore,
    SQLiteKeyStore,
)
from .problems import PROBLEMS, ProblemError
from .ratelimit import RateLimit, RateLimiter
from .schemas import Balances
from .webhooks import (
    InboundChannel,
    Notifier,
    UrlGuard,
    WebhookTarget,
    new_webhook_secret,
    sign,
    standard_signature,
)

__all__ = [
    "ALL_SCOPES",
    "DEFAULT_SCOPES",
    "OPERATIONS",
    "PROBLEMS",
    "ApiKey",
    "Balances",
    "BalancesHook",
    "InboundChannel",
    "KeyStore",
    "MemoryKeyStore",
    "Notifier",
    "PostgresKeyStore",
    "ProblemError",
    "RateLimit",
    "RateLimiter",
    "SQLiteKeyStore",
    "Server",
    "UrlGuard",
    "WebhookTarget",
    "create_app",
    "new_webhook_secret",
    "sign",
    "standard_signature",
]

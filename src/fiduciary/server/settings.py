"""``--config server.toml``: the server's settings (rate limit, inbound channels, outbound
notifications, webhooks, apps, external MCP servers), validated with pydantic.

Its own module so that ``features.py`` reads ``AppsSettings`` without importing the command
(``cli.py``), which builds the app.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..cli._common import DEFAULT_APPS_ENGINE, plain_errors
from .webhooks import InboundChannel, WebhookTarget

__all__ = [
    "AppsSettings",
    "ChannelConfig",
    "ServerConfig",
    "TargetConfig",
    "WebhookConfig",
]


Notified = Literal["pending_action", "run_completed", "run_failed"]


def _all_notified() -> list[Notified]:
    return ["pending_action", "run_completed", "run_failed"]


def _https_only() -> list[Literal["https", "http"]]:
    return ["https"]


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChannelConfig(_Config):
    name: str = Field(min_length=1, max_length=100)
    principal: str = Field(min_length=1)
    secret: str | None = None
    secret_env: str | None = None
    target: str | None = None  # an app's id: its messages go to the app (features.py)


class AppsSettings(_Config):
    """``[apps]`` of ``--config server.toml`` (``--apps DIR`` alone means the defaults)::

    [apps]
    dir = "apps"                                  # <id>/app.md folders (else the samples)
    engine = "fiduciary.wallet.apps:paper_engine" # (store, tables, principal) -> AppEngine
    principal = "demo-user"                       # on whose behalf the apps act
    tick_seconds = 1.0                            # between scheduler steps
    """

    dir: Path | None = None
    engine: str = DEFAULT_APPS_ENGINE
    principal: str = Field(default="demo-user", min_length=1)
    tick_seconds: float = Field(default=1.0, gt=0)


class TargetConfig(_Config):
    url: str
    secret: str | None = None
    secret_env: str | None = None
    events: list[Notified] = Field(default_factory=_all_notified)
    principals: list[str] | None = None


class WebhookConfig(_Config):
    schemes: list[Literal["https", "http"]] = Field(default_factory=_https_only)
    allow_private: bool = False
    max_attempts: int = Field(default=5, ge=1, le=20)


class ServerConfig(_Config):
    """``--config server.toml``: rate limit, inbound channels, outbound notifications, apps.

    ```toml
    rate_limit = "10/60"
    [[channels]]
    name = "chat"
    principal = "demo-user"
    secret_env = "FIDUCIARY_CHAT_SECRET"
    # target = "dca"   # an app's id: the channel's messages go to the app (one inbox)
    [[notify]]
    url = "https://hooks.example.com/fiduciary"
    secret_env = "FIDUCIARY_NOTIFY_SECRET"
    [webhooks]
    schemes = ["https"]
    allow_private = false
    [apps]             # serve apps (see AppsSettings)
    dir = "apps"
    [[mcp]]            # an external MCP server's tools, as gated capabilities (fiduciary.mcp)
    name = "bank"
    command = "python"
    args = ["-m", "bank_mcp"]
    prefix = "bank_"
    ```
    Secrets are read from the environment (``secret_env``) or, less safely, given inline.
    """

    rate_limit: str = "10/60"
    heartbeat_seconds: float = Field(default=15.0, gt=0)
    channels: list[ChannelConfig] = Field(default_factory=list)
    notify: list[TargetConfig] = Field(default_factory=list)
    webhooks: WebhookConfig = Field(default_factory=WebhookConfig)
    apps: AppsSettings | None = None
    mcp: list[dict[str, Any]] = Field(default_factory=list)  # checked by fiduciary.mcp.config

    @classmethod
    def load(cls, path: Path | None) -> ServerConfig:
        if path is None:
            return cls()
        try:
            loaded = cls.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
            if loaded.apps is not None and loaded.apps.dir is not None:
                loaded.apps.dir = path.parent / loaded.apps.dir  # relative to the file
            return loaded
        except ValidationError as exc:
            raise ValueError(f"{path}: {plain_errors(exc)}") from exc
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"{path}: {exc}") from exc

    def inbound(self) -> list[InboundChannel]:
        return [
            InboundChannel(c.name, _secret(c.secret, c.secret_env, c.name), c.principal)
            for c in self.channels
        ]

    def hook_targets(self) -> dict[str, str]:
        """Channel name → the app its messages go to (channels with a ``target``)."""
        return {c.name: c.target for c in self.channels if c.target is not None}

    def targets(self) -> list[WebhookTarget]:
        return [
            WebhookTarget(
                t.url,
                _secret(t.secret, t.secret_env, t.url),
                frozenset(t.events),
                None if t.principals is None else frozenset(t.principals),
            )
            for t in self.notify
        ]


def _secret(inline: str | None, env: str | None, what: str) -> str:
    if env:
        value = os.environ.get(env)
        if not value:
            raise ValueError(f"{what}: the environment variable {env} is not set")
        return value
    if inline:
        return inline
    raise ValueError(f"{what}: give secret_env (or secret)")

"""The model new runs use, seen and changed at run time: ``GET /ai/status``, ``PUT /ai/default``.

``GET /ai/status`` (``runs:read``) lists the providers fiduciary knows (``models.registry``):
for each, the model it would use, the variables its key is read from and whether one is set
(never the key), whether it can run here (its extra installed; a CLI agent's binary on the
PATH) and, where that is known without a request, whether it is reachable (a CLI agent: its
binary was found; an API: ``null``, unknown until a run asks). It names the default and who
set it when.

``PUT /ai/default`` (``admin`` only: 403 otherwise) sets the model of the runs started from now
on in this server: ``{"provider": "anthropic", "model": "claude-sonnet-4-6"}`` (``model``
left out: the provider's standard model). An unknown provider, a model string the registry
refuses, a provider whose extra is missing or whose key is not set is ``invalid_request``
(422) and changes nothing. A run keeps the model it started with (``run_started.model``):
a run resumed or continued here is driven by an agent with that model, whatever the default
now is. The server's own agent (its factory's model) is the one kept for its model's name.

Each change is one row of ``server_ai_choices`` (when, who, from, to): the audit trail, and
what a restarted server reads back (its latest row is the default again). The table lives
beside the API keys (``auth.py``): in the runs' SQLite file or PostgreSQL database, created on
first use like ``server_api_keys``; with in-memory keys the choice lasts as long as the process.
With ``--no-drive`` this server drives no run (workers do, with their own agent): a change is
``not_available``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
from collections.abc import AsyncGenerator, Mapping
from datetime import UTC, datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from .._logs import logger
from ..agent import Agent
from ..events import Event, RunStarted
from ..exceptions import ConfigurationError
from ..models.registry import PROVIDERS, resolve_model
from ..models.tiers import DEFAULT_TIERS
from .auth import KeyStore, SqlTable

__all__ = [
    "AiStatus",
    "DefaultBody",
    "ModelChange",
    "ModelChoice",
    "ProviderStatus",
]

log = logger("fiduciary.server")

# where each provider's key is read from (none: it needs no key of fiduciary's)
KEY_VARIABLES: Mapping[str, tuple[str, ...]] = {
    "anthropic": ("ANTHROPIC_API_KEY",),
    "openai": ("OPENAI_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}
# the SDK each provider needs (its extra), and the binary of the CLI agents
_SDKS: Mapping[str, tuple[str, str]] = {
    "anthropic": ("anthropic", "anthropic"),
    "openai": ("openai", "openai"),
    "openai-compatible": ("openai", "openai"),
    "gemini": ("google.genai", "gemini"),
}
_BINARIES: Mapping[str, str] = {"claude-cli": "claude", "codex-cli": "codex"}

_SCHEMA = """CREATE TABLE IF NOT EXISTS server_ai_choices (
    at           TEXT NOT NULL,
    by_principal TEXT NOT NULL,
    from_model   TEXT NOT NULL,
    to_model     TEXT NOT NULL
)"""
_HISTORY = 10


class ProviderStatus(BaseModel):
    name: str
    model: str | None = Field(
        description="The model it would use: the default's, else its standard tier's."
    )
    key_variables: list[str] = Field(description="Where its key is read from (empty: none needed).")
    key_present: bool = Field(description="Whether one of those variables is set (never the key).")
    available: bool = Field(description="Its extra is installed (a CLI agent: its binary found).")
    reachable: bool | None = Field(
        description="Known without a request (a CLI agent's binary); else null."
    )
    default: bool
    problem: str | None = Field(default=None, description="Why it cannot be the default now.")


class ModelChange(BaseModel):
    at: datetime
    by: str
    from_model: str
    to_model: str


class AiStatus(BaseModel):
    default: str = Field(description="The model new runs use (PROVIDER:MODEL, or scripted).")
    provider: str
    persisted: bool = Field(description="Whether a change survives a restart of the server.")
    changes: list[ModelChange] = Field(description="The latest changes, newest first.")
    providers: list[ProviderStatus]


class DefaultBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: str = Field(min_length=1, max_length=40)
    model: str | None = Field(default=None, min_length=1, max_length=300)

    def model_string(self) -> str:
        """``PROVIDER:MODEL`` (or ``scripted``); ``ValueError`` for an unknown provider."""
        if self.provider not in PROVIDERS:
            raise ValueError(f"unknown provider {self.provider!r}; one of {', '.join(PROVIDERS)}")
        if self.model is not None and self.provider != "scripted":
            return f"{self.provider}:{self.model}"
        model = _model_of(self.provider)
        if model is None:
            raise ValueError(f"name a model for {self.provider}: it has no standard one")
        return model


def _provider_of(model: str) -> str:
    return model.partition(":")[0]


def _missing(provider: str) -> str | None:
    """What ``provider`` lacks to run here: its SDK (extra), a CLI agent's binary (None: none)."""
    sdk = _SDKS.get(provider)
    if sdk is not None and importlib.util.find_spec(sdk[0].split(".")[0]) is None:
        return f"its SDK is not installed: pip install 'fiduciary[{sdk[1]}]'"
    binary = _BINARIES.get(provider)
    if binary is not None and shutil.which(binary) is None:
        return f"the {binary} command is not on the PATH"
    return None


def _problem(provider: str, env: Mapping[str, str]) -> str | None:
    """Why ``provider`` cannot drive runs here (None: it can, as far as is known)."""
    variables = KEY_VARIABLES.get(provider, ())
    if variables and not any(env.get(v) for v in variables):
        return _missing(provider) or f"no API key: set {' or '.join(variables)}"
    return _missing(provider)


def _model_of(provider: str) -> str | None:
    """The model a provider would be asked for: its standard tier's (None: name one)."""
    if provider == "scripted":
        return "scripted"
    standard = DEFAULT_TIERS.get(provider, {}).get("standard")
    return None if standard is None else f"{provider}:{standard}"


class ModelChoice:
    """The default model of this server's new runs, the agents per model, the choices' log."""

    def __init__(self, agent: Agent, keys: KeyStore, *, env: Mapping[str, str] | None = None):
        self.base = agent
        self._env = env
        self._table = keys if isinstance(keys, SqlTable) else None
        self._agents: dict[str, Agent] = {agent.model.name: agent}
        self.current = agent.model.name
        self._history: list[ModelChange] = []
        self._loaded = False
        self._loading = asyncio.Lock()

    @property
    def env(self) -> Mapping[str, str]:
        return os.environ if self._env is None else self._env

    # --- which agent drives what ---------------------------------------------------------
    async def for_new(self) -> Agent:
        """The agent of a run started now: the default's."""
        await self.load()
        return self._agents[self.current]

    async def for_run(self, run_id: UUID) -> Agent:
        """The agent of an existing run: the one with the model it started with (the server's
        own when that model cannot be built here any more)."""
        await self.load()
        if not self._history:  # never changed: every run here is the server's own agent's
            return self.base
        first = await self.base.store.read_events(run_id, limit=1)
        started = first[0] if first else None
        if not isinstance(started, RunStarted):
            return self.base
        if started.model in self._agents:
            return self._agents[started.model]
        try:
            return self._agent(started.model)
        except (ConfigurationError, ImportError, ValueError):
            return self.base

    async def resumed(self, run_id: UUID) -> AsyncGenerator[Event, None]:
        """``Agent.resume`` of the run's own agent."""
        stream = (await self.for_run(run_id)).resume(run_id)
        try:
            async for event in stream:
                yield event
        finally:
            await stream.aclose()

    def _agent(self, model: str) -> Agent:
        agent = self._agents.get(model)
        if agent is None:
            agent = self.base.with_options(model=resolve_model(model))
            self._agents[model] = agent
        return agent

    # --- reading and changing the default ------------------------------------------------
    async def load(self) -> None:
        """Read the latest choice back (once): the default survives a restart."""
        if self._loaded:
            return
        async with self._loading:
            if self._loaded:
                return
            if self._table is not None:
                await self._table.execute(_SCHEMA)
                rows = await self._table.execute(
                    "SELECT at, by_principal, from_model, to_model FROM server_ai_choices "
                    f"ORDER BY at DESC LIMIT {_HISTORY}"
                )
                self._history = [
                    ModelChange(
                        at=datetime.fromisoformat(str(r[0])),
                        by=str(r[1]),
                        from_model=str(r[2]),
                        to_model=str(r[3]),
                    )
                    for r in rows
                ]
            if self._history:
                chosen = self._history[0].to_model
                try:
                    self._agent(chosen)
                    self.current = chosen
                except (ConfigurationError, ImportError, ValueError) as exc:
                    log.warning("the default model %s cannot be used here: %s", chosen, exc)
            self._loaded = True

    async def change(self, to: str, *, by: str) -> ModelChange:
        """Make ``to`` the default; ``ValueError`` (nothing changed) when it cannot be."""
        await self.load()
        provider = _provider_of(to)
        if provider not in PROVIDERS:
            raise ValueError(f"unknown provider {provider!r}; one of {', '.join(PROVIDERS)}")
        if to not in self._agents:
            problem = _problem(provider, self.env)
            if problem is not None:
                raise ValueError(f"{provider} cannot be the default: {problem}")
            try:
                self._agent(to)
            except (ConfigurationError, ImportError) as exc:
                raise ValueError(str(exc)) from None
        change = ModelChange(
            at=self.base.clock.now().astimezone(UTC), by=by, from_model=self.current, to_model=to
        )
        if self._table is not None:  # written first: a failed write changes nothing
            await self._table.execute(
                "INSERT INTO server_ai_choices (at, by_principal, from_model, to_model) "
                "VALUES (?, ?, ?, ?)",
                (change.at.isoformat(timespec="microseconds"), by, change.from_model, to),
            )
        self.current = to
        self._history = [change, *self._history][:_HISTORY]
        log.info("the default model was changed by %s: %s -> %s", by, change.from_model, to)
        return change

    async def status(self) -> AiStatus:
        await self.load()
        env = self.env
        current = _provider_of(self.current)
        providers = []
        for name in PROVIDERS:
            binary = _BINARIES.get(name)
            variables = KEY_VARIABLES.get(name, ())
            providers.append(
                ProviderStatus(
                    name=name,
                    model=self.current if name == current else _model_of(name),
                    key_variables=list(variables),
                    key_present=any(env.get(v) for v in variables),
                    available=name == current or _missing(name) is None,
                    reachable=None if binary is None else shutil.which(binary) is not None,
                    default=name == current,
                    problem=None if name == current else _problem(name, env),
                )
            )
        return AiStatus(
            default=self.current,
            provider=current,
            persisted=self._table is not None,
            changes=list(self._history),
            providers=providers,
        )

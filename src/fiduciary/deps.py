"""Dependencies: what an application hands a run's capabilities, never recorded.

``Agent(deps_type=T, deps_factory=...)``, ``run(..., deps=value)``: a capability that declares
``ctx: CallContext[T]`` reads ``ctx.deps`` (a database pool, an HTTP client, a tenant's
settings) — typed ``T`` for mypy. Deps are live objects: they are never written to the log, an
event, an audit row or a model request. A run records only that it needs some, and of which
type (``run_started.deps``, the type's name), so that a process resuming it knows.

Where a drive gets them, in order: the ``deps`` given to ``run`` or ``resume``; those given
to this agent, in this process, for the same run (a run that waited for an approval resumes
with the deps it started with); ``deps_factory(run_id, principal)`` (sync or async), which is
how another process — a worker, a server, a sweep after a crash — gets them. A run that needs
deps and can get none is refused before anything is touched (``RunError("agent_mismatch")``):
resume it with ``deps=...``, or give the agent a ``deps_factory``.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Callable, Iterable
from contextlib import suppress
from typing import Any, TypeAlias
from uuid import UUID

from .capabilities import Capability
from .events import RunStarted
from .exceptions import ConfigurationError, RunError
from .outputs import OutputSpec, OutputTypes, output_type_name
from .stores.base import RunRecord, Store

__all__ = ["Dependencies", "DepsFactory", "started_fields", "typed_drive"]

DepsFactory: TypeAlias = Callable[[UUID, str], Any]
"""``deps_factory(run_id, principal)``: a run's deps (or an awaitable of them)."""

_KEPT = 1024  # runs whose deps this process keeps for their next drive (the oldest go first)


class Dependencies:
    """An agent's dependencies: their type, the factory, and those runs were given here."""

    __slots__ = ("_kept", "deps_type", "factory")

    def __init__(
        self,
        deps_type: Any = None,
        factory: DepsFactory | None = None,
        *,
        capabilities: Iterable[Capability] = (),
    ) -> None:
        if factory is not None and not callable(factory):
            raise ConfigurationError("deps_factory must be callable: (run_id, principal) -> deps")
        self.deps_type = deps_type
        self.factory = factory
        self._kept: OrderedDict[UUID, Any] = OrderedDict()
        for cap in capabilities:
            _check_declared(cap, deps_type)

    def check(self, deps: Any) -> None:
        """Refuse deps that are not the agent's ``deps_type`` (when it is a class)."""
        expected = self.deps_type
        if deps is None or not isinstance(expected, type):
            return
        if not isinstance(deps, expected):
            raise RunError(
                "invalid",
                f"deps must be a {output_type_name(expected)}, not a {type(deps).__name__}",
            )

    def given(self, run_id: UUID, deps: Any) -> None:
        """Deps given to ``resume``: checked, and kept for the run's drives in this process."""
        if deps is not None:
            self.check(deps)
            self.keep(run_id, deps)

    def started_fields(self, deps: Any) -> dict[str, Any]:
        """What ``run_started`` records: the name of the deps' type, when the run needs deps."""
        if self.deps_type is not None:
            return {"deps": output_type_name(self.deps_type)}
        if deps is not None:
            return {"deps": output_type_name(type(deps))}
        return {}

    async def for_new(self, run_id: UUID, principal: str, given: Any) -> Any:
        """The deps of a new run's first drive: given, or made, or none (no ``deps_type``)."""
        if given is None and self.deps_type is not None:
            if self.factory is None:
                raise RunError(
                    "invalid",
                    f"this agent's runs need deps ({output_type_name(self.deps_type)}): give "
                    "run(..., deps=...), or the agent a deps_factory",
                )
            given = await self._make(run_id, principal)
        self.check(given)
        self.keep(run_id, given)
        return given

    async def for_run(self, started: RunStarted | None, run_id: UUID, given: Any) -> Any:
        """The deps of a later drive of a run (None when it needs none)."""
        if given is not None:
            self.check(given)
            self.keep(run_id, given)
            return given
        if started is None or started.deps is None:
            return None
        if run_id in self._kept:
            return self._kept[run_id]
        if self.factory is None:  # (check_resumable refuses it before a lease is taken)
            raise RunError("agent_mismatch", f"run {run_id} {self.missing(started)}")
        made = await self._make(run_id, started.principal)
        self.check(made)
        return made

    def refusal(self, started: RunStarted, run_id: UUID) -> str | None:
        """Why this agent cannot drive the run for lack of deps (None: it can)."""
        if started.deps is None or run_id in self._kept or self.factory is not None:
            return None
        return self.missing(started)

    @staticmethod
    def missing(started: RunStarted) -> str:
        return (
            f"needs deps ({started.deps}) and this agent has none for it: resume it with "
            "deps=..., or give the agent a deps_factory"
        )

    def keep(self, run_id: UUID, deps: Any) -> None:
        """Keep a run's deps in this process for its next drive (never recorded)."""
        if deps is None:
            return
        self._kept[run_id] = deps
        self._kept.move_to_end(run_id)
        while len(self._kept) > _KEPT:
            self._kept.popitem(last=False)

    async def _make(self, run_id: UUID, principal: str) -> Any:
        assert self.factory is not None
        made = self.factory(run_id, principal)
        if inspect.isawaitable(made):
            made = await made
        return made


def _check_declared(cap: Capability, deps_type: Any) -> None:
    """A capability that reads ``ctx.deps`` as a ``T`` needs an agent whose deps are a ``T``."""
    declared = cap.deps_type
    if declared is None or declared is type(None):
        return
    if deps_type is None:
        raise ConfigurationError(
            f"{cap.name} reads ctx.deps as {output_type_name(declared)}: give the agent "
            f"deps_type={getattr(declared, '__name__', declared)}"
        )
    if declared is deps_type or declared is Any:
        return
    if (
        isinstance(declared, type)
        and isinstance(deps_type, type)
        and issubclass(deps_type, declared)
    ):
        return
    raise ConfigurationError(
        f"{cap.name} reads ctx.deps as {output_type_name(declared)}, and the agent's deps_type "
        f"is {output_type_name(deps_type)}"
    )


def started_fields(
    outputs: OutputTypes, deps: Dependencies, spec: OutputSpec[Any] | None, given: Any
) -> dict[str, Any]:
    """What a new run's ``run_started`` records of its output type and deps (their names)."""
    return {**outputs.started_fields(spec), **deps.started_fields(given)}


async def typed_drive(
    outputs: OutputTypes,
    deps: Dependencies,
    store: Store,
    run: RunRecord,
    started: RunStarted | None,
    output_type: Any = None,
    given: Any = None,
) -> tuple[OutputSpec[Any] | None, Any]:
    """A leased run's output spec and deps for its drive. ``RunError`` — the lease released —
    when this agent cannot give them (``agent_mismatch``), or when a new message asks another
    output type (``invalid``)."""
    try:
        try:
            spec = outputs.of_run(started)
        except LookupError as exc:
            raise RunError("agent_mismatch", f"run {run.run_id} {exc}") from None
        if output_type is not None and (spec is None or spec.output_type is not output_type):
            raise RunError("invalid", "a run's output type is set when it starts; it cannot change")
        return spec, await deps.for_run(started, run.run_id, given)
    except BaseException:
        with suppress(Exception):
            await store.release(run.run_id, epoch=run.epoch)
        raise

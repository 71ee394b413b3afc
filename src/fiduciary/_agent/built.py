"""Private: what an agent builds of its frozen options, once.

The gates (the capabilities, with ``use_skill`` over the skills), the memory layer, the
context the model is sent, and the ``Runtime`` every drive of the agent is given. An agent
derived with ``with_options`` keeps the gates and the memory layer of the agent it comes from
when nothing they are made of changed (the memory layer's background writes stay one set that
``drain`` waits for).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from .._loop import Held, Limits, Runtime, Transcript
from ..context.config import context_config
from ..context.recall import MemoryLayer
from ..context.skills import Skill, skill_table, with_skills
from ..delegation import with_delegates
from ..deps import Dependencies
from ..gates import Gates
from ..guards import default_guards
from ..outputs import OutputTypes
from ..stores.base import PrincipalLocking
from .cancelling import Cancelling
from .decisions import Deciding
from .options import AgentOptions
from .runs import Runs, Shared

__all__ = ["Built", "Parts", "assemble", "build"]

# what the gates are made of, and the memory layer (compared once, when an agent is derived)
_GATES = (
    *("capabilities", "skills", "store", "policy", "guards", "authorize", "clock", "redactor"),
    *("authorize_timeout", "delegates"),
)
_DELEGATING = ("budget_usd", "max_turns")  # what the delegate capability reads of the options
_MEMORY = ("memory", "redactor", "recall_days", "clock")


@dataclass(frozen=True, slots=True)
class Built:
    options: AgentOptions
    skills: Mapping[str, Skill]
    gates: Gates
    memory: MemoryLayer | None
    runtime: Runtime
    outputs: OutputTypes  # the run's answer types (fiduciary.outputs)
    deps: Dependencies  # the application's dependencies for the runs (fiduciary.deps)
    owner: str  # the lease owner, shared with the agents derived from this one


@dataclass(frozen=True, slots=True)
class Parts:
    """What an ``Agent`` is made of: its options and what is built of them, the drives of its
    runs, its decisions and its cancels, and what it shares with agents derived from it."""

    built: Built
    runs: Runs
    deciding: Deciding
    cancelling: Cancelling
    shared: Shared


def assemble(options: AgentOptions, shared: Shared, previous: Built | None) -> Parts:
    """An agent's parts, built once (``previous``: the agent's it is derived from)."""
    built = build(options, shared, previous)
    runs = Runs(
        options,
        gates=built.gates,
        skills=built.skills,
        runtime=built.runtime,
        shared=shared,
        outputs=built.outputs,
        deps=built.deps,
    )
    deciding = Deciding(
        store=options.store,
        gates=built.gates,
        clock=options.clock,
        redactor=options.redactor,
        transcript=Transcript,
        signatures=options.signatures,
    )
    cancelling = Cancelling(
        store=options.store,
        clock=options.clock,
        redactor=options.redactor,
        owner=shared.owner,
        lease_seconds=options.lease_seconds,
        principal_lock=built.runtime.principal_lock,
        lease=runs.lease,
        replay=runs.replay,
        driver=runs.driver,
    )
    return Parts(built, runs, deciding, cancelling, shared)


def build(options: AgentOptions, shared: Shared, previous: Built | None = None) -> Built:
    """What ``options`` make; ``previous``: the agent's this one is derived from."""
    o = options
    if (
        previous is not None
        and _same(o, previous.options, _GATES)
        and (o.delegates is None or _same(o, previous.options, _DELEGATING))
    ):
        skills, gates = previous.skills, previous.gates
    else:
        skills = skill_table(o.skills)
        gates = Gates(
            with_skills(with_delegates(o.capabilities, o, o.delegates), skills),
            store=o.store,
            policy=o.policy,
            guards=default_guards() if o.guards is None else list(o.guards),
            authorize=o.authorize,
            clock=o.clock,
            redactor=o.redactor,
            authorize_timeout=o.authorize_timeout,
        )
    memory: MemoryLayer | None
    if previous is not None and _same(o, previous.options, _MEMORY):
        memory = previous.memory
    elif o.memory is None:
        memory = None
    else:
        memory = MemoryLayer(
            o.memory, o.redactor.redact_text, recall_days=o.recall_days, clock=o.clock
        )
    context = context_config(  # checked now, not at the first run
        o.model,
        window=o.context_window,
        compact_at=o.compact_at,
        summarizer=o.summarizer,
        domain=o.context,
        memory=memory,
        microcompact=o.microcompact,
        remember_replies=o.remember_replies,
        after_run=o.remember_after_run,
        skills=skills,
    )
    runtime = Runtime(
        model=o.model,
        gates=gates,
        store=o.store,
        clock=o.clock,
        redactor=o.redactor,
        limits=Limits(
            max_turns=o.max_turns,
            max_tool_calls=o.max_tool_calls,
            budget_usd=o.budget_usd,
            lease_seconds=o.lease_seconds,
        ),
        system=o.system,
        model_settings=o.model_settings,
        model_tier=o.model_tier,
        thinking_effort=o.thinking_effort,
        prices=o.prices,
        principal_lock=principal_lock(shared, o),
        context=context,
        tracer=o.tracer,
        text_guards=o.text_guards,
    )
    outputs = OutputTypes(o.output_type, retries=o.output_retries, names=gates.names)
    caps = [c for n in gates.names if (c := gates.get(n)) is not None]
    deps = Dependencies(o.deps_type, o.deps_factory, capabilities=caps)
    return Built(o, skills, gates, memory, runtime, outputs, deps, shared.owner)


def principal_lock(shared: Shared, options: AgentOptions) -> _PrincipalLock:
    """Writes of one principal run one at a time: in this process (the locks ``shared`` keeps),
    and across processes when the store's locks span them (``PrincipalLocking``)."""
    store = options.store
    return _PrincipalLock(shared, store if isinstance(store, PrincipalLocking) else None)


class _PrincipalLock:
    __slots__ = ("_locking", "_locks")

    def __init__(self, shared: Shared, locking: PrincipalLocking | None) -> None:
        self._locks = shared.locks
        self._locking = locking

    def __call__(self, actor_id: str) -> AbstractAsyncContextManager[Held]:
        lock = self._locks.get(actor_id)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[actor_id] = lock
        locking = self._locking
        return Held(lock, None if locking is None else locking.principal_lock(actor_id))


def _same(new: AgentOptions, old: AgentOptions, names: tuple[str, ...]) -> bool:
    return all(getattr(new, n) is getattr(old, n) for n in names)

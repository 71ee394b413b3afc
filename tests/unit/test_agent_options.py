"""An agent's options are frozen: read as attributes, changed only by ``with_options``, which
returns another agent sharing the rest (store, clock, gates, lease owner, principals' locks)."""

from __future__ import annotations

import dataclasses
import inspect
from decimal import Decimal

import pytest

from fiduciary import Agent, Policy
from fiduciary.agent import AgentOptions
from fiduciary.exceptions import ConfigurationError
from fiduciary.testing import ManualClock, Reply, Script, ScriptedModel, collect
from fiduciary.tracing import NO_TRACER

# the constructor's keywords are public API: they do not change with the options object
KEYWORDS = [
    "model",
    "capabilities",
    "store",
    "policy",
    "guards",
    "authorize",
    "system",
    "max_turns",
    "max_tool_calls",
    "clock",
    "redactor",
    "model_settings",
    "lease_seconds",
    "model_tier",
    "thinking_effort",
    "budget_usd",
    "prices",
    "authorize_timeout",
    "context",
    "memory",
    "remember_replies",
    "recall_days",
    "remember_after_run",
    "context_window",
    "compact_at",
    "summarizer",
    "microcompact",
    "skills",
    "output_type",
    "output_retries",
    "deps_type",
    "deps_factory",
    "text_guards",
    "delegates",
]


def agent() -> Agent:
    model = ScriptedModel([Script("hi", [Reply("hello")])])
    return Agent(model=model, capabilities=[], clock=ManualClock(), system="be brief")


def test_the_constructor_keeps_its_keywords_and_every_one_is_an_option() -> None:
    assert list(inspect.signature(Agent).parameters) == KEYWORDS
    fields = [f.name for f in dataclasses.fields(AgentOptions)]
    assert fields == [*KEYWORDS, "signatures", "tracer", "drives_replays"]


def test_options_are_read_as_attributes_and_assigning_one_names_with_options() -> None:
    made = agent()
    assert made.options.system == ("be brief",)
    assert made.system is made.options.system
    assert made.max_turns == 12
    with pytest.raises(AttributeError, match=r"agent\.with_options\(max_turns=\.\.\.\)"):
        made.max_turns = 2  # type: ignore[assignment]
    with pytest.raises(AttributeError, match=r"agent\.with_options\(signatures=\.\.\.\)"):
        made.signatures = None  # type: ignore[assignment]
    with pytest.raises(AttributeError, match=r"'gates' cannot be set.*with_options"):
        made.gates = made.gates  # type: ignore[assignment]
    with pytest.raises(AttributeError, match=r"'anything' cannot be set.*with_options"):
        made.anything = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.options.max_turns = 2  # type: ignore[misc]
    assert made.max_turns == 12


async def test_with_options_is_another_agent_sharing_the_rest() -> None:
    made = agent()
    other = made.with_options(max_turns=2, system="be kind", budget_usd="1.50")
    assert other is not made
    assert (other.max_turns, other.system, other.budget_usd) == (2, ("be kind",), Decimal("1.50"))
    assert (made.max_turns, made.system, made.budget_usd) == (12, ("be brief",), None)
    assert other.store is made.store
    assert other.clock is made.clock
    assert other.policy is made.policy
    assert other.gates is made.gates  # nothing the gates are made of changed
    assert other.owner == made.owner  # one process, one lease owner
    assert made.with_options(policy=Policy()).gates is not made.gates
    # the principals' write locks are one map: writes of alice by either wait for each other
    async with made.principal_lock("alice") as held:
        mine = other.principal_lock("alice")
        assert mine._lock is held._lock  # type: ignore[attr-defined]
        assert mine._lock.locked()  # type: ignore[attr-defined]
    # and what the other agent records is in the shared store
    events = await collect(other.run("hi", principal="alice"))
    assert (await made.get_run(events[0].run_id)).status == "completed"


def test_with_options_checks_what_it_is_given_as_the_constructor_does() -> None:
    made = agent()
    with pytest.raises(ConfigurationError, match="unknown agent options: max_turn"):
        made.with_options(max_turn=2)
    with pytest.raises(ConfigurationError, match="max_turns and max_tool_calls"):
        made.with_options(max_turns=0)
    with pytest.raises(ConfigurationError, match="budget_usd"):
        made.with_options(budget_usd="lots")
    with pytest.raises(ConfigurationError, match="remember_after_run needs a memory"):
        made.with_options(remember_after_run=lambda _: collect_nothing())
    assert made.with_options(tracer=NO_TRACER).tracer is NO_TRACER


async def collect_nothing() -> None:
    return None

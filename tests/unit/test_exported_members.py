"""The public API is exactly ``fiduciary.__all__``: adding or removing a name is a decision."""

from __future__ import annotations

import enum
import inspect
import re
from importlib import import_module
from importlib.metadata import version
from typing import Annotated, Literal, get_args, get_origin

import pytest

import fiduciary
import fiduciary.testing
from fiduciary.events import EventBase
from fiduciary.exceptions import FiduciaryError

What = Literal["class", "enum", "error", "event", "function", "protocol", "union", "version"]

# each public name: the module that defines it, and what it is
PUBLIC: dict[str, tuple[str, What]] = {
    "ActionResolved": ("fiduciary.events", "event"),
    "Agent": ("fiduciary.agent", "class"),
    "ApprovalError": ("fiduciary.exceptions", "error"),
    "AuthorizationRequest": ("fiduciary.gates", "class"),
    "CallContext": ("fiduciary.capabilities", "class"),
    "Capability": ("fiduciary.capabilities", "class"),
    "CapabilityError": ("fiduciary.exceptions", "error"),
    "Clock": ("fiduciary.clock", "protocol"),
    "ConfigurationError": ("fiduciary.exceptions", "error"),
    "DualControl": ("fiduciary.dual_control", "class"),
    "Event": ("fiduciary.events", "union"),
    "Executor": ("fiduciary.capabilities", "enum"),
    "FiduciaryError": ("fiduciary.exceptions", "error"),
    "Guard": ("fiduciary.guards", "protocol"),
    "GuardCall": ("fiduciary.guards", "class"),
    "GuardFired": ("fiduciary.events", "event"),
    "Kind": ("fiduciary.capabilities", "enum"),
    "ManualClock": ("fiduciary.clock", "class"),
    "MemoryStore": ("fiduciary.stores.memory", "class"),
    "Model": ("fiduciary.models.base", "protocol"),
    "ModelError": ("fiduciary.exceptions", "error"),
    "Operation": ("fiduciary.policy", "class"),
    "PendingAction": ("fiduciary.events", "event"),
    "PendingQuestion": ("fiduciary.questions", "class"),
    "Policy": ("fiduciary.policy", "class"),
    "Principal": ("fiduciary.capabilities", "class"),
    "Redactor": ("fiduciary.redaction", "class"),
    "Replay": ("fiduciary.capabilities", "enum"),
    "Risk": ("fiduciary.capabilities", "enum"),
    "RunCompleted": ("fiduciary.events", "event"),
    "RunError": ("fiduciary.exceptions", "error"),
    "RunFailed": ("fiduciary.events", "event"),
    "RunResult": ("fiduciary._sync", "class"),
    "RunStarted": ("fiduciary.events", "event"),
    "SQLiteStore": ("fiduciary.stores._sql.sqlite", "class"),
    "Step": ("fiduciary.steps", "class"),
    "StepsReport": ("fiduciary.steps", "class"),
    "Store": ("fiduciary.stores.base", "protocol"),
    "StoreError": ("fiduciary.exceptions", "error"),
    "StoreUnavailableError": ("fiduciary.exceptions", "error"),
    "SystemClock": ("fiduciary.clock", "class"),
    "TextDelta": ("fiduciary.events", "event"),
    "Threshold": ("fiduciary.policy", "class"),
    "ToolCallEnd": ("fiduciary.events", "event"),
    "ToolCallRejected": ("fiduciary.events", "event"),
    "ToolCallStart": ("fiduciary.events", "event"),
    "Verdict": ("fiduciary.guards", "class"),
    "__version__": ("fiduciary._version", "version"),
    "approve_sync": ("fiduciary._sync", "function"),
    "ask_person": ("fiduciary.questions", "function"),
    "call_sync": ("fiduciary._sync", "function"),
    "capability": ("fiduciary.capabilities", "function"),
    "decode_event": ("fiduciary.events", "function"),
    "deny_sync": ("fiduciary._sync", "function"),
    "encode_event": ("fiduciary.events", "function"),
    "encode_sse": ("fiduciary.events", "function"),
    "parse_sse": ("fiduciary._sse", "function"),  # re-exported by fiduciary.events
    "resume_sync": ("fiduciary._sync", "function"),
    "run_steps": ("fiduciary.steps", "function"),
    "run_sync": ("fiduciary._sync", "function"),
}


def test_all_is_pinned() -> None:
    assert fiduciary.__all__ == list(PUBLIC)


def test_all_is_sorted_without_duplicates() -> None:
    assert fiduciary.__all__ == sorted(fiduciary.__all__)
    assert len(set(fiduciary.__all__)) == len(fiduciary.__all__)


def is_a(obj: object, what: What) -> bool:
    """Whether ``obj`` is of the kind ``what`` (exactly one kind holds for each name)."""
    kinds = {
        "error": inspect.isclass(obj) and issubclass(obj, FiduciaryError),
        "event": inspect.isclass(obj) and issubclass(obj, EventBase),
        "protocol": inspect.isclass(obj) and bool(getattr(obj, "_is_protocol", False)),
        "enum": inspect.isclass(obj) and issubclass(obj, enum.Enum),
        "function": inspect.isfunction(obj),
        "union": get_origin(obj) is Annotated,
        "version": isinstance(obj, str),
    }
    kinds["class"] = inspect.isclass(obj) and not any(
        kinds[k] for k in ("error", "event", "protocol", "enum")
    )
    return [k for k, holds in kinds.items() if holds] == [what]


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_is_the_object_its_module_defines(name: str) -> None:
    obj = getattr(fiduciary, name)
    module, what = PUBLIC[name]
    assert is_a(obj, what), (name, what)
    if what == "version":
        assert re.fullmatch(r"\d+\.\d+\.\d+\S*", obj), obj
        return
    assert getattr(import_module(module), name) is obj  # the definition, not a copy or a shim
    if what != "union":
        assert (obj.__module__, obj.__name__) == (module, name)  # not an alias of another name
    if what == "event":  # named as its type: RunStarted is "run_started"
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
        assert obj.model_fields["type"].default == snake
    if what == "union":  # every event type, each once
        members = get_args(get_args(obj)[0])
        assert len(set(members)) == len(members)
        assert set(members) == set(EventBase.__subclasses__())


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from fiduciary import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(PUBLIC)


def test_version_matches_the_installed_distribution() -> None:
    assert fiduciary.__version__ == version("fiduciary")


def test_testing_names_resolve() -> None:
    assert fiduciary.testing.__all__
    assert fiduciary.testing.__all__ == sorted(fiduciary.testing.__all__)
    for name in fiduciary.testing.__all__:  # each a class or function of fiduciary's own
        obj = getattr(fiduciary.testing, name)
        assert inspect.isclass(obj) or inspect.isfunction(obj), name
        assert obj.__name__ == name
        assert obj.__module__.startswith("fiduciary."), name
    assert fiduciary.testing.MemoryStore is fiduciary.MemoryStore
    assert fiduciary.testing.ManualClock is fiduciary.ManualClock

"""The public API is exactly ``fiduciary.__all__``: adding or removing a name is a decision."""

from __future__ import annotations

from importlib.metadata import version

import pytest

import fiduciary
import fiduciary.testing

PUBLIC = [
    "ActionResolved",
    "Agent",
    "ApprovalError",
    "AuthorizationRequest",
    "CallContext",
    "Capability",
    "CapabilityError",
    "Clock",
    "ConfigurationError",
    "DualControl",
    "Event",
    "Executor",
    "FiduciaryError",
    "Guard",
    "GuardCall",
    "GuardFired",
    "Kind",
    "ManualClock",
    "MemoryStore",
    "Model",
    "ModelError",
    "Operation",
    "PendingAction",
    "Policy",
    "Principal",
    "Redactor",
    "Replay",
    "Risk",
    "RunCompleted",
    "RunError",
    "RunFailed",
    "RunResult",
    "RunStarted",
    "SQLiteStore",
    "Store",
    "StoreError",
    "StoreUnavailableError",
    "SystemClock",
    "TextDelta",
    "Threshold",
    "ToolCallEnd",
    "ToolCallRejected",
    "ToolCallStart",
    "Verdict",
    "__version__",
    "approve_sync",
    "call_sync",
    "capability",
    "decode_event",
    "deny_sync",
    "encode_event",
    "encode_sse",
    "parse_sse",
    "resume_sync",
    "run_sync",
]


def test_all_is_pinned() -> None:
    assert fiduciary.__all__ == PUBLIC


def test_all_is_sorted_without_duplicates() -> None:
    assert fiduciary.__all__ == sorted(fiduciary.__all__)
    assert len(set(fiduciary.__all__)) == len(fiduciary.__all__)


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(fiduciary, name) is not None


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from fiduciary import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(PUBLIC)


def test_version_matches_the_installed_distribution() -> None:
    assert fiduciary.__version__ == version("fiduciary")


def test_testing_names_resolve() -> None:
    assert fiduciary.testing.__all__
    assert fiduciary.testing.__all__ == sorted(fiduciary.testing.__all__)
    for name in fiduciary.testing.__all__:
        assert getattr(fiduciary.testing, name) is not None, name
    assert fiduciary.testing.MemoryStore is fiduciary.MemoryStore
    assert fiduciary.testing.ManualClock is fiduciary.ManualClock

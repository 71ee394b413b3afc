"""Fixtures for the model tests: fake keys, a retry policy that records its waits.

The provider tests need the provider SDKs (extras ``anthropic``, ``openai`` and ``gemini``);
without them those modules are not collected, and the rest still runs.
"""

from __future__ import annotations

from importlib.util import find_spec

import pytest

from fiduciary.models.retry import RetryPolicy

from .helpers import Sleeps

_NEEDS = {
    "test_anthropic.py": ("anthropic",),
    "test_openai.py": ("openai",),
    "test_openai_compatible.py": ("openai",),
    "test_gemini.py": ("google.genai",),
    "test_agent_over_wire.py": ("anthropic", "openai", "google.genai"),
    "test_registry.py": ("anthropic", "openai", "google.genai"),
}


def _missing(sdk: str) -> bool:
    try:
        return find_spec(sdk) is None
    except ModuleNotFoundError:  # the parent package (google) is not there either
        return True


collect_ignore = [module for module, sdks in _NEEDS.items() if any(_missing(s) for s in sdks)]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "live: calls a real provider (needs its key or binary; skipped otherwise)"
    )


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0000")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-test-0000")
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-gemini-test-0000")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    for name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def retry(sleeps: Sleeps) -> RetryPolicy:
    # jitter fixed at half the ceiling: waits are 0.5, 1.0, 2.0 ... unless retry-after says more
    return RetryPolicy(max_attempts=4, initial_delay=1.0, sleep=sleeps, jitter=lambda: 0.5)

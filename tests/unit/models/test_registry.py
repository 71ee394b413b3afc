"""Model strings, configuration from the environment, and the extras' import errors."""

from __future__ import annotations

import importlib
import sys

import pytest

from fiduciary.exceptions import ConfigurationError, ModelError
from fiduciary.models import StructuredModel
from fiduciary.models.anthropic import AnthropicModel
from fiduciary.models.cli_agents import ClaudeCLIModel
from fiduciary.models.codex_cli import CodexCLIModel
from fiduciary.models.openai import OpenAIModel
from fiduciary.models.registry import model_from_env, resolve_model
from fiduciary.models.scripted import ScriptedModel
from fiduciary.models.tiers import TieredModel
from fiduciary.testing import Reply, Script


def test_provider_strings() -> None:
    anthropic = resolve_model("anthropic:claude-sonnet-4-6", max_tokens=1000)
    assert isinstance(anthropic, AnthropicModel)
    assert anthropic.name == "anthropic:claude-sonnet-4-6"
    openai = resolve_model("openai:gpt-5.1")
    assert isinstance(openai, OpenAIModel)
    assert openai.api == "responses"
    chat = resolve_model("openai:gpt-4.1", api="chat")
    assert isinstance(chat, OpenAIModel)
    assert chat.api == "chat"
    assert isinstance(resolve_model("claude-cli:opus"), ClaudeCLIModel)
    assert isinstance(resolve_model("codex-cli:gpt-5.3-codex"), CodexCLIModel)
    scripted = resolve_model("scripted", scripts=[Script("hi", [Reply("hello")])])
    assert isinstance(scripted, ScriptedModel)


def test_auto_is_a_tiered_model_of_the_provider_s_defaults() -> None:
    model = resolve_model("anthropic:auto")
    assert isinstance(model, TieredModel)
    assert model.name == "anthropic:auto"
    assert {t: m.name for t, m in model.models.items()} == {
        "fast": "anthropic:claude-haiku-4-5",
        "standard": "anthropic:claude-sonnet-4-6",
        "powerful": "anthropic:claude-opus-4-6",
    }
    custom = resolve_model("openai:auto", tiers={"powerful": "gpt-5.4"})
    assert isinstance(custom, TieredModel)
    assert custom.models["powerful"].name == "openai:gpt-5.4"


def test_tiers_around_a_named_model() -> None:
    model = resolve_model(
        "openai:gpt-5.1", tiers={"fast": "gpt-5-mini", "powerful": "anthropic:claude-opus-4-6"}
    )
    assert isinstance(model, TieredModel)
    assert [m.name for m in model.models.values()] == [
        "openai:gpt-5-mini",
        "openai:gpt-5.1",
        "anthropic:claude-opus-4-6",
    ]
    with pytest.raises(ConfigurationError):
        resolve_model("openai:gpt-5.1", tiers={"huge": "x"})


@pytest.mark.parametrize(
    "name",
    [
        "gpt-5.1",
        "mystery:model",
        "anthropic:",
        "gemini:",
        "openai-compatible:qwen",
        "openai-compatible:q@ftp://x",
    ],
)
def test_bad_strings(name: str) -> None:
    with pytest.raises(ConfigurationError):
        resolve_model(name)


def test_from_the_environment() -> None:
    assert isinstance(model_from_env({}), ScriptedModel)
    model = model_from_env(
        {"FIDUCIARY_MODEL": "openai-compatible:llama3.2@http://localhost:1234/v1"}
    )
    assert isinstance(model, OpenAIModel)
    assert model.base_url == "http://localhost:1234/v1"


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "fiduciary.models.anthropic")
    with pytest.raises(ImportError, match=r"pip install 'fiduciary\[anthropic\]'"):
        resolve_model("anthropic:claude-sonnet-4-6")
    with pytest.raises(ImportError, match=r"fiduciary\[anthropic\]"):
        importlib.import_module("fiduciary.models.anthropic")
    monkeypatch.setitem(sys.modules, "openai", None)
    monkeypatch.delitem(sys.modules, "fiduciary.models.openai")
    with pytest.raises(ImportError, match=r"pip install 'fiduciary\[openai\]'"):
        resolve_model("openai-compatible:qwen@http://127.0.0.1:11434/v1")
    monkeypatch.setitem(sys.modules, "google.genai", None)
    monkeypatch.delitem(sys.modules, "fiduciary.models.gemini", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'fiduciary\[gemini\]'"):
        resolve_model("gemini:gemini-2.5-flash")


def test_every_model_answers_json() -> None:
    for name in (
        "anthropic:claude-haiku-4-5",
        "openai:gpt-5-mini",
        "gemini:gemini-2.5-flash-lite",
        "claude-cli:haiku",
        "scripted",
    ):
        assert isinstance(resolve_model(name), StructuredModel), name


async def test_the_scripted_model_answers_scripted_json() -> None:
    model = ScriptedModel([], json_answer={"route": "act", "p": 0.9})
    assert await model.complete_json("s", "p", {}) == {"route": "act", "p": 0.9}
    computed = ScriptedModel([], json_answer=lambda system, prompt, schema: {"echo": prompt})
    assert await computed.complete_json("s", "hello", {}) == {"echo": "hello"}
    with pytest.raises(ModelError):
        await ScriptedModel([]).complete_json("s", "p", {})

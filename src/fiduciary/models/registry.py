"""Model strings → models: ``resolve_model("anthropic:claude-sonnet-4-5")``.

=========================================  ===================================================
``anthropic:MODEL``                        the Messages API (extra ``anthropic``)
``openai:MODEL``                           the Responses API (``api="chat"`` for Chat
                                           Completions; extra ``openai``)
``openai-compatible:MODEL@URL``            any OpenAI-compatible server by base URL: Ollama,
                                           vLLM, llama.cpp server, LM Studio (extra ``openai``)
``gemini:MODEL``                           the Gemini API (extra ``gemini``)
``claude-cli:MODEL``, ``codex-cli:MODEL``  the CLI agents, where the binary exists
``PROVIDER:auto``                          a ``TieredModel`` with the provider's default model
                                           per tier (fast / standard / powerful)
``scripted``                               a ``ScriptedModel`` (``scripts=[...]``)
=========================================  ===================================================

Provider modules are imported only when named, so a missing SDK is reported (with the extra to
install) only to whoever asks for it. ``model_from_env`` reads ``FIDUCIARY_MODEL``.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..exceptions import ConfigurationError
from .base import Model
from .tiers import DEFAULT_TIERS, TIERS, TieredModel

__all__ = ["DEFAULT_MODEL", "PROVIDERS", "model_from_env", "resolve_model"]

DEFAULT_MODEL = "scripted"
PROVIDERS = (
    "anthropic",
    "openai",
    "openai-compatible",
    "gemini",
    "claude-cli",
    "codex-cli",
    "scripted",
)

_EXTRAS = {
    "anthropic": "anthropic",
    "openai": "openai",
    "openai-compatible": "openai",
    "gemini": "gemini",
}
_COMPATIBLE = re.compile(r"^(?P<model>.+?)@(?P<url>https?://\S+)$")


def _module(name: str, provider: str) -> Any:
    try:
        return importlib.import_module(f"fiduciary.models.{name}")
    except ImportError as exc:
        extra = _EXTRAS.get(provider)
        if extra is None:
            raise
        raise ImportError(
            f"the {provider!r} models need an extra: pip install 'fiduciary[{extra}]'"
        ) from exc


def resolve_model(name: str, **options: Any) -> Model:
    """The model a string names; ``options`` go to the provider's constructor.

    ``tiers={"fast": "...", "powerful": "..."}`` wraps the named model (the standard tier) in a
    ``TieredModel`` with those models for the other tiers.
    """
    name = name.strip()
    tiers: Mapping[str, str] | None = options.pop("tiers", None)
    provider, sep, rest = name.partition(":")
    if provider == "scripted":
        from .scripted import ScriptedModel

        return ScriptedModel(options.pop("scripts", []), **options)
    if not sep or not rest:
        raise ConfigurationError(
            f"a model string is PROVIDER:MODEL (or 'scripted'); got {name!r}. "
            f"Providers: {', '.join(PROVIDERS)}"
        )
    if provider not in PROVIDERS:
        raise ConfigurationError(
            f"unknown model provider {provider!r}; use one of {', '.join(PROVIDERS)}"
        )
    if rest == "auto":
        defaults = DEFAULT_TIERS.get(provider)
        if defaults is None:
            raise ConfigurationError(f"{provider} has no default tiers; name a model")
        chosen: dict[str, str] = {str(tier): model for tier, model in defaults.items()}
        chosen.update(tiers or {})
        models = {t: _one(provider, chosen[t], dict(options)) for t in TIERS}
        return TieredModel(
            fast=models["fast"],
            standard=models["standard"],
            powerful=models["powerful"],
            name=name,
        )
    standard = _one(provider, rest, dict(options))
    if not tiers:
        return standard
    unknown = set(tiers) - set(TIERS)
    if unknown:
        raise ConfigurationError(f"unknown tiers {sorted(unknown)}; use {TIERS}")

    def tier_model(tier: str) -> Model:
        model = tiers.get(tier)
        if model is None:
            return standard
        named, sep, _ = model.partition(":")
        if sep and named in PROVIDERS:
            return resolve_model(model, **options)
        return _one(provider, model, dict(options))

    return TieredModel(
        fast=tier_model("fast"),
        standard=standard,
        powerful=tier_model("powerful"),
        name=f"{name}+tiers",
    )


def _one(provider: str, model: str, options: dict[str, Any]) -> Model:
    factory: Callable[..., Model]
    if provider == "anthropic":
        factory = _module("anthropic", provider).AnthropicModel
        return factory(model, **options)
    if provider == "openai":
        factory = _module("openai", provider).OpenAIModel
        return factory(model, **options)
    if provider == "openai-compatible":
        match = _COMPATIBLE.match(model)
        if match is None:
            raise ConfigurationError(
                "an OpenAI-compatible model is openai-compatible:MODEL@URL, for example "
                "openai-compatible:qwen2.5:7b@http://127.0.0.1:11434/v1"
            )
        factory = _module("openai", provider).openai_compatible
        return factory(match["model"], match["url"], **options)
    if provider == "gemini":
        factory = _module("gemini", provider).GeminiModel
        return factory(model, **options)
    if provider == "claude-cli":
        factory = _module("cli_agents", provider).ClaudeCLIModel
        return factory(model, **options)
    if provider == "codex-cli":
        factory = _module("codex_cli", provider).CodexCLIModel
        return factory(model, **options)
    raise ConfigurationError(f"unknown model provider {provider!r}")  # pragma: no cover


def model_from_env(env: Mapping[str, str] | None = None, **options: Any) -> Model:
    """The model ``FIDUCIARY_MODEL`` names (``scripted`` when unset). Keys are not read here:
    each provider reads its own variable (``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``,
    ``GEMINI_API_KEY``) at request time."""
    source = os.environ if env is None else env
    return resolve_model(source.get("FIDUCIARY_MODEL", DEFAULT_MODEL) or DEFAULT_MODEL, **options)

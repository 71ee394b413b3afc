"""Models: the ``Model`` seam and its implementations.

Provider models (``anthropic``, ``openai``, ``gemini``, ``cli_agents``, ``codex_cli``) are
imported only when used: name them with ``resolve_model("anthropic:claude-sonnet-4-5")``.
"""

from .base import Model, ModelEvent, ModelRequest, StructuredModel
from .fallback import FallbackModel
from .pricing import Price, PriceTable
from .registry import model_from_env, resolve_model
from .retry import RetryPolicy
from .scripted import ScriptedModel
from .tiers import TieredModel, choose_effort, choose_tier

__all__ = [
    "FallbackModel",
    "Model",
    "ModelEvent",
    "ModelRequest",
    "Price",
    "PriceTable",
    "RetryPolicy",
    "ScriptedModel",
    "StructuredModel",
    "TieredModel",
    "choose_effort",
    "choose_tier",
    "model_from_env",
    "resolve_model",
]

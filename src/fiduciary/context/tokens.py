"""How big a request is, without a tokenizer.

No tokenizer can be downloaded where fiduciary runs offline, and the providers' tokenizers differ.
So a request is measured the way a running conversation grows: the provider's own count of the
previous request (``input_tokens`` + cache reads + cache writes of its ``usage`` event) is the
base, and only the difference between the new request and the previous one is estimated, at four
characters a token (``estimate_input_tokens``). The estimate's error is therefore the error on
what was added since the last call — one user message, one turn's tool results — not on the whole
conversation; a first request, or one after a restart before any usage was recorded, is estimated
whole.

The context window of a model comes from ``windows.json`` beside ``prices.json`` (looked up the
same way), else from ``Agent(context_window=...)``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from ..models.base import ModelRequest
from ..models.pricing import estimate_input_tokens

__all__ = ["LastRequest", "context_window", "measure_request", "measured"]

_DATE_SUFFIX = re.compile(r"-\d{8}$")


@cache
def _windows() -> dict[str, dict[str, int]]:
    text = resources.files("fiduciary.models").joinpath("windows.json").read_text("utf-8")
    models: dict[str, dict[str, int]] = json.loads(text)["models"]
    return models


def context_window(model: str) -> int | None:
    """The context window of a model string (``anthropic:claude-sonnet-4-5``), or None."""
    provider, sep, name = model.partition(":")
    if not sep:
        return None
    if provider == "openai-compatible":
        return None  # a local server's window is the server's setting: say it with context_window
    table = _windows().get(provider, {})
    for candidate in (name, _DATE_SUFFIX.sub("", name)):
        if candidate in table:
            return table[candidate]
    return table.get("*")


@dataclass(frozen=True, slots=True)
class LastRequest:
    """The previous request of a run: what the provider counted, and what it was estimated at."""

    reported_tokens: int
    estimated_tokens: int


def measure_request(request: ModelRequest, last: LastRequest | None = None) -> int:
    """The tokens of ``request``: the provider's count of the last one, plus the estimated growth.

    A shrink (after compaction) is estimated the same way, as a negative growth.
    """
    return measured(estimate_input_tokens(request), last)


def measured(estimate: int, last: LastRequest | None = None) -> int:
    """``measure_request`` of a request whose ``estimate_input_tokens`` is ``estimate``."""
    if last is None or last.reported_tokens <= 0:
        return estimate
    return max(1, last.reported_tokens + estimate - last.estimated_tokens)

"""A provider model's connection pool: the one it was given is the caller's and stays open; the
one it opened itself is closed by ``aclose`` (and opened anew by the next request)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from fiduciary.exceptions import ModelError
from fiduciary.models.anthropic import AnthropicModel
from fiduciary.models.gemini import GeminiModel
from fiduciary.models.openai import OpenAIModel
from fiduciary.models.retry import RetryPolicy

from .wire import Reply, Wire

Provider = Callable[..., OpenAIModel | AnthropicModel | GeminiModel]

_REFUSED = {
    "error": {
        "code": 400,
        "type": "invalid_request_error",
        "status": "INVALID_ARGUMENT",
        "message": "no",
    }
}
_PROVIDERS: dict[str, Provider] = {
    "openai": lambda **kw: OpenAIModel("gpt-5.1", **kw),
    "anthropic": lambda **kw: AnthropicModel("claude-sonnet-4-6", **kw),
    "gemini": lambda **kw: GeminiModel("gemini-2.5-flash", **kw),
}


async def _refused_request(model: OpenAIModel | AnthropicModel | GeminiModel) -> None:
    with pytest.raises(ModelError) as caught:
        await model.complete_json("system", "prompt", {"type": "object"})
    assert caught.value.code == "bad_request"


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize("provider", _PROVIDERS.values(), ids=_PROVIDERS.keys())
async def test_a_given_pool_stays_open(provider: Provider) -> None:
    wire = Wire(Reply.json(_REFUSED, status=400))
    client = wire.client()
    model = provider(http_client=client, retry=RetryPolicy(max_attempts=1))
    await _refused_request(model)
    await model.aclose()
    assert not client.is_closed
    assert len(wire.seen) == 1
    await client.aclose()


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize("sdk", [openai, anthropic], ids=["openai", "anthropic"])
async def test_a_pool_the_model_opened_is_closed_by_aclose(
    sdk: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = Wire(Reply.json(_REFUSED, status=400), Reply.json(_REFUSED, status=400))
    opened = []

    def open_pool() -> Any:
        opened.append(wire.client())
        return opened[-1]

    monkeypatch.setattr(sdk, "DefaultAsyncHttpxClient", open_pool)
    model = _PROVIDERS[sdk.__name__](retry=RetryPolicy(max_attempts=1))
    await _refused_request(model)
    await model.aclose()
    assert len(opened) == 1
    assert opened[0].is_closed
    await model.aclose()  # twice is harmless
    await _refused_request(model)  # a new pool for the next request
    assert len(opened) == 2
    assert not opened[1].is_closed
    await model.aclose()
    assert opened[1].is_closed

"""``FallbackModel``: the next model answers when one is overloaded, rate limited or down.

``FallbackModel([primary, secondary, ...])`` asks its models in order. A model that fails
with a ``ModelError`` that ``fallback_on`` accepts (by default a retryable one: overloaded,
rate limited, a server error, a timeout, a cut connection) *before it streamed anything* is
passed over and the next is asked; a ``StreamFallback`` event says so, and the loop records it
on the turn (``turn_complete.model`` answered, ``turn_complete.fallbacks`` failed). A model that
fails after it streamed something is never replaced: the error is the turn's (the rule of
``retry.py``: what a turn streamed may already be in the log, and a streamed tool call may
already be running). When every model failed, the last error is raised, naming them all.

Each model keeps its own retry policy: a provider model retries (with backoff) before its
error reaches the fallback. Give the primary ``retry=RetryPolicy(max_attempts=1)`` to fall
back at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import Any

from ..exceptions import ConfigurationError, ModelError
from .base import Model, ModelEvent, ModelRequest, StreamFallback, StreamUsage, StructuredModel

__all__ = ["FallbackModel", "falls_back"]


def falls_back(error: ModelError) -> bool:
    """The default rule: a retryable error (overload, rate limit, outage) passes to the next."""
    return error.retryable


class FallbackModel:
    """Models asked in order: the first that answers does (see the module's docstring)."""

    def __init__(
        self,
        models: Sequence[Model],
        *,
        name: str | None = None,
        fallback_on: Callable[[ModelError], bool] = falls_back,
    ) -> None:
        self.models: tuple[Model, ...] = tuple(models)
        if len(self.models) < 2:
            raise ConfigurationError("a FallbackModel needs at least two models")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"a FallbackModel's models need distinct names: {names}")
        self._name = name or "fallback:" + ",".join(names)
        self._fallback_on = fallback_on

    @property
    def name(self) -> str:
        return self._name

    def model_for(self, request: ModelRequest) -> Model:
        """The model a request goes to first (a turn's budget is estimated at its price)."""
        route = getattr(self.models[0], "model_for", None)
        first: Model = route(request) if callable(route) else self.models[0]
        return first

    def model_named(self, name: str) -> Model | None:
        """One of the models, by name (the loop prices a turn at the price of who answered)."""
        return next((m for m in self.models if m.name == name), None)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        last = len(self.models) - 1
        failures: list[str] = []
        for index, model in enumerate(self.models):
            yielded = False
            try:
                async with contextlib.aclosing(_events(model, request)) as events:
                    async for event in events:
                        yielded = True
                        if isinstance(event, StreamUsage) and event.model is None:
                            event = replace(event, model=model.name)
                        yield event
                return
            except ModelError as exc:
                if yielded or index == last or not self._fallback_on(exc):
                    if failures:
                        raise ModelError(
                            f"{exc.message} (after {'; '.join(failures)})",
                            code=exc.code,
                            retryable=exc.retryable,
                            retry_after=exc.retry_after,
                            status=exc.status,
                        ) from exc
                    raise
                failures.append(f"{model.name}: {exc.code}")
                yield StreamFallback(
                    model=model.name, reason=exc.code, next=self.models[index + 1].name
                )

    async def complete_json(self, system: str, prompt: str, schema: dict[str, Any]) -> Any:
        """The first structured answer among the models that can give one."""
        able = [m for m in self.models if isinstance(m, StructuredModel)]
        if not able:
            raise ModelError(
                f"{self.name}: none of its models answers with JSON", code="bad_request"
            )
        for model in able[:-1]:
            try:
                return await model.complete_json(system, prompt, schema)
            except ModelError as exc:
                if not self._fallback_on(exc):
                    raise
        return await able[-1].complete_json(system, prompt, schema)


async def _events(model: Model, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
    async for event in model.stream(request):
        yield event

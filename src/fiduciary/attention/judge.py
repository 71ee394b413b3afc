"""``llm_judge``: a judge over any model that answers in JSON matching a schema.

A judge reads a ``JudgeInput`` (the routes on offer, a window of events, predicate questions)
and answers a ``Judgment``: the route it chooses, a probability per route and a probability of
yes per predicate. It asks through ``StructuredModel.complete_json`` (every provider) or through
a plain ``complete`` callable that receives a ``CompleteRequest`` (for images, or an SDK call of
your own).

Rules:
- The schema has no numeric bounds (Anthropic's structured outputs reject them): the 0..1 range
  is stated in the system prompt. Every object is closed and requires all of its properties;
  ``predicates`` is left out when none are asked.
- Only the route is load-bearing. A route outside the offer (or an answer that is not an object)
  is asked again with backoff; probabilities and predicates keep the finite numbers found under
  known keys and drop the rest without asking again, and probabilities are renormalised.
- A refusal, and any model error that says asking again will not help, is a ``PermanentError``.
- With ``context_tokens`` the judge has a budget: ``reserved_tokens`` is measured from the system
  prompt with every route plus the schema, the window is trimmed to the rest, and a rejection
  that names the context length is asked again exactly once with the window halved; when
  halving cannot change the prompt (only acts and flushes remain), it is a ``PermanentError`` at
  once.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..exceptions import ConfigurationError, ModelError
from ..models.base import StreamUsage, StructuredModel
from ..models.pricing import cost_usd, price_of
from .types import (
    DEFAULT_CRITERIA,
    DEFAULT_ROUTES,
    AttentionError,
    JudgeImage,
    JudgeInput,
    Judgment,
    PermanentError,
)
from .window import halve, is_context_length_error, render_input, tokens_of, trim_to

__all__ = [
    "DEFAULT_SYSTEM",
    "Complete",
    "CompleteRequest",
    "Judge",
    "JudgeAnswerError",
    "JudgeBudget",
    "LlmJudge",
    "judgment_schema",
    "llm_judge",
    "parse_reply",
    "system_prompt",
    "user_content",
]

DEFAULT_SYSTEM = (
    "You watch events on behalf of a person whose money and accounts an agent manages. "
    "Decide which route the events below deserve. The window lists events oldest first; "
    "acts are what the agent or the person already did, consequences followed from them, "
    "context is the world moving on its own, and flushes mark where the window was judged before."
)

ANSWER_WITH_PREDICATES = (
    "Reply with the route you pick, for every route on offer the probability between 0 and 1 "
    "that it is the right one, and for every question under predicates the probability between "
    "0 and 1 that its answer is yes."
)
ANSWER = (
    "Reply with the route you pick and, for every route on offer, the probability between 0 and "
    "1 that it is the right one."
)

Sleep = Callable[[float], Awaitable[None]]


class JudgeAnswerError(AttentionError):
    """The model's answer named no route on offer (asked again with backoff)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompleteRequest:
    """One structured-output call. Place ``images`` after ``prompt`` (``user_content``)."""

    system: str
    prompt: str
    images: tuple[JudgeImage, ...]
    schema: dict[str, Any]


Complete = Callable[[CompleteRequest], Awaitable[Any]]
"""Resolves with the parsed JSON answer; raises ``PermanentError`` on a refusal."""


@dataclass(frozen=True, slots=True)
class JudgeBudget:
    context_tokens: int
    reserved_tokens: int

    @property
    def window_tokens(self) -> int:
        return self.context_tokens - self.reserved_tokens


class Judge(Protocol):
    """The seam: anything that turns a ``JudgeInput`` into a ``Judgment``."""

    @property
    def name(self) -> str: ...

    async def __call__(self, judge_input: JudgeInput) -> Judgment: ...


def system_prompt(base: str, routes: Sequence[tuple[str, str]], asks_predicates: bool) -> str:
    """Base, the routes on offer with one criterion line each, then the answer sentence."""
    lines = [base, "", "Routes on offer:", *(f"- {r}: {c}" for r, c in routes), ""]
    lines.append(ANSWER_WITH_PREDICATES if asks_predicates else ANSWER)
    return "\n".join(lines)


def _numbers(keys: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": "number"} for k in keys},
        "required": list(keys),
        "additionalProperties": False,
    }


def judgment_schema(routes: Sequence[str], predicates: Sequence[str]) -> dict[str, Any]:
    """The JSON schema of an answer (strict-mode safe, no numeric bounds)."""
    properties: dict[str, Any] = {
        "route": {"type": "string", "enum": list(routes)},
        "probabilities": _numbers(routes),
    }
    if predicates:
        properties["predicates"] = _numbers(predicates)
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _numbers_at(value: object, keys: Sequence[str], *, top: float) -> dict[str, float]:
    """The finite numbers under ``keys``, held to [0, top]."""
    if not isinstance(value, Mapping):
        return {}
    out: dict[str, float] = {}
    for key in keys:
        number = _finite(value.get(key))
        if number is not None:
            out[key] = min(top, max(0.0, number))
    return out


def parse_reply(
    reply: object, routes: Sequence[str], predicates: Sequence[str]
) -> tuple[str, dict[str, float], dict[str, float]]:
    """(route, probabilities renormalised, predicates) from a model's answer."""
    if not isinstance(reply, Mapping):
        kind = "null" if reply is None else type(reply).__name__
        raise JudgeAnswerError(f"the judge expected a JSON object, got {kind}")
    route = reply.get("route")
    if not isinstance(route, str) or route not in routes:
        raise JudgeAnswerError(
            f"the judge answered route {json.dumps(route, default=str)}, "
            f"which is not one of {', '.join(routes)}"
        )
    probabilities = _numbers_at(reply.get("probabilities"), routes, top=math.inf)
    total = sum(probabilities.values())
    probabilities = {k: v / total for k, v in probabilities.items()} if total > 0 else {}
    return route, probabilities, _numbers_at(reply.get("predicates"), predicates, top=1.0)


def user_content(request: CompleteRequest, *, style: str = "anthropic") -> list[dict[str, Any]]:
    """The user message's content blocks for a vendor SDK: the prompt, then the images.

    ``style``: ``anthropic`` (Messages API) or ``openai`` (Responses API).
    """
    if style == "anthropic":
        return [
            {"type": "text", "text": request.prompt},
            *(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": i.mime_type, "data": i.data},
                }
                for i in request.images
            ),
        ]
    if style == "openai":
        return [
            {"type": "input_text", "text": request.prompt},
            *(
                {"type": "input_image", "image_url": f"data:{i.mime_type};base64,{i.data}"}
                for i in request.images
            ),
        ]
    raise ValueError(f"unknown style {style!r}: anthropic or openai")


class LlmJudge:
    """A judge asking a model (see the module docstring); build it with ``llm_judge``."""

    def __init__(
        self,
        complete: Complete,
        *,
        name: str,
        price_source: object,
        system: str,
        criteria: Mapping[str, str],
        context_tokens: int | None,
        render: Callable[[JudgeInput], str] | None,
        attempts: int,
        backoff: float,
        sleep: Sleep,
        jitter: Callable[[], float],
    ) -> None:
        self._complete = complete
        self._name = name
        self._price_source = price_source
        self._system = system
        self._criteria = {**DEFAULT_CRITERIA, **criteria}
        self._render = render or render_input
        self._attempts = max(1, attempts)
        self._backoff = backoff
        self._sleep = sleep
        self._jitter = jitter
        every = list(dict.fromkeys([*DEFAULT_ROUTES, *criteria]))
        reserved = tokens_of(
            system_prompt(system, [(r, self._criteria[r]) for r in every], True)
            + json.dumps(judgment_schema(every, []))
        )
        self.reserved_tokens = reserved
        self.budget: JudgeBudget | None = None
        if context_tokens is not None:
            if not context_tokens > reserved:
                raise ConfigurationError(
                    f"llm_judge: context_tokens is {context_tokens}, but the judge's own prompt "
                    f"(system prompt with every route, plus the schema) takes {reserved} "
                    "reserved_tokens; context_tokens must be more than that"
                )
            self.budget = JudgeBudget(context_tokens, reserved)

    @property
    def name(self) -> str:
        return self._name

    def _routes(self, judge_input: JudgeInput) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for offer in judge_input.routes:
            criterion = offer.criterion or self._criteria.get(offer.route)
            if criterion is None:
                raise PermanentError(f"the judge has no criterion for route {offer.route!r}")
            out.append((offer.route, criterion))
        if not out:
            raise PermanentError("the judge was offered no route")
        return out

    async def __call__(self, judge_input: JudgeInput) -> Judgment:
        routes = self._routes(judge_input)
        offered = [r for r, _ in routes]
        asked = [p.name for p in judge_input.predicates]
        if self.budget is not None:
            judge_input = trim_to(judge_input, self.budget.window_tokens)
        system = system_prompt(self._system, routes, bool(asked))
        schema = judgment_schema(offered, asked)
        attempt = 0
        while True:
            attempt += 1
            try:
                reply, prompt = await self._send_halving(judge_input, system, schema)
                route, probabilities, predicates = parse_reply(reply, offered, asked)
            except PermanentError:
                raise
            except Exception as exc:
                if attempt >= self._attempts:
                    raise
                if isinstance(exc, ModelError) and not exc.retryable:
                    raise
                await self._sleep(self._backoff * (2 ** (attempt - 1)) * self._jitter())
                continue
            prompt_tokens = tokens_of(system + prompt)
            usage = StreamUsage(
                input_tokens=prompt_tokens,
                output_tokens=tokens_of(json.dumps(reply, default=str)),
            )
            return Judgment(
                route=route,
                probabilities=probabilities,
                predicates=predicates,
                model=self._name,
                prompt_tokens=prompt_tokens,
                cost_usd=cost_usd(price_of(self._price_source, self._name), usage),
            )

    async def _send_halving(
        self, judge_input: JudgeInput, system: str, schema: dict[str, Any]
    ) -> tuple[Any, str]:
        halved = False
        while True:
            prompt = self._render(judge_input)
            request = CompleteRequest(
                system=system, prompt=prompt, images=judge_input.images, schema=schema
            )
            try:
                return await self._complete(request), prompt
            except PermanentError:
                raise
            except Exception as exc:
                if not is_context_length_error(exc):
                    if isinstance(exc, ModelError) and exc.code == "refused":
                        raise PermanentError(f"the judge refused: {exc.message}") from exc
                    if isinstance(exc, ModelError) and not exc.retryable:
                        raise PermanentError(f"the judge failed: {exc.message}") from exc
                    raise
                if halved:
                    raise PermanentError(
                        f"the judge's prompt does not fit the model's context, even with the "
                        f"window halved: {exc}"
                    ) from exc
                smaller = halve(judge_input)
                if self._render(smaller) == prompt:
                    # asking again would send the very same prompt: it cannot fit
                    raise PermanentError(
                        f"the judge's prompt ({len(prompt)} characters) does not fit the "
                        "model's context and cannot shrink: only acts and flushes remain in its "
                        f"window: {exc}"
                    ) from exc
                halved = True
                judge_input = smaller


def llm_judge(
    model: StructuredModel | Complete,
    *,
    system: str = DEFAULT_SYSTEM,
    criteria: Mapping[str, str] | None = None,
    context_tokens: int | None = None,
    render: Callable[[JudgeInput], str] | None = None,
    name: str | None = None,
    attempts: int = 3,
    backoff: float = 1.0,
    sleep: Sleep = asyncio.sleep,
    jitter: Callable[[], float] = random.random,
) -> LlmJudge:
    """A judge asking ``model`` (a ``StructuredModel``) or a ``complete`` callable.

    ``criteria`` adds or replaces route criteria (a criterion on the input wins, the defaults
    fill the rest); ``context_tokens`` declares the model's context window and so a budget;
    ``render`` builds the user prompt from the (trimmed) input. An answer naming no route on
    offer is asked again up to ``attempts`` times, waiting ``backoff * 2**n * jitter()``
    seconds (``sleep`` and ``jitter`` are injectable).
    """
    if isinstance(model, StructuredModel):
        structured = model

        async def complete(request: CompleteRequest) -> Any:
            if request.images:
                raise PermanentError(
                    f"{structured.name}: complete_json takes no images; pass a complete "
                    "callable that places them after the prompt"
                )
            return await structured.complete_json(request.system, request.prompt, request.schema)

        return LlmJudge(
            complete,
            name=name or structured.name,
            price_source=structured,
            system=system,
            criteria=criteria or {},
            context_tokens=context_tokens,
            render=render,
            attempts=attempts,
            backoff=backoff,
            sleep=sleep,
            jitter=jitter,
        )
    return LlmJudge(
        model,
        name=name or str(getattr(model, "__name__", "complete")),
        price_source=None,
        system=system,
        criteria=criteria or {},
        context_tokens=context_tokens,
        render=render,
        attempts=attempts,
        backoff=backoff,
        sleep=sleep,
        jitter=jitter,
    )

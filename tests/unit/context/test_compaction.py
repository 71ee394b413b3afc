"""Compaction: cheapest step first, a summary when needed, dropping when the summariser fails."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from fiduciary.context import CompactionPolicy, Shape, compact, context_window, shaped
from fiduciary.context.compaction import render_for_summary
from fiduciary.context.tokens import LastRequest, measure_request
from fiduciary.models.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    TextPart,
    ThinkingPart,
    ToolResult,
    ToolResultsMessage,
    ToolUsePart,
    UserTextMessage,
)
from fiduciary.models.pricing import estimate_input_tokens, tokens_of_chars

CANARY = "sk-canary-0123456789"


def exchange(n: int, size: int) -> list[Message]:
    """A user message, a thinking turn calling balance, its result, a text answer."""
    return [
        UserTextMessage(f"question {n}"),
        AssistantMessage(
            (ThinkingPart("hmm", signature=f"sig-{n}"), ToolUsePart(f"c{n}", "balance", {"n": n}))
        ),
        ToolResultsMessage((ToolResult(f"c{n}", "r" * size),)),
        AssistantMessage((TextPart(f"answer {n}"),)),
    ]


def conversation(exchanges: int, size: int) -> list[Message]:
    return [m for n in range(exchanges) for m in exchange(n, size)]


def measure(messages: Sequence[Message]) -> int:
    return estimate_input_tokens(ModelRequest(system=("sys",), messages=tuple(messages), tools=()))


def tokens(chars: int) -> int:
    """``measure`` for ``compact``: of a request carrying messages of ``chars`` characters."""
    return tokens_of_chars(len("sys") + chars)


def reads(name: str) -> bool:
    return name == "balance"


def redact(text: str) -> str:
    return text.replace(CANARY, "[REDACTED]")


async def test_stubbing_old_results_is_enough_when_the_results_are_the_bulk() -> None:
    messages = conversation(10, 4_000)  # ~10,000 tokens, nearly all in tool results
    policy = CompactionPolicy(window=10_000)
    assert measure(messages) > policy.threshold

    async def never(text: str) -> str:
        raise AssertionError("the summariser is not needed")

    shape, method = await compact(
        messages,
        Shape(),
        policy,
        measure=tokens,
        dedupable=reads,
        summarize=never,
        redact=redact,
    )
    assert method == "stub"
    assert shape.kept_from == 0
    assert shape.stubbed_before == 32  # the last two exchanges keep their results
    assert measure(shaped(messages, shape, reads)) <= policy.target


async def test_a_summary_replaces_the_oldest_exchanges_and_keeps_the_latest() -> None:
    messages = conversation(40, 100)
    messages[0] = UserTextMessage(f"my key is {CANARY}")
    policy = CompactionPolicy(window=1_000, summary_tokens=50)
    seen: list[str] = []

    async def summarize(text: str) -> str:
        seen.append(text)
        return f"  They asked 30-odd questions. {CANARY} "

    before = measure(messages)
    shape, method = await compact(
        messages,
        Shape(),
        policy,
        measure=tokens,
        dedupable=reads,
        summarize=summarize,
        redact=redact,
    )
    assert method == "summary"
    assert shape.summary == "They asked 30-odd questions. [REDACTED]"
    assert CANARY not in seen[0]
    assert "question 1" in seen[0]
    sent = shaped(messages, shape, reads)
    after = measure(sent)
    assert after < before
    assert after <= policy.target
    assert sent[-4:] == tuple(messages[-4:])  # the latest exchange whole, its signature too
    first = sent[0]
    assert isinstance(first, UserTextMessage)
    assert "They asked 30-odd questions." in first.text
    # a call is never separated from its result
    uses = {
        p.id
        for m in sent
        if isinstance(m, AssistantMessage)
        for p in m.parts
        if isinstance(p, ToolUsePart)
    }
    results = {r.tool_use_id for m in sent if isinstance(m, ToolResultsMessage) for r in m.results}
    assert uses == results


async def test_a_failing_summariser_drops_the_oldest_exchanges_and_still_fits() -> None:
    messages = conversation(40, 100)
    policy = CompactionPolicy(window=1_000, summary_tokens=50)

    async def broken(text: str) -> str:
        raise RuntimeError("overloaded")

    shape, method = await compact(
        messages,
        Shape(),
        policy,
        measure=tokens,
        dedupable=reads,
        summarize=broken,
        redact=redact,
    )
    assert method == "drop"
    assert shape.summary is None
    assert shape.kept_from > 0
    assert measure(shaped(messages, shape, reads)) <= policy.target


async def test_a_second_compaction_summarises_the_previous_summary_too() -> None:
    messages = conversation(60, 100)
    policy = CompactionPolicy(window=1_000, summary_tokens=50)
    inputs: list[str] = []

    async def summarize(text: str) -> str:
        inputs.append(text)
        return f"summary {len(inputs)}"

    first, _ = await compact(
        messages[:160],
        Shape(),
        policy,
        measure=tokens,
        dedupable=reads,
        summarize=summarize,
        redact=redact,
    )
    second, method = await compact(
        messages,
        first,
        policy,
        measure=tokens,
        dedupable=reads,
        summarize=summarize,
        redact=redact,
    )
    assert method == "summary"
    assert second.kept_from > first.kept_from
    assert inputs[1].startswith("Summary of what came before:\nsummary 1")


async def test_one_exchange_larger_than_the_window_is_stubbed_not_cut() -> None:
    messages = exchange(0, 40_000)
    shape, method = await compact(
        messages,
        Shape(),
        CompactionPolicy(window=1_000),
        measure=tokens,
        dedupable=reads,
        summarize=None,
        redact=redact,
    )
    assert method == "stub"
    assert shape.kept_from == 0
    assert shaped(messages, shape, reads)[0] == messages[0]


def test_policy_is_checked() -> None:
    with pytest.raises(ValueError, match="positive"):
        CompactionPolicy(window=0)
    with pytest.raises(ValueError, match="compact_to"):
        CompactionPolicy(window=10, compact_at=0.5, compact_to=0.6)


def test_render_for_summary_names_calls_and_results() -> None:
    text = render_for_summary(exchange(1, 3), "before")
    assert text.splitlines() == [
        "Summary of what came before:",
        "before",
        "",
        "User: question 1",
        'Assistant called balance({"n": 1})',
        "balance returned: rrr",
        "Assistant: answer 1",
    ]


def test_a_request_is_measured_from_the_providers_count_plus_the_growth() -> None:
    small = ModelRequest(system=("s",), messages=(UserTextMessage("x" * 400),), tools=())
    grown = ModelRequest(
        system=("s",), messages=(UserTextMessage("x" * 400), UserTextMessage("y" * 800)), tools=()
    )
    last = LastRequest(reported_tokens=5_000, estimated_tokens=estimate_input_tokens(small))
    assert measure_request(grown, last) == 5_000 + 200
    assert measure_request(grown) == estimate_input_tokens(grown)
    assert measure_request(small, last) == 5_000


def test_context_windows_come_from_the_table() -> None:
    assert context_window("anthropic:claude-sonnet-4-5-20250929") == 200_000
    assert context_window("openai:gpt-4o") == 128_000
    assert context_window("openai-compatible:qwen@http://127.0.0.1:11434/v1") is None
    assert context_window("scripted") is None
    assert context_window("openai:unknown-model") is None

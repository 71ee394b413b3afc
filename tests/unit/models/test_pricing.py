"""Prices from the data file, costs in Decimal, and the run budget's verdict."""

from __future__ import annotations

import json
from decimal import Decimal
from importlib import resources

import pytest

from fiduciary.models.base import ModelRequest, StreamUsage, ToolSpec, UserTextMessage
from fiduciary.models.pricing import (
    DEFAULT_OUTPUT_ESTIMATE,
    Price,
    PriceTable,
    budget_refusal,
    cost_usd,
    default_prices,
    estimate_call_usd,
    estimate_input_tokens,
    price_of,
)
from fiduciary.models.scripted import ScriptedModel

SONNET = Price(Decimal("3"), Decimal("15"), Decimal("0.30"), Decimal("3.75"))


def test_the_data_file_is_complete_and_sane() -> None:
    data = json.loads(
        resources.files("fiduciary.models").joinpath("prices.json").read_text(encoding="utf-8")
    )
    assert data["as_of"]
    for provider, models in data["models"].items():
        for model, values in models.items():
            price = Price.of(values)
            assert set(values) == {"input", "output", "cache_read", "cache_write"}, model
            assert price.cache_read <= price.input, (provider, model)
    for alias, target in data["aliases"].items():
        assert default_prices().lookup(target) is not None, alias


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("anthropic:claude-sonnet-4-5", SONNET),
        ("anthropic:claude-sonnet-4-5-20250929", SONNET),  # a dated id
        ("claude-cli:claude-sonnet-4-5", SONNET),  # a CLI is priced as the API model it runs
        ("claude-cli:sonnet", SONNET),  # an alias
        (
            "openai:gpt-5.1",
            Price(Decimal("1.25"), Decimal("10"), Decimal("0.125"), Decimal("1.25")),
        ),
        (
            "openai:gpt-4o-mini-2024-07-18",
            Price.of(
                {"input": "0.15", "output": "0.60", "cache_read": "0.075", "cache_write": "0.15"}
            ),
        ),
        (
            "openai-compatible:qwen2.5:7b@http://127.0.0.1:11434/v1",
            Price.of({"input": 0, "output": 0}),
        ),
        ("scripted", Price.of({"input": 0, "output": 0})),
    ],
)
def test_lookup(name: str, expected: Price) -> None:
    assert default_prices().lookup(name) == expected


def test_unknown_models_have_no_price() -> None:
    table = default_prices()
    assert table.lookup("openai:gpt-5.1-codex-unheard-of") is None
    assert table.lookup("anthropic:claude-opus-9") is None
    assert table.lookup("nonsense") is None


def test_prices_can_be_added() -> None:
    tuned = Price.of({"input": "4", "output": "16"})
    table = default_prices().with_prices({"openai:ft:gpt-4.1:acme": tuned})
    assert table.lookup("openai:ft:gpt-4.1:acme") == tuned
    assert tuned.cache_read == Decimal("4")  # defaults to the input price
    assert default_prices().lookup("openai:ft:gpt-4.1:acme") is None
    with pytest.raises(ValueError, match="non-negative"):
        Price.of({"input": "-1", "output": "1"})


def test_cost_is_exact() -> None:
    usage = StreamUsage(
        input_tokens=412, output_tokens=187, cache_read_tokens=1000, cache_write_tokens=1536
    )
    # 412*3 + 187*15 + 1000*0.30 + 1536*3.75 = 1236 + 2805 + 300 + 5760 = 10101 per million
    assert cost_usd(SONNET, usage) == Decimal("0.010101")
    assert cost_usd(None, usage) is None


def test_a_model_s_own_price_wins() -> None:
    assert price_of(ScriptedModel([])) == Price.of({"input": 0, "output": 0})
    own = Price.of({"input": "1", "output": "2"})
    model = ScriptedModel([], price=own)
    assert price_of(model) == own
    # ... but not for a call another model answered (a tiered model's choice)
    assert price_of(model, "anthropic:claude-sonnet-4-6") == default_prices().lookup(
        "anthropic:claude-sonnet-4-6"
    )


def request(max_tokens: int | None = None) -> ModelRequest:
    return ModelRequest(
        system=("x" * 400,),
        messages=(UserTextMessage("y" * 400),),
        tools=(ToolSpec("t", "d" * 10, {"type": "object"}),),
        settings={} if max_tokens is None else {"max_tokens": max_tokens},
    )


def test_the_next_call_is_estimated_at_its_worst() -> None:
    tokens = estimate_input_tokens(request())
    assert tokens == (400 + 400 + 1 + 10 + len('{"type": "object"}')) // 4
    worst = estimate_call_usd(SONNET, request(1000))
    assert worst == (tokens * Decimal(3) + 1000 * Decimal(15)) / 1_000_000
    assert (
        estimate_call_usd(SONNET, request())
        == (tokens * Decimal(3) + DEFAULT_OUTPUT_ESTIMATE * Decimal(15)) / 1_000_000
    )
    assert estimate_call_usd(None, request()) is None


def test_budget_refusal() -> None:
    budget = Decimal("0.10")
    assert (
        budget_refusal(budget_usd=None, spent_usd=Decimal(5), next_call_usd=None, model="m") is None
    )
    assert (
        budget_refusal(
            budget_usd=budget, spent_usd=Decimal("0.05"), next_call_usd=Decimal("0.05"), model="m"
        )
        is None
    )
    refusal = budget_refusal(
        budget_usd=budget, spent_usd=Decimal("0.06"), next_call_usd=Decimal("0.05"), model="m"
    )
    assert refusal is not None
    assert "$0.0500" in refusal
    unpriced = budget_refusal(
        budget_usd=budget, spent_usd=Decimal(0), next_call_usd=None, model="openai:mystery"
    )
    assert unpriced is not None
    assert "no price is known for openai:mystery" in unpriced


def test_a_table_from_json() -> None:
    table = PriceTable.from_json(
        '{"models": {"x": {"m": {"input": "1", "output": "2"}}}, "aliases": {"x:n": "x:m"}}'
    )
    assert table.lookup("x:n") == Price.of({"input": "1", "output": "2"})

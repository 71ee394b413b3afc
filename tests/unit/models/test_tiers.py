"""Tiers from the risk a turn may carry, effort from what the person asked, and the router."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from fiduciary import CallContext, capability
from fiduciary.capabilities import Capability, Kind
from fiduciary.exceptions import ConfigurationError, ModelError
from fiduciary.models.base import (
    ModelEvent,
    ModelRequest,
    StreamStop,
    StreamUsage,
    UserTextMessage,
)
from fiduciary.models.scripted import ScriptedModel
from fiduciary.models.tiers import (
    TieredModel,
    choose_effort,
    choose_tier,
    is_high_risk_financial,
    plan_turn,
)

from ..conftest import Effects, toy_capabilities


def amount(args: Any, ctx: CallContext) -> Decimal:
    return Decimal(str(args.amount))


@capability(kind="read")
async def balance() -> str:
    """The balance."""
    return "250"


@capability(kind="propose", operation="send", amount_usd=amount)
async def draft_payment(amount: Decimal) -> str:
    """Draft a payment for the person to review."""
    return "draft"


@capability(kind="execute", risk="medium")
async def rename_account(name: str) -> str:
    """Rename the account."""
    return name


@capability(kind="execute", operation="pay", amount_usd=amount, flags={"irreversible"})
async def pay(amount: Decimal) -> str:
    """Pay, irreversibly."""
    return "paid"


def test_reads_only_is_fast() -> None:
    assert choose_tier([balance]) == "fast"
    assert choose_tier([]) == "fast"


def test_writes_are_standard() -> None:
    assert choose_tier([balance, rename_account]) == "standard"
    assert choose_tier([balance, draft_payment]) == "standard"  # financial but low risk


def test_high_risk_financial_writes_are_powerful() -> None:
    send = toy_capabilities(Effects())[2]  # risk="high", operation="send"
    assert is_high_risk_financial(send)
    assert is_high_risk_financial(pay)  # irreversible and moves money
    assert not is_high_risk_financial(rename_account)
    assert choose_tier([balance, send]) == "powerful"
    assert choose_tier([balance, rename_account, pay]) == "powerful"


def test_only_what_the_turn_may_call_counts() -> None:
    plan_first = [Kind.READ, Kind.PREVIEW, Kind.PROPOSE]
    assert choose_tier([balance, pay], allowed_kinds=plan_first) == "fast"
    assert (
        choose_tier([balance, draft_payment, pay], allowed_kinds=["read", "propose"]) == "standard"
    )


def test_overrides() -> None:
    assert choose_tier([balance], override="powerful") == "powerful"
    with pytest.raises(ConfigurationError):
        choose_tier([balance], override="huge")  # type: ignore[arg-type]
    assert choose_effort("anything", override="high") == "high"
    with pytest.raises(ConfigurationError):
        choose_effort("anything", override="max")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "tier", "effort"),
    [
        ("What's my balance?", "fast", "low"),
        ("Show my invoices", "standard", "low"),
        ("Pay bob $60", "standard", "medium"),
        ("pay bob 60 dollars", "powerful", "medium"),
        (
            "Swap half my USDC to SUI, then save the rest if the rate is above 2%",
            "standard",
            "high",
        ),
        ("Rebalance: sell 10% of ETH, buy BTC, and repay the 500 USD loan", "standard", "high"),
    ],
)
def test_effort_follows_financial_complexity(text: str, tier: Any, effort: str) -> None:
    assert choose_effort(text, tier=tier) == effort


def test_a_turn_plan() -> None:
    caps: list[Capability] = [balance, pay]
    messages = (UserTextMessage("first"), UserTextMessage("pay 20 USD then 30 USD if it works"))
    plan = plan_turn(caps, messages, settings={"max_tokens": 100})
    assert plan.tier == "powerful"
    assert plan.effort == "high"  # judged on the latest message
    assert plan.settings == {"max_tokens": 100, "tier": "powerful", "effort": "high"}
    forced = plan_turn(caps, messages, settings={"tier": "fast"}, effort="low")
    assert (forced.tier, forced.effort) == ("fast", "low")  # the agent's settings win
    again = plan_turn(caps, messages, settings={"effort": "medium"}, effort="low")
    assert again.effort == "medium"


class Named:
    def __init__(self, name: str) -> None:
        self._name = name
        self.asked: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return self._name

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.asked.append(request)
        yield StreamUsage(input_tokens=1)
        yield StreamStop("end_turn")


async def test_the_tiered_model_routes_by_tier_and_names_who_answered() -> None:
    fast, standard, powerful = Named("a:fast"), Named("a:std"), Named("a:pow")
    model = TieredModel(fast=fast, standard=standard, powerful=powerful, name="a:auto")
    assert model.name == "a:auto"
    for tier, chosen in (("fast", fast), ("powerful", powerful), (None, standard)):
        settings = {} if tier is None else {"tier": tier}
        events = [e async for e in model.stream(ModelRequest((), (), (), settings))]
        assert events[0] == StreamUsage(input_tokens=1, model=chosen.name)
        assert len(chosen.asked) == 1


async def test_the_tiered_model_answers_json_with_its_standard_model() -> None:
    scripted = ScriptedModel([], json_answer={"ok": True})
    model = TieredModel(fast=Named("f"), standard=scripted, powerful=Named("p"))
    assert await model.complete_json("s", "p", {}) == {"ok": True}
    plain = TieredModel(fast=Named("f"), standard=Named("s"), powerful=Named("p"))
    with pytest.raises(ModelError):
        await plain.complete_json("s", "p", {})

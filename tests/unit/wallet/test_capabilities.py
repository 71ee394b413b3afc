"""The wallet's capabilities: declared truthfully, priced for the policy, each one's successes
and refusals, and the whole pipeline (guards, policy, ledger) around them."""

from __future__ import annotations

import itertools
from datetime import timedelta
from decimal import Decimal
from typing import Any
from uuid import uuid4

import pytest

from fiduciary import CallContext, ManualClock, Policy, Principal
from fiduciary.capabilities import Capability
from fiduciary.events import PendingAction, ToolCallEnd, ToolCallRejected
from fiduciary.testing import Call, MemoryStore, Reply, Script, ScriptedModel, ToolCalls, collect
from fiduciary.wallet import PaperWallet, WalletError, build_wallet_agent, wallet_capabilities
from fiduciary.wallet.addresses import address_of
from fiduciary.wallet.capabilities import READS, WRITES

from .conftest import available, saved, tx_count

STRANGER = "0x" + "ab" * 20
_KEYS = itertools.count(1)

EXPECTED: dict[str, tuple[str, str, str, set[str], str | None]] = {
    **{name: ("read", "low", "safe", set(), None) for name in READS},
    "swap_quote": ("preview", "low", "safe", set(), None),
    "save_deposit": ("execute", "low", "never", {"mutating", "requires_balance"}, "save"),
    "withdraw": ("execute", "medium", "never", {"mutating", "affects_health"}, "withdraw"),
    "send_transfer": (
        "execute",
        "high",
        "never",
        {"mutating", "requires_balance", "irreversible"},
        "send",
    ),
    "borrow": ("execute", "high", "never", {"mutating", "affects_health"}, "borrow"),
    "repay_debt": (
        "execute",
        "medium",
        "never",
        {"mutating", "requires_balance", "affects_health"},
        "repay",
    ),
    "claim_rewards": ("execute", "low", "never", {"mutating"}, "withdraw"),
    "harvest_rewards": ("execute", "medium", "never", {"mutating"}, "save"),
    "swap_execute": (
        "execute",
        "medium",
        "never",
        {"mutating", "requires_balance", "irreversible"},
        "swap",
    ),
    "swap_and_save": (
        "execute",
        "medium",
        "resume",  # its steps settle a crash themselves, each once
        {"mutating", "requires_balance", "irreversible"},
        "swap",
    ),
    "save_contact": ("execute", "medium", "never", {"mutating"}, None),
}


@pytest.fixture
def caps(wallet: PaperWallet) -> dict[str, Capability]:
    wallet.open("ann")
    return {c.name: c for c in wallet_capabilities(wallet)}


def context(cap: Capability, clock: ManualClock, key: str | None = None) -> CallContext:
    return CallContext(
        run_id=uuid4(),
        principal=Principal("ann"),
        tool_use_id="t1",
        capability=cap.name,
        idempotency_key=key or f"test-key-{next(_KEYS)}",
        clock=clock,
    )


class Caller:
    """Calls capabilities as the registry would: validate, invoke with a context, dump."""

    def __init__(self, caps: dict[str, Capability], clock: ManualClock) -> None:
        self.caps = caps
        self.clock = clock

    async def __call__(
        self, name: str, args: dict[str, Any] | None = None, *, key: str | None = None
    ) -> Any:
        cap = self.caps[name]
        model = cap.input_model.model_validate(args or {})
        return cap.dump_output(await cap.invoke(model, context(cap, self.clock, key)))


@pytest.fixture
def call(caps: dict[str, Capability], clock: ManualClock) -> Caller:
    return Caller(caps, clock)


async def refusal(call: Caller, wallet: PaperWallet, name: str, args: dict[str, Any]) -> str:
    before = tx_count(wallet)
    with pytest.raises(WalletError) as caught:
        await call(name, args)
    assert tx_count(wallet) == before
    return caught.value.code


# --- declarations -------------------------------------------------------------------------------


def test_every_capability_is_declared_truthfully(caps: dict[str, Capability]) -> None:
    assert set(caps) == set(READS) | set(WRITES)
    assert len(READS) == 14
    assert len(WRITES) == 10
    for name, (kind, risk, replay, flags, operation) in EXPECTED.items():
        cap = caps[name]
        assert (cap.kind.value, cap.risk.value, cap.replay.value) == (kind, risk, replay), name
        assert set(cap.flags) == flags, name
        assert cap.operation == operation, name
        assert len(cap.description) > 40, name
        assert (cap.amount_usd is not None) == (operation is not None), name
    assert caps["save_contact"].tier == "auto"  # moves no money
    assert caps["send_transfer"].modifiable_fields == ("amount",)  # never the recipient


def test_inputs_ask_for_decimal_strings_and_explicit_assets(caps: dict[str, Capability]) -> None:
    schema = caps["send_transfer"].input_schema()
    assert set(schema["required"]) == {"to", "asset", "amount"}
    assert "decimal string" in schema["properties"]["amount"]["description"]
    assert "Never an address from memory" in schema["properties"]["to"]["description"]


async def test_writes_are_priced_in_usd_from_the_market(
    caps: dict[str, Capability], wallet: PaperWallet, clock: ManualClock
) -> None:
    def usd(name: str, args: dict[str, Any]) -> Any:
        cap = caps[name]
        return cap.amount(cap.input_model.model_validate(args), context(cap, clock))

    assert await usd("send_transfer", {"to": STRANGER, "asset": "USDC", "amount": "75"}) == 75
    sui = await usd("swap_execute", {"from_asset": "SUI", "to_asset": "USDC", "amount": "10"})
    assert sui == wallet.usd_value("SUI", Decimal("10"))
    assert await usd("withdraw", {"asset": "USDC", "amount": "all"}) == Decimal("1500.00")
    assert await usd("repay_debt", {"asset": "USDC"}) == Decimal("0.00")
    assert await usd("claim_rewards", {}) == Decimal("0.00")
    assert await usd("send_transfer", {"to": STRANGER, "asset": "DOGE", "amount": "1"}) is None


def test_the_balanced_preset_decides_the_tiers(caps: dict[str, Capability]) -> None:
    policy = Policy(preset="balanced")
    assert policy.decide(caps["save_deposit"], Decimal("20")).tier == "auto"
    assert policy.decide(caps["send_transfer"], Decimal("75")).tier == "confirm"
    assert policy.decide(caps["borrow"], Decimal("1")).tier == "confirm"
    assert policy.decide(caps["swap_execute"], Decimal("15")).tier == "auto"
    assert policy.decide(caps["swap_execute"], Decimal("400")).tier == "explicit"
    assert policy.decide(caps["save_contact"], None).tier == "auto"
    assert policy.decide(caps["balance_check"], None).tier == "auto"


# --- reads --------------------------------------------------------------------------------------


async def test_reads_report_what_the_ledger_holds(call: Caller, wallet: PaperWallet) -> None:
    balance = await call("balance_check")
    assert balance["address"] == address_of("ann")
    assert balance["total_usd"] == str(wallet.balances("ann").total_usd)
    elsewhere = await call("balance_check", {"address": STRANGER})
    assert (elsewhere["whose"], elsewhere["available"]) == ("an external address", [])
    savings = await call("savings_info")
    assert savings["positions"][0]["amount"] == "1500.000000"
    health = await call("health_check")
    assert (health["health_factor"], health["risk"]) == (None, "no debt")
    rates = {r["asset"]: r for r in await call("rates_info")}
    assert rates["USDC"]["supply_apy_pct"] == "4.80"
    assert rates["SUI"]["borrow_apy_pct"] is None
    prices = await call("token_prices", {"assets": ["sui", "USDC"]})
    assert [p["asset"] for p in prices] == ["SUI", "USDC"]
    assert len(await call("token_prices")) == 8
    assert await call("list_contacts") == []
    assert (await call("pending_rewards"))["asset"] == "SUI"
    history = await call("transaction_history", {"limit": 5})
    assert [e["kind"] for e in history] == ["open"]
    explained = await call("explain_tx", {"digest": history[0]["digest"]})
    assert explained["verified"] is True
    portfolio = await call("portfolio_analysis")
    assert portfolio["net_worth_usd"] == balance["total_usd"]
    assert any("earning nothing" in line for line in portfolio["insights"])


async def test_read_refusals(call: Caller, wallet: PaperWallet) -> None:
    assert (
        await refusal(call, wallet, "explain_tx", {"digest": "nothere1"}) == "unknown_transaction"
    )
    assert await refusal(call, wallet, "token_prices", {"assets": ["DOGE"]}) == "unknown_asset"
    assert await refusal(call, wallet, "balance_check", {"address": "bob"}) == "invalid_address"
    quote = {"from_asset": "SUI", "to_asset": "SUI", "amount": "1"}
    assert await refusal(call, wallet, "swap_quote", quote) == "same_asset"


async def test_analytics_over_a_month(
    call: Caller, wallet: PaperWallet, clock: ManualClock
) -> None:
    wallet.save_contact("ann", "Landlord", STRANGER, key="c1")
    await call("send_transfer", {"to": "Landlord", "asset": "USDC", "amount": "75"})
    clock.advance(timedelta(days=10))
    quote = await call("swap_quote", {"from_asset": "USDC", "to_asset": "SUI", "amount": "400"})
    await call(
        "swap_execute",
        {"from_asset": "USDC", "to_asset": "SUI", "amount": "400", "quote_id": quote["quote_id"]},
    )
    clock.advance(timedelta(days=20))
    spending = await call("spending_analytics", {"days": 30})
    assert spending["by_category_usd"] == {"swap fees": "1.00", "transfers": "75.00"}
    assert spending["top_recipients"] == [{"to": "Landlord", "usd": "75.00"}]
    assert spending["transactions"] == 2
    activity = await call("activity_summary", {"days": 30})
    assert activity["by_kind"] == {"open": 1, "send": 1, "swap": 1}
    assert activity["volume_usd_by_kind"]["send"] == "75.00"
    yields = await call("yield_summary", {"days": 30})
    # 1,500 USDC for 30 days at 4.8%: 5.79 USDC, of which 10 days were booked by the swap
    assert yields["interest_earned_usd"] == str(
        (saved(wallet, "ann", "USDC") - Decimal("1500")).quantize(Decimal("0.01"))
    )
    assert yields["projected_1y_usd"] == str(
        (saved(wallet, "ann", "USDC") * Decimal("0.048")).quantize(Decimal("0.01"))
    )
    assert len(yields["daily_savings_usd"]) == 30
    assert Decimal(yields["daily_savings_usd"][-1]) > Decimal(yields["daily_savings_usd"][0])


# --- writes -------------------------------------------------------------------------------------


async def test_each_write_succeeds(call: Caller, wallet: PaperWallet, clock: ManualClock) -> None:
    saved_receipt = await call("save_deposit", {"asset": "USDC", "amount": "20"})
    assert saved_receipt["kind"] == "save"
    assert (await call("withdraw", {"asset": "USDC", "amount": "10"}))["kind"] == "withdraw"
    sent = await call("send_transfer", {"to": STRANGER, "asset": "USDC", "amount": "5"})
    assert sent["details"]["to"] == STRANGER
    assert (await call("borrow", {"asset": "USDC", "amount": "100"}))["kind"] == "borrow"
    repaid = await call("repay_debt", {"asset": "USDC", "amount": "all"})
    assert repaid["details"]["debt_left"] == "0.000000"
    clock.advance(timedelta(days=100))
    assert (await call("claim_rewards"))["kind"] == "claim"
    clock.advance(timedelta(days=100))
    harvested = await call("harvest_rewards", {"max_slippage_pct": "2"})
    assert Decimal(harvested["details"]["saved_usdc"]) > 0
    quote = await call("swap_quote", {"from_asset": "SUI", "to_asset": "ETH", "amount": "2"})
    swapped = await call(
        "swap_execute",
        {"from_asset": "SUI", "to_asset": "ETH", "amount": "2", "quote_id": quote["quote_id"]},
    )
    assert swapped["details"]["route"] == ["SUI-USDC", "ETH-USDC"]
    contact = await call("save_contact", {"name": "Dave", "address": STRANGER})
    assert contact["address"] == STRANGER
    assert wallet.verify().ok


@pytest.mark.parametrize(
    ("name", "args", "code"),
    [
        ("save_deposit", {"asset": "USDC", "amount": "5000"}, "insufficient_funds"),
        ("save_deposit", {"asset": "PEPE", "amount": "1"}, "unknown_asset"),
        ("withdraw", {"asset": "USDT", "amount": "all"}, "insufficient_funds"),
        ("send_transfer", {"to": "Dave", "asset": "USDC", "amount": "1"}, "unknown_recipient"),
        (
            "send_transfer",
            {"to": STRANGER, "asset": "USDC", "amount": "0.0000001"},
            "invalid_amount",
        ),
        ("borrow", {"asset": "USDC", "amount": "1300"}, "borrow_limit"),
        ("repay_debt", {"asset": "USDC"}, "nothing_to_repay"),
        ("claim_rewards", {}, "nothing_to_claim"),
        ("harvest_rewards", {}, "nothing_to_claim"),
        (
            "swap_execute",
            {"from_asset": "USDC", "to_asset": "SUI", "amount": "1", "quote_id": "q_x"},
            "unknown_quote",
        ),
        (
            "swap_execute",
            {"from_asset": "USDC", "to_asset": "SUI", "amount": "1", "max_slippage_pct": "9"},
            "slippage_limit",
        ),
        ("save_contact", {"name": "Dave", "address": "dave.sui"}, "invalid_address"),
    ],
)
async def test_each_write_refuses_the_impossible(
    call: Caller, wallet: PaperWallet, name: str, args: dict[str, Any], code: str
) -> None:
    assert await refusal(call, wallet, name, args) == code


async def test_more_refusals_that_need_a_setup(
    call: Caller, wallet: PaperWallet, clock: ManualClock
) -> None:
    await call("borrow", {"asset": "USDC", "amount": "100"})
    assert (
        await refusal(call, wallet, "repay_debt", {"asset": "USDT", "amount": "1"}) == "wrong_asset"
    )
    quote = await call("swap_quote", {"from_asset": "USDC", "to_asset": "SUI", "amount": "1"})
    clock.advance(61)
    expired = {
        "from_asset": "USDC",
        "to_asset": "SUI",
        "amount": "1",
        "quote_id": quote["quote_id"],
    }
    assert await refusal(call, wallet, "swap_execute", expired) == "quote_expired"


async def test_handlers_post_under_the_calls_idempotency_key(
    call: Caller, wallet: PaperWallet
) -> None:
    args = {"to": STRANGER, "asset": "USDC", "amount": "10"}
    first = await call("send_transfer", args, key="run:tool:send")
    again = await call("send_transfer", args, key="run:tool:send")
    assert (first["replayed"], again["replayed"]) == (False, True)
    assert again["digest"] == first["digest"]
    assert wallet.ledger.read().find("run:tool:send") is not None
    assert available(wallet, "ann", "USDC") == Decimal("990")


# --- through the agent --------------------------------------------------------------------------


def scripted(*steps: Any) -> ScriptedModel:
    return ScriptedModel([Script("go", [*steps, Reply("done")])])


async def test_a_refused_write_is_a_tool_error_and_posts_nothing(
    wallet: PaperWallet, clock: ManualClock
) -> None:
    wallet.open("ann")
    before = tx_count(wallet)
    agent = build_wallet_agent(
        MemoryStore(),
        wallet,
        model=scripted(ToolCalls([Call("save_deposit", {"asset": "USDC", "amount": "40000"})])),
        guards=[],  # no preflight: the handler itself refuses
        policy=Policy(thresholds={}, daily_autonomous_limit_usd=None, preset="aggressive"),
    )
    events = await collect(agent.run("go", principal="ann"))
    pending = [e for e in events if isinstance(e, PendingAction)]
    assert pending[0].tier == "explicit"  # $40,000 is explicit even in the aggressive preset
    await agent.approve(pending[0].approval_id, by="ann", confirm_amount=Decimal("40000"))
    events = await collect(agent.resume(events[0].run_id))
    end = next(e for e in events if isinstance(e, ToolCallEnd))
    assert (end.is_error, end.error_code) == (True, "insufficient_funds")
    assert tx_count(wallet) == before


async def test_the_guards_refuse_before_a_person_is_asked(
    wallet: PaperWallet, clock: ManualClock
) -> None:
    agent = build_wallet_agent(
        MemoryStore(),
        wallet,
        model=scripted(
            ToolCalls([Call("balance_check")]),
            ToolCalls([Call("send_transfer", {"to": STRANGER, "asset": "USDC", "amount": "4000"})]),
        ),
    )
    events = await collect(agent.run(f"go pay {STRANGER}", principal="ann"))
    rejected = next(e for e in events if isinstance(e, ToolCallRejected))
    assert rejected.reason == "guard_blocked"
    assert "Blocked by preflight" in rejected.message
    assert not [e for e in events if e.type == "pending_action"]


async def test_a_json_number_becomes_an_exact_decimal(
    wallet: PaperWallet, clock: ManualClock
) -> None:
    agent = build_wallet_agent(
        MemoryStore(),
        wallet,
        model=scripted(
            ToolCalls([Call("balance_check")]),
            ToolCalls([Call("save_deposit", raw='{"asset": "USDC", "amount": 20.1}')]),
        ),
    )
    events = await collect(agent.run("go save 20.1 USDC", principal="ann"))
    end = [e for e in events if isinstance(e, ToolCallEnd)][-1]
    assert not end.is_error, end.output
    assert saved(wallet, "ann", "USDC") == Decimal("1520.1")  # not 1520.100000000000001…
    rows = wallet.ledger.read().conn.execute(
        "SELECT DISTINCT typeof(amount), typeof(units) FROM wallet_postings"
    )
    assert rows.fetchall() == [("text", "integer")]

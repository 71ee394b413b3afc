"""Policy.decide: which calls run on their own, which wait for a person, which never run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fiduciary import Capability, ConfigurationError, Operation, Policy, Threshold, capability
from fiduciary.capabilities import Tier
from fiduciary.policy import PRESETS, PolicyDecision, TierName

D = Decimal
CENT = D("0.01")
ORDER: dict[str, int] = {"auto": 0, "confirm": 1, "explicit": 2, "deny": 3}

# (auto_below, confirm_below) of every preset operation: what users configure against.
PRESET_TABLE: dict[str, dict[str, tuple[str, str]]] = {
    "conservative": {
        "save": ("5", "200"),
        "withdraw": ("5", "200"),
        "send": ("1", "50"),
        "borrow": ("0", "100"),
        "repay": ("5", "200"),
        "swap": ("5", "100"),
        "pay": ("1", "20"),
    },
    "balanced": {
        "save": ("50", "1000"),
        "withdraw": ("25", "500"),
        "send": ("10", "200"),
        "borrow": ("0", "500"),
        "repay": ("50", "1000"),
        "swap": ("25", "300"),
        "pay": ("5", "50"),
    },
    "aggressive": {
        "save": ("200", "5000"),
        "withdraw": ("100", "2000"),
        "send": ("50", "1000"),
        "borrow": ("25", "2000"),
        "repay": ("200", "5000"),
        "swap": ("100", "2000"),
        "pay": ("20", "200"),
    },
}
PRESET_ROWS = [
    (preset, op, D(auto), D(confirm))
    for preset, ops in PRESET_TABLE.items()
    for op, (auto, confirm) in ops.items()
]


def op_cap(operation: str | None, *, kind: str = "execute", tier: Tier | None = None) -> Capability:
    @capability(name=f"do_{operation or 'it'}", kind=kind, operation=operation, tier=tier)
    async def handler() -> None:
        """An operation."""

    return handler


def tier_of(policy: Policy, cap: Capability, amount: Decimal | None, **kwargs: Any) -> str:
    return policy.decide(cap, amount, **kwargs).tier


def test_presets_are_pinned() -> None:
    assert {
        preset: {op: (str(t.auto_below), str(t.confirm_below)) for op, t in ops.items()}
        for preset, ops in PRESETS.items()
    } == PRESET_TABLE
    assert all(t.deny_above is None for ops in PRESETS.values() for t in ops.values())


def test_default_policy() -> None:
    policy = Policy()
    assert policy.preset == "balanced"
    assert policy.daily_autonomous_limit_usd == D("100")
    assert policy.deny_operations == frozenset()
    assert policy.approval_ttl_seconds == 900


@pytest.mark.parametrize(("preset", "operation", "auto_below", "confirm_below"), PRESET_ROWS)
def test_preset_thresholds(
    preset: str, operation: str, auto_below: Decimal, confirm_below: Decimal
) -> None:
    policy = Policy(preset=preset, daily_autonomous_limit_usd=None)
    cap = op_cap(operation)
    if auto_below > 0:
        assert tier_of(policy, cap, D(0)) == "auto"
        assert tier_of(policy, cap, auto_below - CENT) == "auto"
    assert tier_of(policy, cap, auto_below) == "confirm"
    assert tier_of(policy, cap, confirm_below - CENT) == "confirm"
    assert tier_of(policy, cap, confirm_below) == "explicit"
    assert tier_of(policy, cap, confirm_below * 100) == "explicit"


def test_decision_carries_amount_and_reason() -> None:
    decision = Policy(daily_autonomous_limit_usd=None).decide(op_cap("send"), D("150"))
    assert decision == PolicyDecision("confirm", "below $200", D("150"))
    assert decision.at_least("confirm")
    assert not decision.at_least("explicit")


@pytest.mark.parametrize("kind", ["read", "preview"])
def test_reads_and_previews_run_on_their_own(kind: str) -> None:
    policy = Policy(preset="conservative", daily_autonomous_limit_usd=D(0))
    assert tier_of(policy, op_cap("send", kind=kind), D("1000000")) == "auto"
    assert tier_of(policy, op_cap(None, kind=kind), None) == "auto"


@pytest.mark.parametrize("kind", ["propose", "approve", "execute"])
def test_unknown_operation_needs_confirmation(kind: str) -> None:
    policy = Policy(daily_autonomous_limit_usd=None)
    assert tier_of(policy, op_cap("teleport", kind=kind), D("0.01")) == "confirm"
    assert tier_of(policy, op_cap(None, kind=kind), D("0.01")) == "confirm"


def test_unknown_amount_needs_confirmation() -> None:
    decision = Policy().decide(op_cap("send"), None)
    assert decision.tier == "confirm"
    assert "unknown" in decision.reason


def test_denied_operation() -> None:
    policy = Policy(deny_operations=frozenset({"borrow"}))
    assert tier_of(policy, op_cap("borrow"), D("0.01")) == "deny"
    assert tier_of(policy, op_cap("borrow"), None) == "deny"
    assert tier_of(policy, op_cap("borrow", tier="auto"), D(1)) == "deny"
    assert tier_of(policy, op_cap("send"), D(1)) == "auto"


def test_thresholds_override_and_extend_the_preset() -> None:
    policy = Policy(
        thresholds={"send": Threshold(D(100), D(150)), "tip": Threshold(D(2), D(10))},
        daily_autonomous_limit_usd=None,
    )
    assert tier_of(policy, op_cap("send"), D(99)) == "auto"
    assert tier_of(policy, op_cap("send"), D(150)) == "explicit"
    assert tier_of(policy, op_cap("tip"), D(1)) == "auto"
    assert tier_of(policy, op_cap("tip"), D(5)) == "confirm"
    assert tier_of(policy, op_cap("pay"), D(1)) == "auto"  # the rest of the preset stays
    assert policy.threshold("pay") == PRESETS["balanced"]["pay"]
    assert policy.threshold("teleport") is None


def test_deny_above() -> None:
    policy = Policy(
        thresholds={"send": Threshold(D(10), D(200), deny_above=D(1000))},
        daily_autonomous_limit_usd=None,
    )
    assert tier_of(policy, op_cap("send"), D(1000)) == "explicit"
    decision = policy.decide(op_cap("send"), D("1000.01"))
    assert decision.tier == "deny"
    assert "1000" in decision.reason
    # a capability that fixes its tier is still denied above the limit
    assert tier_of(policy, op_cap("send", tier="confirm"), D("1000.01")) == "deny"
    assert tier_of(policy, op_cap("send"), None) == "confirm"


@pytest.mark.parametrize("tier", ["auto", "confirm", "explicit", "deny"])
def test_capability_fixed_tier(tier: Tier) -> None:
    policy = Policy(daily_autonomous_limit_usd=None)
    for operation, amount in [("send", D(1)), ("send", D(5000)), (None, None), ("x", D(3))]:
        decision = policy.decide(op_cap(operation, tier=tier), amount)
        assert decision.tier == tier
        assert decision.reason == "fixed by the capability"


def test_daily_autonomous_limit() -> None:
    policy = Policy(daily_autonomous_limit_usd=D(100))
    send = op_cap("send")  # balanced: auto below $10
    assert tier_of(policy, send, D(5), spent_today=D(95)) == "auto"  # exactly at the limit
    decision = policy.decide(send, D(5), spent_today=D("95.01"))
    assert decision.tier == "confirm"
    assert "daily autonomous limit" in decision.reason
    assert tier_of(policy, send, D(5), spent_today=D(200)) == "confirm"
    # the limit only ever raises auto to confirm: it never lowers explicit
    assert tier_of(policy, send, D(500), spent_today=D(100)) == "explicit"
    assert tier_of(policy, send, D(150), spent_today=D(100)) == "confirm"


def test_zero_limit_and_no_limit() -> None:
    send = op_cap("send")
    assert tier_of(Policy(daily_autonomous_limit_usd=D(0)), send, D("0.01")) == "confirm"
    assert tier_of(Policy(daily_autonomous_limit_usd=D(0)), send, D(0)) == "auto"
    unlimited = Policy(daily_autonomous_limit_usd=None)
    assert tier_of(unlimited, send, D("9.99"), spent_today=D(10**9)) == "auto"


def test_capability_fixed_auto_respects_the_daily_limit() -> None:
    policy = Policy(daily_autonomous_limit_usd=D(100))
    assert tier_of(policy, op_cap("send", tier="auto"), D(80), spent_today=D(30)) == "confirm"


def test_a_guard_hold_makes_an_auto_call_wait_and_never_lowers_a_tier() -> None:
    policy = Policy(daily_autonomous_limit_usd=None)
    send, held = op_cap("send"), ["new_recipient"]
    decision = policy.decide(send, D("0.01"), held_by=held)
    assert decision.tier == "confirm"
    assert decision.reason == "new_recipient holds it for a person"
    assert tier_of(policy, op_cap("send", tier="auto"), D(0), held_by=held) == "confirm"
    assert tier_of(policy, send, D(150), held_by=held) == "confirm"
    assert tier_of(policy, send, D(500), held_by=held) == "explicit"
    assert tier_of(policy, op_cap("send", tier="deny"), D(1), held_by=held) == "deny"
    assert tier_of(policy, op_cap("send", kind="read"), None, held_by=held) == "auto"
    assert tier_of(policy, send, D("0.01"), held_by=[]) == "auto"


# --- operations a domain declares -------------------------------------------------------

SHOP = Policy(
    preset=None,
    operations=[
        Operation("place_order", auto_below="100", confirm_below="1000"),
        Operation("refund", auto_below=20, confirm_below=D(200), deny_above="2000"),
        Operation("cancel_order", tier="auto"),
        Operation("close_account", tier="deny"),
        Operation("gift_card", auto_below="10"),
        Operation("export_data"),
    ],
    daily_autonomous_limit_usd=None,
)


def test_declared_operations_tier_by_amount() -> None:
    order, refund = op_cap("place_order"), op_cap("refund")
    assert tier_of(SHOP, order, D("99.99")) == "auto"
    assert tier_of(SHOP, order, D(100)) == "confirm"
    assert tier_of(SHOP, order, D(1000)) == "explicit"
    assert tier_of(SHOP, refund, D("19.99")) == "auto"
    assert SHOP.decide(refund, D(20)) == PolicyDecision("confirm", "below $200", D(20))
    assert tier_of(SHOP, refund, D(2000)) == "explicit"
    decision = SHOP.decide(refund, D("2000.01"))
    assert decision == PolicyDecision("deny", "$2000.01 is above the $2000 limit", D("2000.01"))
    assert tier_of(SHOP, refund, None) == "confirm"  # no amount, no fixed tier: a person


def test_declared_operation_with_a_fixed_tier_needs_no_amount() -> None:
    cancel = op_cap("cancel_order")
    assert SHOP.decide(cancel, None) == PolicyDecision(
        "auto", "fixed for the 'cancel_order' operation", None
    )
    assert tier_of(SHOP, cancel, D(10**6)) == "auto"
    assert tier_of(SHOP, cancel, None, held_by=["a_guard"]) == "confirm"  # a hold still holds
    # a capability's own tier wins, except that a denied operation stays denied
    assert tier_of(SHOP, op_cap("cancel_order", tier="confirm"), None) == "confirm"
    closing = op_cap("close_account", tier="auto")
    assert SHOP.decide(closing, None) == PolicyDecision(
        "deny", "operation 'close_account' is denied", None
    )
    assert tier_of(SHOP, op_cap("close_account", kind="read"), None) == "deny"
    capped = Policy(preset=None, operations=[Operation("void", tier="auto", deny_above="100")])
    assert tier_of(capped, op_cap("void"), D(100)) == "auto"
    assert tier_of(capped, op_cap("void"), D("100.01")) == "deny"


def test_a_fixed_auto_tier_still_counts_toward_the_daily_limit() -> None:
    policy = Policy(
        preset=None,
        operations=[Operation("cancel_order", tier="auto")],
        daily_autonomous_limit_usd=D(100),
    )
    cancel = op_cap("cancel_order")
    assert tier_of(policy, cancel, D(50), spent_today=D(50)) == "auto"
    assert policy.decide(cancel, D(50), spent_today=D(60)).limited


def test_declared_operation_without_confirm_below_is_never_explicit() -> None:
    gift, export = op_cap("gift_card"), op_cap("export_data")
    assert tier_of(SHOP, gift, D("9.99")) == "auto"
    assert SHOP.decide(gift, D(10**6)) == PolicyDecision("confirm", "$10 or more", D(10**6))
    assert SHOP.decide(export, D(0)) == PolicyDecision(
        "confirm", "every 'export_data' call needs a person", D(0)
    )


def test_no_preset_knows_no_finance_words() -> None:
    assert SHOP.operation("pay") is None
    assert tier_of(SHOP, op_cap("pay"), D(1)) == "confirm"
    assert SHOP.decide(op_cap("pay"), D(1)).reason == "no threshold for this operation"


def test_declared_operations_extend_and_override_a_preset() -> None:
    policy = Policy(
        operations=[Operation("refund", auto_below="5"), Operation("send", tier="confirm")],
        daily_autonomous_limit_usd=None,
    )
    assert tier_of(policy, op_cap("refund"), D(1)) == "auto"
    assert tier_of(policy, op_cap("send"), D(1)) == "confirm"  # the preset said auto
    assert tier_of(policy, op_cap("pay"), D(1)) == "auto"  # the rest of the preset stays


def test_operation_lookup() -> None:
    refund = SHOP.operation("refund")
    assert refund is not None
    assert (refund.auto_below, refund.confirm_below, refund.deny_above) == (D(20), D(200), D(2000))
    assert refund.tier is None
    assert SHOP.threshold("refund") == Threshold(D(20), D(200), D(2000))
    assert SHOP.threshold("cancel_order") is None  # a fixed tier is no threshold
    assert SHOP.threshold("gift_card") is None  # nor is a threshold without confirm_below
    assert Policy().operation("pay") == Operation("pay", auto_below="5", confirm_below="50")
    assert SHOP.operations == tuple(SHOP.operations)  # a list is kept as a tuple


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": ""}, "non-empty name"),
        ({"name": "refund", "auto_below": 1.5}, "not float"),
        ({"name": "refund", "auto_below": True}, "not bool"),
        ({"name": "refund", "confirm_below": "ten"}, "'ten' is not a number"),
        ({"name": "refund", "auto_below": "-1"}, "finite amount >= 0"),
        ({"name": "refund", "deny_above": D("Infinity")}, "finite amount >= 0"),
        ({"name": "refund", "auto_below": 10, "confirm_below": 5}, "below auto_below"),
        ({"name": "refund", "tier": "maybe"}, "tier must be one of"),
        ({"name": "refund", "tier": "auto", "auto_below": 5}, "either a fixed tier"),
    ],
)
def test_invalid_operation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Operation(**kwargs)


def test_an_operation_declared_twice_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="'refund' is declared twice"):
        Policy(operations=[Operation("refund", tier="confirm"), Operation("refund")])
    with pytest.raises(ConfigurationError, match="'refund' is declared twice"):
        Policy(thresholds={"refund": Threshold(D(1), D(2))}, operations=[Operation("refund")])


def test_operations_and_thresholds_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="takes Operation"):
        Policy(operations=["refund"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match=r"thresholds\['refund'\] must be a Threshold"):
        Policy(thresholds={"refund": Operation("refund")})  # type: ignore[dict-item]


# --- validation ---------------------------------------------------------------------------


def test_unknown_preset() -> None:
    with pytest.raises(ConfigurationError, match=r"reckless.*or None"):
        Policy(preset="reckless")


def test_negative_limit() -> None:
    with pytest.raises(ConfigurationError, match="non-negative"):
        Policy(daily_autonomous_limit_usd=D("-0.01"))


def test_float_limit() -> None:
    with pytest.raises(ConfigurationError, match="Decimal"):
        Policy(daily_autonomous_limit_usd=100.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("auto_below", "confirm_below"), [(D(-1), D(10)), (D(10), D(5)), (D("0.01"), D(0))]
)
def test_invalid_threshold(auto_below: Decimal, confirm_below: Decimal) -> None:
    with pytest.raises(ConfigurationError, match="auto_below"):
        Threshold(auto_below, confirm_below)


def test_threshold_edges_are_valid() -> None:
    assert Threshold(D(0), D(0)).confirm_below == 0
    equal = Threshold(D(5), D(5))
    policy = Policy(thresholds={"x": equal}, daily_autonomous_limit_usd=None)
    assert tier_of(policy, op_cap("x"), D("4.99")) == "auto"
    assert tier_of(policy, op_cap("x"), D(5)) == "explicit"


# --- helpers ------------------------------------------------------------------------------


def test_day_start_is_the_start_of_the_utc_day() -> None:
    now = datetime(2026, 3, 5, 17, 45, 12, 345, tzinfo=UTC)
    assert Policy.day_start(now) == datetime(2026, 3, 5, tzinfo=UTC)
    assert Policy.day_start(datetime(2026, 3, 5, tzinfo=UTC)) == datetime(2026, 3, 5, tzinfo=UTC)
    # 01:00 in UTC+2 is still the previous day in UTC
    local = datetime(2026, 3, 6, 1, 0, tzinfo=timezone(timedelta(hours=2)))
    assert Policy.day_start(local) == datetime(2026, 3, 5, tzinfo=UTC)


TIERS: tuple[TierName, ...] = get_args(TierName)


def test_tier_names() -> None:
    assert TIERS == ("auto", "confirm", "explicit", "deny")


@pytest.mark.parametrize("a", TIERS)
@pytest.mark.parametrize("b", TIERS)
def test_higher(a: TierName, b: TierName) -> None:
    expected = a if ORDER[a] >= ORDER[b] else b
    assert Policy.higher(a, b) == expected
    assert Policy.higher(b, a) == expected


def test_higher_examples() -> None:
    assert Policy.higher("auto", "confirm") == "confirm"
    assert Policy.higher("explicit", "confirm") == "explicit"
    assert Policy.higher("deny", "explicit") == "deny"
    assert Policy.higher("auto", "auto") == "auto"


# --- a property ---------------------------------------------------------------------------

amounts = st.decimals(min_value=0, max_value=100_000, places=2, allow_nan=False)
limits = st.one_of(st.none(), st.decimals(min_value=0, max_value=10_000, places=2))
custom = st.one_of(
    st.none(),
    st.tuples(amounts, amounts, st.one_of(st.none(), amounts)).map(
        lambda t: Threshold(min(t[0], t[1]), max(t[0], t[1]), t[2])
    ),
)


OP_CAPS = {op: op_cap(op) for op in [*PRESETS["balanced"], "custom_op"]}
declared = st.one_of(
    st.none(),
    st.builds(
        lambda t, confirm, deny: Operation(
            "custom_op",
            auto_below=min(t),
            confirm_below=max(t) if confirm else None,
            deny_above=deny,
        ),
        st.tuples(amounts, amounts),
        st.booleans(),
        st.one_of(st.none(), amounts),
    ),
    st.sampled_from(TIERS).map(lambda tier: Operation("custom_op", tier=tier)),
)


@given(
    preset=st.one_of(st.none(), st.sampled_from(sorted(PRESETS))),
    operation=st.sampled_from(sorted(OP_CAPS)),
    threshold=custom,
    limit=limits,
    spent=amounts,
    a=amounts,
    b=amounts,
    custom_op=declared,
)
def test_a_larger_amount_never_lowers_the_tier(
    preset: str | None,
    operation: str,
    threshold: Threshold | None,
    limit: Decimal | None,
    spent: Decimal,
    a: Decimal,
    b: Decimal,
    custom_op: Operation | None,
) -> None:
    thresholds = {operation: threshold} if threshold is not None else {}
    # a declared custom_op, unless a threshold of that name is given
    operations = [custom_op] if custom_op is not None and "custom_op" not in thresholds else []
    policy = Policy(
        preset=preset,
        thresholds=thresholds,
        operations=operations,
        daily_autonomous_limit_usd=limit,
    )
    cap = OP_CAPS[operation]
    low, high = min(a, b), max(a, b)
    low_tier = tier_of(policy, cap, low, spent_today=spent)
    high_tier = tier_of(policy, cap, high, spent_today=spent)
    assert ORDER[low_tier] <= ORDER[high_tier], (low, low_tier, high, high_tier)


def test_negative_amount_is_never_automatic() -> None:
    @capability(kind="execute", operation="send")
    async def send(amount: str) -> str:
        """Send."""
        return amount

    decision = Policy().decide(send, Decimal("-5"))
    assert decision.tier == "confirm"

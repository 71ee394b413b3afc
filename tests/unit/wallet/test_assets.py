"""Money is Decimal at each asset's precision; floats, bools and NaN never pass."""

from __future__ import annotations

from decimal import Decimal

import pytest

from fiduciary.wallet.assets import ASSETS, get_asset, mentioned_assets, money, usd
from fiduciary.wallet.errors import LedgerError, WalletError


@pytest.mark.parametrize("value", [0.1, 1.0, float("nan"), True, None, [1], b"1"])
def test_money_refuses_what_is_not_money(value: object) -> None:
    with pytest.raises(LedgerError):
        money(value)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-inf", "ten"])
def test_money_refuses_non_finite_and_garbage_text(value: str) -> None:
    with pytest.raises(LedgerError):
        money(value)


def test_money_accepts_decimals_ints_and_text() -> None:
    assert money(Decimal("1.5")) == Decimal("1.5")
    assert money(3) == Decimal(3)
    assert money(" 1,234.50 ") == Decimal("1234.50")


def test_units_are_exact_and_refuse_finer_amounts() -> None:
    usdc = get_asset("usdc")
    assert usdc.units(Decimal("12.345678")) == 12_345_678
    assert usdc.from_units(12_345_678) == Decimal("12.345678")
    with pytest.raises(LedgerError, match="finer than 6 decimals"):
        usdc.units(Decimal("0.0000001"))


def test_parse_refuses_non_positive_too_precise_and_floats() -> None:
    sui = get_asset("SUI")
    assert sui.parse("1.000000001") == Decimal("1.000000001")
    for bad, message in [
        ("0", "must be positive"),
        ("-1", "must be positive"),
        ("1.0000000001", "more decimals than SUI allows"),
        (0.5, "float"),
    ]:
        with pytest.raises(WalletError, match=message) as caught:
            sui.parse(bad)
        assert caught.value.code == "invalid_amount"


def test_unknown_and_unsupported_assets_name_the_choices() -> None:
    with pytest.raises(WalletError, match="known: USDC, USDT") as unknown:
        get_asset("DOGE")
    assert unknown.value.code == "unknown_asset"
    with pytest.raises(WalletError, match="use one of USDC") as unsupported:
        get_asset("ETH", among=["USDC"])
    assert unsupported.value.code == "unsupported_asset"


def test_format_is_for_people() -> None:
    assert get_asset("USDC").format(Decimal("1000")) == "1,000.00"
    assert get_asset("USDC").format(Decimal("0.123456")) == "0.123456"
    assert get_asset("SUI").format(Decimal("150.500000000")) == "150.5"
    assert get_asset("BTC").format(Decimal("2")) == "2"
    assert usd(Decimal("1.005")) == Decimal("1.00")  # banker's rounding, to the cent


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("swap 15 USDC for SUI", {"USDC", "SUI"}),
        ("send some bitcoin to Bob", {"BTC"}),
        ("pay $20 to Ann", {"USDC", "USDT"}),
        ("move 20 dollars", {"USDC", "USDT"}),
        ("take a deep breath", set()),
        ("buy DEEP and WAL", {"DEEP", "WAL"}),
        ("what is my balance?", set()),
        ("convert ether to tether", {"ETH", "USDT"}),
    ],
)
def test_mentioned_assets(text: str, named: set[str]) -> None:
    assert mentioned_assets(text) == named


def test_every_asset_has_a_price_and_a_precision() -> None:
    for asset in ASSETS.values():
        assert asset.base_price > 0
        assert 0 < asset.decimals <= 9

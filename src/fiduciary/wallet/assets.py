"""Assets and money: what the paper wallet can hold, and how an amount becomes a ledger amount.

Money is ``Decimal`` end to end. ``money`` is the one door into the ledger path: it refuses a
float (``0.1`` is not a tenth), a bool, NaN and infinities, and ``Asset.units`` refuses an
amount finer than the asset's precision rather than round it silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_DOWN, ROUND_HALF_EVEN, Decimal, InvalidOperation

from .errors import LedgerError, WalletError

__all__ = [
    "ASSETS",
    "STABLECOINS",
    "Asset",
    "get_asset",
    "mentioned_assets",
    "money",
    "usd",
]

CENT = Decimal("0.01")


@dataclass(frozen=True, slots=True)
class Asset:
    """A token: its symbol, its precision, and how its simulated price behaves."""

    symbol: str
    name: str
    decimals: int
    base_price: Decimal  # USD, around which the price path moves
    volatility: Decimal  # how far the price path swings (0: pegged to base_price)
    aliases: tuple[str, ...] = ()  # words a person may use for it, matched case-insensitively

    @property
    def quantum(self) -> Decimal:
        """The smallest amount of the asset (1e-decimals)."""
        return Decimal(1).scaleb(-self.decimals)

    def quantize(self, amount: Decimal, *, rounding: str = ROUND_DOWN) -> Decimal:
        """The amount at the asset's precision (down by default: never give more than exists)."""
        return money(amount).quantize(self.quantum, rounding=rounding)

    def units(self, amount: Decimal) -> int:
        """The amount in the asset's smallest units; an amount finer than that is refused."""
        value = money(amount)
        scaled = value.scaleb(self.decimals)
        if scaled != scaled.to_integral_value():
            raise LedgerError(f"{value} {self.symbol} is finer than {self.decimals} decimals")
        return int(scaled)

    def from_units(self, units: int) -> Decimal:
        return Decimal(units).scaleb(-self.decimals).quantize(self.quantum)

    def parse(self, amount: object, *, what: str = "amount") -> Decimal:
        """A person's (or model's) amount: positive, finite, within the asset's precision."""
        try:
            value = money(amount, what=what)
        except LedgerError as exc:
            raise WalletError("invalid_amount", str(exc)) from None
        if value <= 0:
            raise WalletError("invalid_amount", f"the {what} must be positive, not {value}")
        if value != value.quantize(self.quantum, rounding=ROUND_DOWN):
            raise WalletError(
                "invalid_amount",
                f"{value} {self.symbol} has more decimals than {self.symbol} allows "
                f"({self.decimals})",
            )
        return value.quantize(self.quantum)

    def format(self, amount: Decimal) -> str:
        """For people: trailing zeros dropped, at least two decimals for stablecoins."""
        value = self.quantize(amount)
        if self.symbol in STABLECOINS:
            return f"{value.quantize(CENT) if value == value.quantize(CENT) else value:,}"
        text = f"{value:,f}"
        return text.rstrip("0").rstrip(".") if "." in text else text


def _asset(
    symbol: str, name: str, decimals: int, price: str, vol: str, *aliases: str
) -> tuple[str, Asset]:
    return symbol, Asset(symbol, name, decimals, Decimal(price), Decimal(vol), aliases)


ASSETS: Mapping[str, Asset] = dict(
    [
        _asset("USDC", "USD Coin", 6, "1", "0", "usdc", "usd coin"),
        _asset("USDT", "Tether USD", 6, "1", "0", "usdt", "tether"),
        _asset("SUI", "Sui", 9, "3.50", "1.2", "sui"),
        _asset("ETH", "Ether", 8, "3200", "0.8", "eth", "ether", "ethereum", "weth"),
        _asset("BTC", "Bitcoin", 8, "95000", "0.6", "btc", "bitcoin", "wbtc"),
        _asset("WAL", "Walrus", 9, "0.45", "1.5", "walrus"),
        _asset("DEEP", "DeepBook", 6, "0.12", "1.6", "deepbook"),
        _asset("NAVX", "NAVI Protocol", 9, "0.08", "1.7", "navx"),
    ]
)
STABLECOINS = frozenset({"USDC", "USDT"})


def get_asset(symbol: object, *, among: Iterable[str] | None = None) -> Asset:
    """The asset named by a symbol (any case); ``among`` narrows what this use accepts."""
    key = str(symbol).strip().upper()
    found = ASSETS.get(key)
    if found is None:
        known = ", ".join(ASSETS)
        raise WalletError("unknown_asset", f"unknown asset {str(symbol)!r}; known: {known}")
    if among is not None:
        allowed = list(among)
        if key not in allowed:
            raise WalletError(
                "unsupported_asset", f"{key} is not accepted here; use one of {', '.join(allowed)}"
            )
    return found


def money(value: object, *, what: str = "amount") -> Decimal:
    """``value`` as a finite Decimal. A float, a bool or anything unparseable is refused."""
    if isinstance(value, float):
        raise LedgerError(f"the {what} {value!r} is a float; money must be a Decimal or a string")
    if isinstance(value, bool):
        raise LedgerError(f"the {what} {value!r} is a bool, not money")
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, int | str):
        try:
            result = Decimal(str(value).strip().replace(",", "").replace("_", ""))
        except InvalidOperation:
            raise LedgerError(f"the {what} {value!r} is not a number") from None
    else:
        raise LedgerError(f"the {what} {value!r} ({type(value).__name__}) is not money")
    if not result.is_finite():
        raise LedgerError(f"the {what} {value!r} is not a finite number")
    return result


def usd(value: Decimal) -> Decimal:
    """A USD figure for people and policies: to the cent."""
    return money(value).quantize(CENT, rounding=ROUND_HALF_EVEN)


_DOLLARS = re.compile(r"\$\s?\d|\b(?:usd|dollars?|bucks)\b", re.IGNORECASE)


def mentioned_assets(text: str) -> set[str]:
    """The assets a person names in a message: symbols (in capitals), names, common aliases.

    Dollars ("$20", "20 dollars", "USD") name the stablecoins. Symbols that are also English
    words (DEEP, WAL) count only in capitals, so "a deep dive" names nothing.
    """
    found: set[str] = set()
    for asset in ASSETS.values():
        if re.search(rf"(?<![A-Za-z0-9]){asset.symbol}(?![A-Za-z0-9])", text):
            found.add(asset.symbol)
            continue
        for alias in asset.aliases:
            if re.search(rf"(?<![A-Za-z0-9]){re.escape(alias)}(?![A-Za-z0-9])", text, re.I):
                found.add(asset.symbol)
                break
    if _DOLLARS.search(text):
        found |= STABLECOINS
    return found

"""The writes the paper wallet performs, as values: what a call asks, before any checking.

``PaperWallet.execute`` posts one; ``PaperWallet.preview`` runs the same code and rolls back,
which is how guards learn what a call would do (funds, health factor) without doing it.
``operation_for`` builds one from a capability call's arguments in their JSON form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any, TypeAlias

from ..capabilities import args_digest

__all__ = [
    "Borrow",
    "ClaimRewards",
    "Deposit",
    "HarvestRewards",
    "Operation",
    "Repay",
    "Send",
    "Swap",
    "Withdraw",
    "fingerprint",
    "operation_for",
]


@dataclass(frozen=True, slots=True)
class Deposit:
    asset: str
    amount: Decimal


@dataclass(frozen=True, slots=True)
class Withdraw:
    asset: str
    amount: Decimal | None  # None: everything saved in the asset


@dataclass(frozen=True, slots=True)
class Send:
    to: str  # an address or a saved contact's name
    asset: str
    amount: Decimal
    memo: str = ""


@dataclass(frozen=True, slots=True)
class Borrow:
    asset: str
    amount: Decimal


@dataclass(frozen=True, slots=True)
class Repay:
    asset: str
    amount: Decimal | None  # None: the whole debt in the asset


@dataclass(frozen=True, slots=True)
class ClaimRewards:
    pass


@dataclass(frozen=True, slots=True)
class HarvestRewards:
    max_slippage: Decimal | None = None  # a fraction; None: the wallet's default


@dataclass(frozen=True, slots=True)
class Swap:
    from_asset: str
    to_asset: str
    amount: Decimal  # of from_asset
    max_slippage: Decimal | None = None  # a fraction; None: the wallet's default
    quote_id: str | None = None


Operation: TypeAlias = (
    Deposit | Withdraw | Send | Borrow | Repay | ClaimRewards | HarvestRewards | Swap
)

KIND: Mapping[type[Any], str] = {
    Deposit: "save",
    Withdraw: "withdraw",
    Send: "send",
    Borrow: "borrow",
    Repay: "repay",
    ClaimRewards: "claim",
    HarvestRewards: "harvest",
    Swap: "swap",
}


def fingerprint(op: Operation) -> str:
    """The digest of a request: a replayed key must come with the same request."""
    body = {k: None if v is None else str(v) for k, v in asdict(op).items()}
    return args_digest({"operation": KIND[type(op)], **body})


def _amount(value: Any) -> Decimal | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "all"):
        return None
    return Decimal(str(value))


def _pct(value: Any) -> Decimal | None:
    return None if value is None else Decimal(str(value)) / 100


def operation_for(name: str, args: Mapping[str, Any]) -> Operation | None:
    """The operation a wallet capability call asks for (``None``: not a ledger write)."""
    try:
        match name:
            case "save_deposit":
                return Deposit(str(args["asset"]), _amount(args["amount"]) or Decimal(0))
            case "withdraw":
                return Withdraw(str(args["asset"]), _amount(args.get("amount", "all")))
            case "send_transfer":
                return Send(
                    str(args["to"]),
                    str(args["asset"]),
                    _amount(args["amount"]) or Decimal(0),
                    str(args.get("memo") or ""),
                )
            case "borrow":
                return Borrow(str(args["asset"]), _amount(args["amount"]) or Decimal(0))
            case "repay_debt":
                return Repay(str(args["asset"]), _amount(args.get("amount", "all")))
            case "claim_rewards":
                return ClaimRewards()
            case "harvest_rewards":
                return HarvestRewards(_pct(args.get("max_slippage_pct")))
            case "swap_execute":
                return Swap(
                    str(args["from_asset"]),
                    str(args["to_asset"]),
                    _amount(args["amount"]) or Decimal(0),
                    _pct(args.get("max_slippage_pct")),
                    args.get("quote_id"),
                )
    except (KeyError, ArithmeticError, ValueError):
        return None
    return None

"""The wallet's post-execution guards: what a careful person checks once money moved.

They run after a write's ``tool_call_end`` (``phase = "post"``) and speak with a hint or a
warning (``post_guard_fired``): the model tells the person, the console shows it beside the
result. Both judge the write's receipt against what the run had shown before it:

| guard | tier | fires on | verdict |
| --- | --- | --- | --- |
| balance_promise | financial | an available balance after a write that is not the last | warn |
| | | read balance moved by the write's own changes | |
| swap_price | financial | a swap that gave less than its quote by more than the | warn |
| | | slippage stated (or the wallet's default) | |

``balance_promise``: the promise is what the person was shown — the balance the run last read
(``balance_check`` of their own wallet) — and what the write said it would change (its
receipt's changes). Another payment, another device, another run of the same person between
the read and the write make the two differ: the guard says by how much, so the person is not
left believing the figure they saw. ``swap_price``: the quote is the run's latest
``swap_quote`` of the same pair (the one whose ``quote_id`` the swap passed, else one of the
same amount within the quote tolerance), scaled to the amount swapped. A swap that passed its
``quote_id`` is held to the slippage by the wallet itself; one without (or on a live chain)
is not, and this is what notices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..guards import CallRecord, GuardCall, GuardTier, Phase, Verdict
from .guards import FinanceGuardConfig, _decimal, _upper
from .wallet import PaperWallet

__all__ = ["BalancePromiseGuard", "SwapPriceGuard", "post_guards"]


def _own_available(record: CallRecord) -> dict[str, Decimal] | None:
    """The available balances a successful balance read of the person's own wallet showed."""
    report = record.body()
    if not isinstance(report, Mapping) or report.get("whose") != "yours":
        return None
    shown: dict[str, Decimal] = {}
    for holding in report.get("available") or ():
        if isinstance(holding, Mapping):
            amount = _decimal(holding.get("amount"))
            if amount is not None:
                shown[str(holding.get("asset"))] = amount
    return shown


def _receipt(output: Any) -> tuple[dict[str, Decimal], dict[str, Decimal]] | None:
    """A receipt's changes to, and balances after, the person's available books, per asset."""
    if not isinstance(output, Mapping):
        return None
    books: list[dict[str, Decimal]] = []
    for key in ("changes", "balances"):
        rows = output.get(key)
        if not isinstance(rows, list):
            return None
        found: dict[str, Decimal] = {}
        for row in rows:
            if isinstance(row, Mapping) and row.get("book") == "available":
                amount = _decimal(row.get("amount"))
                if amount is not None:
                    asset = str(row.get("asset"))
                    found[asset] = found.get(asset, Decimal(0)) + amount
        books.append(found)
    return books[0], books[1]


@dataclass
class _PostGuard:
    wallet: PaperWallet
    config: FinanceGuardConfig
    name = ""
    tier: GuardTier = "financial"
    phase: Phase = "post"

    def check(self, call: GuardCall) -> Verdict:
        raise NotImplementedError


@dataclass
class BalancePromiseGuard(_PostGuard):
    """The available balance after a write is not what the last read and the write promised."""

    name = "balance_promise"

    def check(self, call: GuardCall) -> Verdict:
        if not call.capability.is_write:
            return Verdict.ok()
        receipt = _receipt(call.output)
        if receipt is None:
            return Verdict.ok()
        changes, after = receipt
        shown = self._last_read(call)
        if shown is None:
            return Verdict.ok()
        for asset, change in changes.items():
            if asset not in after:
                continue
            promised = shown.get(asset, Decimal(0)) + change
            actual = after[asset]
            if actual != promised:
                gap = actual - promised
                return Verdict.warn(
                    f"after {call.capability.name} the available {asset} is {actual}, not the "
                    f"{promised} that the last balance read and this call's own change "
                    f"({change:+}) implied: something else moved {gap:+} {asset} in between. "
                    "Tell the person the actual balance, and read the balance before the next "
                    "write.",
                    for_person=f"Your available {asset} is now {actual}, not the {promised} "
                    f"you were shown: {gap:+} {asset} moved in between by something else.",
                )
        return Verdict.ok()

    def _last_read(self, call: GuardCall) -> dict[str, Decimal] | None:
        for record in reversed(call.earlier()):
            if record.name == "balance_check" and record.ok:
                return _own_available(record)
        return None


@dataclass
class SwapPriceGuard(_PostGuard):
    """A swap's realised price is worse than its quote by more than the slippage stated."""

    name = "swap_price"

    def check(self, call: GuardCall) -> Verdict:
        if call.capability.name != "swap_execute" or not isinstance(call.output, Mapping):
            return Verdict.ok()
        details = call.output.get("details")
        if not isinstance(details, Mapping):
            return Verdict.ok()
        got = _decimal(details.get("amount_out"))
        paid = _decimal(details.get("amount_in"))
        quote = self._quote(call)
        if got is None or not paid or quote is None:
            return Verdict.ok()
        quoted_in, quoted_out = _decimal(quote.get("amount_in")), _decimal(quote.get("amount_out"))
        if not quoted_in or quoted_out is None:
            return Verdict.ok()
        expected = quoted_out * paid / quoted_in
        stated = _decimal(call.args.get("max_slippage_pct"))
        slippage = stated if stated is not None else self.wallet.config.default_slippage * 100
        if expected <= 0 or got >= expected * (1 - slippage / 100):
            return Verdict.ok()
        short = (expected - got) / expected * 100
        asset = _upper(call.args.get("to_asset"))
        return Verdict.warn(
            f"the swap gave {got} {asset}, {short:.2f}% less than the {expected:.6f} quoted: "
            f"worse than the {slippage}% slippage "
            f"{'stated' if stated is not None else 'the wallet allows by default'}. Tell the "
            "person the realised price.",
            for_person=f"This swap gave {got} {asset}, {short:.2f}% less than quoted — more "
            f"than the {slippage}% slippage {'you accepted' if stated is not None else 'allowed'}.",
        )

    def _quote(self, call: GuardCall) -> Mapping[str, Any] | None:
        pair = (_upper(call.args.get("from_asset")), _upper(call.args.get("to_asset")))
        quote_id = call.args.get("quote_id")
        amount = _decimal(call.args.get("amount"))
        for record in reversed(call.earlier()):
            if record.name != "swap_quote" or not record.ok:
                continue
            quote = record.body()
            if not isinstance(quote, Mapping):
                continue
            if quote_id:
                if quote.get("quote_id") == quote_id:
                    return quote
                continue
            if (_upper(quote.get("from_asset")), _upper(quote.get("to_asset"))) != pair:
                continue
            quoted = _decimal(quote.get("amount_in"))
            tolerance = self.config.quote_amount_tolerance
            if quoted and amount is not None and abs(quoted - amount) <= quoted * tolerance:
                return quote
        return None


def post_guards(wallet: PaperWallet, config: FinanceGuardConfig | None = None) -> list[_PostGuard]:
    """The wallet's post-execution guards over ``wallet``."""
    cfg = config or FinanceGuardConfig()
    return [BalancePromiseGuard(wallet, cfg), SwapPriceGuard(wallet, cfg)]

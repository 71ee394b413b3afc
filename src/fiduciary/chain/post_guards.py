"""The chain's post-execution guards: after a write's receipt, what the chain says against
what the person was promised. They speak with a hint or a warning (``post_guard_fired``, after
the call's ``tool_call_end``); nothing can be undone by then. Their facts come from the chain
after the receipt (``effects``: the stablecoin the transaction moved, the balance at its block,
a swap's realised output), and from what the run showed before the write.

| guard | fires on | verdict |
| --- | --- | --- |
| balance_promise | the stablecoin the transaction moved is not the amount its card named | warn |
| | the balance at its block is not the run's last read of it plus that change | warn |
| swap_price | a swap realised less than the run's last quote of it, beyond the slippage | warn |
| | less than the quote, within the slippage approved | hint |

Only the stablecoin is held to a promise: every write also pays gas in the native coin, whose
price is not known to the wei before the block.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from ..guards import GuardCall, GuardTier, Phase, Verdict
from .config import ChainConfig

__all__ = ["ChainBalancePromiseGuard", "ChainSwapPriceGuard", "chain_post_guards"]

QUOTE_TOLERANCE = Decimal("0.01")  # a quote of an amount within 1% is the swap's quote


def _decimal(value: Any) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None


class ChainBalancePromiseGuard:
    """The stablecoin balance after a chain write is not what its card and the last read
    promised."""

    name = "balance_promise"
    tier: GuardTier = "financial"
    phase: Phase = "post"

    def __init__(self, config: ChainConfig) -> None:
        self.symbol = config.token_symbol

    def check(self, call: GuardCall) -> Verdict:
        out = call.output
        if not call.capability.is_write or not isinstance(out, Mapping):
            return Verdict.ok()
        change = _decimal(out.get("token_change"))
        after = _decimal(out.get("token_balance_after"))
        if change is None or after is None:
            return Verdict.ok()
        promised = self._promised_change(call)
        sym = self.symbol
        if promised is not None and change != promised:
            return Verdict.warn(
                f"{call.capability.name} moved {change:+} {sym} on chain, not the {promised:+} "
                "its card named. Tell the person the actual amount.",
                for_person=f"This transaction moved {change:+} {sym}, not the {promised:+} "
                "you approved.",
            )
        shown = self._last_read(call)
        if shown is None or shown + change == after:
            return Verdict.ok()
        gap = after - (shown + change)
        return Verdict.warn(
            f"after {call.capability.name} the wallet holds {after} {sym} on chain, not the "
            f"{shown + change} that the last balance read ({shown}) and this transaction "
            f"({change:+}) implied: something else moved {gap:+} {sym} in between. Tell the "
            "person the actual balance.",
            for_person=f"Your {sym} is now {after}, not the {shown + change} you were shown: "
            f"{gap:+} {sym} moved in between by something else.",
        )

    def _promised_change(self, call: GuardCall) -> Decimal | None:
        """The stablecoin the card said this write moves (None: it named no such amount)."""
        args, name, sym = call.args, call.capability.name, self.symbol.upper()
        amount = _decimal(args.get("amount"))
        if amount is None:
            return None  # "all": the shares are counted when the transaction is built
        if name == "send_transfer" and str(args.get("asset", "")).upper() == sym:
            return -amount
        if name == "save_deposit":
            return -amount
        if name == "withdraw":
            return amount
        if name == "swap_execute" and str(args.get("from_asset", "")).upper() == sym:
            return -amount
        return None

    def _last_read(self, call: GuardCall) -> Decimal | None:
        for record in reversed(call.earlier()):
            if record.name != "balance_check" or not record.ok:
                continue
            if record.input.get("address"):
                continue  # another address's balance: not the wallet's
            report = record.body()
            if isinstance(report, Mapping) and isinstance(report.get("balances"), Mapping):
                return _decimal(report["balances"].get(self.symbol))
            return None
        return None


class ChainSwapPriceGuard:
    """A swap realised less than the quote the run showed for it."""

    name = "swap_price"
    tier: GuardTier = "financial"
    phase: Phase = "post"

    def check(self, call: GuardCall) -> Verdict:
        out = call.output
        if call.capability.name != "swap_execute" or not isinstance(out, Mapping):
            return Verdict.ok()
        got = _decimal(out.get("amount_out"))
        amount = _decimal(call.args.get("amount"))
        quote = self._quote(call, amount)
        if got is None or not amount or quote is None:
            return Verdict.ok()
        quoted_in, quoted_out = (
            _decimal(quote.get("amount_in")),
            _decimal(quote.get("expected_out")),
        )
        if not quoted_in or not quoted_out:
            return Verdict.ok()
        expected = quoted_out * amount / quoted_in
        if got >= expected:
            return Verdict.ok()
        slip = _decimal(call.args.get("max_slippage_pct"))
        slip = Decimal(1) if slip is None else slip
        short = (expected - got) / expected * 100
        asset = str(call.args.get("to_asset", "")).upper()
        if got < expected * (1 - slip / 100):
            return Verdict.warn(
                f"the swap gave {got} {asset}, {short:.2f}% less than the {expected} quoted: "
                f"worse than the {slip}% slippage approved (the pool's price moved before the "
                "swap was signed). Tell the person the realised price.",
                for_person=f"This swap gave {got} {asset}, {short:.2f}% less than quoted — "
                f"more than the {slip}% slippage you approved.",
            )
        return Verdict.hint(
            f"the swap gave {got} {asset}, {short:.2f}% less than the {expected} quoted "
            f"(within the {slip}% slippage approved). Tell the person the realised amount.",
            for_person=f"This swap gave {got} {asset}, {short:.2f}% less than quoted, "
            f"within the {slip}% slippage you approved.",
        )

    def _quote(self, call: GuardCall, amount: Decimal | None) -> Mapping[str, Any] | None:
        """The run's latest quote of this pair for about this amount."""
        pair = (
            str(call.args.get("from_asset", "")).upper(),
            str(call.args.get("to_asset", "")).upper(),
        )
        for record in reversed(call.earlier()):
            if record.name != "swap_quote" or not record.ok:
                continue
            quote = record.body()
            if not isinstance(quote, Mapping):
                continue
            if (str(quote.get("from_asset")).upper(), str(quote.get("to_asset")).upper()) != pair:
                continue
            quoted = _decimal(quote.get("amount_in"))
            if quoted and amount is not None and abs(quoted - amount) <= quoted * QUOTE_TOLERANCE:
                return quote
        return None


def chain_post_guards(config: ChainConfig) -> list[ChainBalancePromiseGuard | ChainSwapPriceGuard]:
    """The chain's post-execution guards (``chain_guards`` includes them)."""
    return [ChainBalancePromiseGuard(config), ChainSwapPriceGuard()]

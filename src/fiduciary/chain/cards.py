"""What an approval card says about a send beyond its arguments: from, to (EIP-55; a contract
or a person's address, said in words), the token contract and the amount in its units, the gas
limit and the maximum fee in USD, and the result of simulating the transaction (``eth_call``)
before anyone is asked. Computed when the policy prices the call (which may await the node)
and read when the card is written (which may not); kept for the last few calls only."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from decimal import Decimal
from typing import Any, cast

from eth_typing import ChecksumAddress
from web3.exceptions import ContractLogicError, Web3Exception
from web3.types import TxParams

from .addresses import checked_recipient
from .errors import ChainError
from .wallet import NATIVE_DECIMALS, ChainWallet, reason_of

__all__ = ["SendCards"]

KEPT = 256


class SendCards:
    def __init__(self, wallet: ChainWallet) -> None:
        self.wallet = wallet
        self._facts: OrderedDict[tuple[str, str, str], str] = OrderedDict()

    async def price(self, args: Any, ctx: object) -> Decimal | None:
        """The send's amount in USD (the policy's ``amount_usd``); the card's facts on the way."""
        key = _key(args)
        try:
            facts = await self._simulate(str(args.to), str(args.asset).upper(), args.amount)
        except ChainError as exc:
            facts = f"simulated: refused ({exc.message})"
        except (Web3Exception, OSError, TimeoutError):
            facts = "simulated: the node could not be asked"
        self._facts[key] = facts
        self._facts.move_to_end(key)
        while len(self._facts) > KEPT:
            self._facts.popitem(last=False)
        return self.wallet.usd_value(args.asset, args.amount)

    def describe(self, args: Any) -> str:
        facts = self._facts.get(_key(args))
        return "" if facts is None else f"; {facts}"

    async def _simulate(self, to: str, symbol: str, amount: Decimal) -> str:
        wallet, cfg = self.wallet, self.wallet.config
        recipient = checked_recipient(to, token=cfg.token, token_symbol=cfg.token_symbol)
        code, built = await asyncio.gather(
            wallet.w3.eth.get_code(cast(ChecksumAddress, recipient)),
            wallet.build_send(recipient, symbol, amount),
            return_exceptions=True,
        )
        for answer in (built, code):  # the build's refusal first: it says why
            if isinstance(answer, BaseException):
                raise answer
        tx = cast(dict[str, Any], built)
        kind = (
            "a contract" if len(cast(bytes, code)) > 0 else "a person's address (no contract code)"
        )
        if symbol == cfg.token_symbol.upper():
            what = f"{int(amount.scaleb(cfg.token_decimals))} units of {symbol} at {cfg.token}"
        else:
            what = f"{int(amount.scaleb(NATIVE_DECIMALS))} wei of {symbol}"
        fee = Decimal(int(tx["gas"]) * int(tx["maxFeePerGas"])).scaleb(-NATIVE_DECIMALS)
        fee_usd = wallet.usd_value(cfg.native_symbol, fee)
        shown_fee = (
            f"about ${fee_usd:,.2f}" if fee_usd is not None else f"{fee} {cfg.native_symbol}"
        )
        call = {k: tx[k] for k in ("to", "value", "data")} | {"from": wallet.address}
        try:
            await wallet.w3.eth.call(cast(TxParams, call))
            simulated = "succeeds"
        except (ContractLogicError, Web3Exception) as exc:
            simulated = f"fails ({reason_of(exc)})"
        return (
            f"from {wallet.address}, to {recipient} ({kind}); {what}; chain {cfg.chain_id}; "
            f"gas limit {tx['gas']}, max fee {shown_fee}; simulated: {simulated}"
        )


def _key(args: Any) -> tuple[str, str, str]:
    return (str(args.to).lower(), str(args.asset).upper(), str(args.amount))

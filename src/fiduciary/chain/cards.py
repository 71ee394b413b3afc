"""What an approval card says about a send beyond its arguments: from, to (EIP-55; a contract
or a person's address, said in words), the token contract and the amount in its units, the gas
limit and the maximum fee in USD, and the result of simulating the transaction (``eth_call``)
before anyone is asked. Asked only when a person will see the card (the gates await a card's
text for a pending approval alone): an auto-tier send, whose card nobody sees, costs the node
no ``eth_getCode`` and no ``eth_call``."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any, cast

from eth_typing import ChecksumAddress
from web3.exceptions import ContractLogicError, Web3Exception
from web3.types import TxParams

from .addresses import checked_recipient
from .errors import ChainError
from .wallet import NATIVE_DECIMALS, ChainWallet, reason_of

__all__ = ["SendCards"]


class SendCards:
    def __init__(self, wallet: ChainWallet) -> None:
        self.wallet = wallet

    async def facts(self, args: Any) -> str:
        """The card's facts about a send, simulated on the node now."""
        try:
            return await self._simulate(str(args.to), str(args.asset).upper(), args.amount)
        except ChainError as exc:
            return f"simulated: refused ({exc.message})"
        except (Web3Exception, OSError, TimeoutError):
            return "simulated: the node could not be asked"

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

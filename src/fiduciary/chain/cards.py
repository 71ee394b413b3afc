"""What an approval card says about a chain write beyond its arguments: the chain id, from, to
(EIP-55; a contract or a person's address, said in words), the token and the amount in its
units and in USD, the gas limit and the maximum fee in USD, and the result of simulating the
call before anyone is asked — for a send, a save, a withdrawal and a swap. Asked only when a
person will see the card (the gates await a card's text for a pending approval alone): an
auto-tier call, whose card nobody sees, costs the node no ``eth_getCode`` and no ``eth_call``.

``gas_usd`` is the most a call's transactions may cost in gas, in USD: the capabilities add it
to the amount the policy's thresholds and daily limit see. A second transaction that needs the
first mined (a deposit after its allowance, a swap of the token after its allowance) cannot be
estimated before it: it counts as ``FOLLOW_UP_GAS`` at the first one's maximum fee."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any, cast

from eth_typing import ChecksumAddress
from eth_utils.address import to_checksum_address
from web3.exceptions import ContractLogicError, Web3Exception
from web3.types import TxParams

from .addresses import checked_recipient
from .errors import ChainError
from .swaps import _path, _router, _side, quote
from .wallet import NATIVE_DECIMALS, ChainWallet, reason_of

__all__ = ["FOLLOW_UP_GAS", "ChainCards"]

FOLLOW_UP_GAS = 250_000


class ChainCards:
    def __init__(self, wallet: ChainWallet) -> None:
        self.wallet = wallet

    # -- the policy's amount: the value moved plus the most the gas may cost ---------------

    async def gas_usd(self, op: str, args: Any) -> Decimal:
        """The maximum fee of the call's transactions in USD (0 when it cannot be built: the
        call is refused before signing anyway, and its card says why)."""
        try:
            txs, follow = await self._planned(op, args)
        except (ChainError, Web3Exception, OSError, TimeoutError):
            return Decimal(0)
        gas = sum(int(tx["gas"]) for tx in txs) + (FOLLOW_UP_GAS if follow else 0)
        return self.wallet.fee_usd(gas, int(txs[0]["maxFeePerGas"])) or Decimal(0)

    async def _planned(self, op: str, args: Any) -> tuple[list[dict[str, Any]], bool]:
        """The transactions a call would sign first (built and simulated), and whether another
        follows that can only be estimated after them."""
        wallet = self.wallet
        if op == "send":
            to = checked_recipient(
                str(args.to), token=wallet.config.token, token_symbol=wallet.config.token_symbol
            )
            return [await wallet.build_send(to, str(args.asset).upper(), args.amount)], False
        if op == "save":
            return [await wallet.prepare(self._approve(wallet._vault().address, args.amount))], True
        if op == "withdraw":
            return [await wallet.prepare(await self._withdrawal(args.amount))], False
        if op == "swap":
            selling = _side(wallet, args.from_asset, args.to_asset)[0]
            if selling:
                router = _router(wallet).address
                return [await wallet.prepare(self._approve(router, args.amount))], True
            return [await wallet.prepare(await self._swap_in(args))], False
        raise ValueError(op)

    def _approve(self, spender: str, amount: Decimal) -> dict[str, Any]:
        units = int(amount.scaleb(self.wallet.config.token_decimals))
        data = self.wallet.token.encode_abi("approve", args=[spender, units])
        return {"to": self.wallet.token.address, "value": 0, "data": data}

    async def _withdrawal(self, amount: Decimal | str) -> dict[str, Any]:
        vault, me = self.wallet._vault(), to_checksum_address(self.wallet.address)
        if amount == "all":
            shares = int(await vault.functions.maxRedeem(me).call())
            data = vault.encode_abi("redeem", args=[shares, me, me])
        else:
            units = int(Decimal(amount).scaleb(self.wallet.config.token_decimals))
            data = vault.encode_abi("withdraw", args=[units, me, me])
        return {"to": vault.address, "value": 0, "data": data}

    async def _swap_in(self, args: Any) -> dict[str, Any]:
        """The coin → token swap as it would be signed (least output from the quote)."""
        wallet, router = self.wallet, _router(self.wallet)
        slip = Decimal(1) if args.max_slippage_pct is None else args.max_slippage_pct
        priced = await quote(wallet, args.from_asset, args.to_asset, args.amount, slip)
        least = int(priced.least_out.scaleb(wallet.config.token_decimals))
        deadline = int((await wallet.w3.eth.get_block("latest"))["timestamp"]) + 600
        me = to_checksum_address(wallet.address)
        data = router.encode_abi(
            "swapExactETHForTokens", args=[least, _path(wallet, False), me, deadline]
        )
        return {
            "to": router.address,
            "value": int(args.amount.scaleb(NATIVE_DECIMALS)),
            "data": data,
        }

    # -- the card's facts --------------------------------------------------------------------

    async def facts(self, op: str, args: Any) -> str:
        """The card's facts about a call, simulated on the node now."""
        try:
            if op == "send":
                return await self._send(str(args.to), str(args.asset).upper(), args.amount)
            return await self._other(op, args)
        except ChainError as exc:
            return f"simulated: refused ({exc.message})"
        except (Web3Exception, OSError, TimeoutError):
            return "simulated: the node could not be asked"

    def _fee(self, gas: int, tx: dict[str, Any]) -> str:
        cfg = self.wallet.config
        usd = self.wallet.fee_usd(gas, int(tx["maxFeePerGas"]))
        if usd is not None:
            return f"about ${usd:,.2f}"
        fee = Decimal(gas * int(tx["maxFeePerGas"])).scaleb(-NATIVE_DECIMALS)
        return f"{fee} {cfg.native_symbol}"

    async def _kind(self, address: str) -> str:
        code = await self.wallet.w3.eth.get_code(cast(ChecksumAddress, address))
        return "a contract" if len(code) > 0 else "a person's address (no contract code)"

    async def _simulated(self, tx: dict[str, Any]) -> str:
        call = {k: tx[k] for k in ("to", "value", "data")} | {"from": self.wallet.address}
        try:
            await self.wallet.w3.eth.call(cast(TxParams, call))
        except (ContractLogicError, Web3Exception) as exc:
            return f"fails ({reason_of(exc)})"
        return "succeeds"

    def _units(self, amount: Decimal) -> str:
        cfg = self.wallet.config
        return (
            f"{int(amount.scaleb(cfg.token_decimals))} units of {cfg.token_symbol} at {cfg.token}"
        )

    async def _send(self, to: str, symbol: str, amount: Decimal) -> str:
        wallet, cfg = self.wallet, self.wallet.config
        recipient = checked_recipient(to, token=cfg.token, token_symbol=cfg.token_symbol)
        kind, built = await asyncio.gather(
            self._kind(recipient),
            wallet.build_send(recipient, symbol, amount),
            return_exceptions=True,
        )
        for answer in (built, kind):  # the build's refusal first: it says why
            if isinstance(answer, BaseException):
                raise answer
        tx = cast(dict[str, Any], built)
        if symbol == cfg.token_symbol.upper():
            what = self._units(amount)
        else:
            what = f"{int(amount.scaleb(NATIVE_DECIMALS))} wei of {symbol}"
        return (
            f"from {wallet.address}, to {recipient} ({kind}); {what}; chain {cfg.chain_id}; "
            f"gas limit {tx['gas']}, max fee {self._fee(int(tx['gas']), tx)}; "
            f"simulated: {await self._simulated(tx)}"
        )

    async def _other(self, op: str, args: Any) -> str:
        wallet, cfg = self.wallet, self.wallet.config
        txs, follow = await self._planned(op, args)
        first = txs[0]
        to = to_checksum_address(str(first["to"]))
        gas = int(first["gas"])
        if op == "save":
            vault = wallet._vault()
            units = int(args.amount.scaleb(cfg.token_decimals))
            shares = int(await vault.functions.previewDeposit(units).call())
            held = int(await wallet.token.functions.balanceOf(wallet.address).call())
            what = (
                f"{self._units(args.amount)}; two transactions: approve exactly that to the "
                f"vault {vault.address} (gas limit {gas}), then deposit (gas estimated after "
                f"the approval, counted as up to {FOLLOW_UP_GAS})"
            )
            simulated = (
                f"the allowance {await self._simulated(first)}; the deposit would mint "
                f"{shares} shares (previewDeposit)"
                if held >= units
                else f"refused (the wallet holds {Decimal(held).scaleb(-cfg.token_decimals)} "
                f"{cfg.token_symbol})"
            )
        elif op == "withdraw":
            vault = wallet._vault()
            if args.amount == "all":
                shares = int(await vault.functions.maxRedeem(wallet.address).call())
                assets = int(await vault.functions.previewRedeem(shares).call())
                worth = Decimal(assets).scaleb(-cfg.token_decimals)
                what = f"redeem all {shares} shares, about {self._units(worth)}"
            else:
                what = self._units(Decimal(args.amount))
            what += f" from the vault back to {wallet.address}; gas limit {gas}"
            simulated = await self._simulated(first)
        else:  # swap
            slip = Decimal(1) if args.max_slippage_pct is None else args.max_slippage_pct
            priced = await quote(wallet, args.from_asset, args.to_asset, args.amount, slip)
            what = (
                f"{args.amount} {priced.from_asset} for about {priced.expected_out} "
                f"{priced.to_asset}, at least {priced.least_out} (signed into the swap)"
            )
            if follow:
                what += (
                    f"; two transactions: approve exactly {self._units(args.amount)} to the "
                    f"router (gas limit {gas}), then the swap (gas estimated after the approval, "
                    f"counted as up to {FOLLOW_UP_GAS})"
                )
                simulated = f"the allowance {await self._simulated(first)}; quoted from the pool"
            else:
                what += f"; gas limit {gas}"
                simulated = await self._simulated(first)
        total = gas + (FOLLOW_UP_GAS if follow else 0)
        return (
            f"from {wallet.address}, to {to} ({await self._kind(to)}); {what}; chain "
            f"{cfg.chain_id}; max fee {self._fee(total, first)}; simulated: {simulated}"
        )

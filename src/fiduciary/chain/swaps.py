"""Swaps between the stablecoin and the native coin through a Uniswap V2 router: quoted from
the pool's reserves (``getAmountsOut``), bounded by a slippage limit (the least the swap may
return is signed into it) and a deadline (the latest block's time + 10 minutes). The chain
refuses a swap whose output would fall below that least, and so does the simulation before
signing. Token → coin is an exact allowance, then the swap (each its own intent). The receipt
says the output realised (``amount_out``, from the swap's logs) for the post guard."""

from __future__ import annotations

from decimal import ROUND_DOWN, Decimal
from typing import Any

from eth_utils.address import to_checksum_address
from pydantic import BaseModel

from .artifacts import published_abi
from .effects import unwrapped
from .errors import ChainError
from .wallet import NATIVE_DECIMALS, ChainReceipt, ChainWallet, Made

__all__ = ["SwapQuote", "quote", "swap"]

DEADLINE_SECONDS = 600


class SwapQuote(BaseModel):
    from_asset: str
    to_asset: str
    amount_in: Decimal
    expected_out: Decimal
    least_out: Decimal  # what the swap is signed to accept at worst
    max_slippage_pct: Decimal


def _router(wallet: ChainWallet) -> Any:
    if wallet.config.router is None or wallet.config.weth is None:
        raise ChainError("no_router", "no swap router is configured on this chain")
    return wallet.w3.eth.contract(
        address=to_checksum_address(wallet.config.router), abi=published_abi("UniswapV2Router02")
    )


def _side(wallet: ChainWallet, from_asset: str, to_asset: str) -> tuple[bool, int, int]:
    """(selling the token?, decimals in, decimals out)."""
    token, coin = wallet.config.token_symbol.upper(), wallet.config.native_symbol.upper()
    pair = (from_asset.upper(), to_asset.upper())
    if pair == (token, coin):
        return True, wallet.config.token_decimals, NATIVE_DECIMALS
    if pair == (coin, token):
        return False, NATIVE_DECIMALS, wallet.config.token_decimals
    raise ChainError("unknown_pair", f"the pool swaps {token} and {coin} only")


async def quote(
    wallet: ChainWallet, from_asset: str, to_asset: str, amount: Decimal, slippage_pct: Decimal
) -> SwapQuote:
    router = _router(wallet)
    selling, dec_in, dec_out = _side(wallet, from_asset, to_asset)
    units = int(amount.scaleb(dec_in))
    if units <= 0 or Decimal(units) != amount.scaleb(dec_in):
        raise ChainError("bad_amount", f"{from_asset} amounts have at most {dec_in} decimals")
    path = _path(wallet, selling)
    amounts = await router.functions.getAmountsOut(units, path).call()
    out = int(amounts[-1])
    least = int((Decimal(out) * (100 - slippage_pct) / 100).to_integral_value(ROUND_DOWN))
    return SwapQuote(
        from_asset=from_asset.upper(),
        to_asset=to_asset.upper(),
        amount_in=amount,
        expected_out=Decimal(out).scaleb(-dec_out),
        least_out=Decimal(least).scaleb(-dec_out),
        max_slippage_pct=slippage_pct,
    )


def _path(wallet: ChainWallet, selling: bool) -> list[str]:
    token = to_checksum_address(wallet.config.token)
    weth = to_checksum_address(str(wallet.config.weth))
    return [token, weth] if selling else [weth, token]


async def swap(
    wallet: ChainWallet,
    key: str,
    from_asset: str,
    to_asset: str,
    amount: Decimal,
    *,
    max_slippage_pct: Decimal = Decimal(1),
) -> ChainReceipt:
    """Swap ``amount`` of ``from_asset`` for at least the quote less ``max_slippage_pct``."""
    router = _router(wallet)
    selling, dec_in, dec_out = _side(wallet, from_asset, to_asset)
    me = to_checksum_address(wallet.address)
    units = int(amount.scaleb(dec_in))
    made = Made(str(router.address), from_asset.upper(), amount)

    async def build_swap() -> dict[str, Any]:
        priced = await quote(wallet, from_asset, to_asset, amount, max_slippage_pct)
        least = int(priced.least_out.scaleb(dec_out))
        deadline = int((await wallet.w3.eth.get_block("latest"))["timestamp"]) + DEADLINE_SECONDS
        path = _path(wallet, selling)
        if selling:
            data = router.encode_abi(
                "swapExactTokensForETH", args=[units, least, path, me, deadline]
            )
            return await wallet.prepare({"to": router.address, "value": 0, "data": data})
        data = router.encode_abi("swapExactETHForTokens", args=[least, path, me, deadline])
        return await wallet.prepare({"to": router.address, "value": units, "data": data})

    if selling:
        approve = wallet.token.encode_abi("approve", args=[router.address, units])
        await wallet.transact(
            f"{key}#approve",
            lambda: wallet.prepare({"to": wallet.token.address, "value": 0, "data": approve}),
            made,
        )
    done = await wallet.transact(f"{key}#swap", build_swap, made)
    if made.mined is None:  # settled from its intent: the output is on chain, not read here
        return done
    out: Decimal | None
    if selling:
        out = Decimal(unwrapped(made.mined, str(wallet.config.weth))).scaleb(-NATIVE_DECIMALS)
    else:
        out = done.token_change
    return done.model_copy(update={"amount_out": out})

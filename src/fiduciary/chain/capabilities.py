"""The chain wallet's capabilities, under the paper wallet's names: ``balance_check``,
``send_transfer``, with a vault ``save_deposit`` and ``withdraw``, with a router
``swap_quote`` and ``swap_execute`` (same arguments,
operations, risks and flags, so the same finance guards,
policy tiers and approval cards apply; an agent switches by giving these instead).

``send_transfer`` is declared ``replay="resume"``: the core's ledger fences it like any
``never`` write (a ``started`` row committed before the effect, a recorded result after), but a
call a crash left started is handed back to the handler with the same idempotency key instead
of being reported unknown. The handler settles it from its intent row (``intents``): receipt,
wait, the same signed bytes again, or outcome unknown; it never signs twice.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import Field

from ..capabilities import CallContext, Capability, capability
from . import binding
from .binding import BoundAddress, BoundChain
from .cards import ChainCards
from .errors import ChainError
from .invoicing import payment_capabilities
from .payments import ChainReceivables
from .swaps import SwapQuote, quote, swap
from .wallet import ChainBalances, ChainReceipt, ChainWallet

__all__ = ["chain_capabilities"]

Asset = Annotated[
    str, Field(description="The asset: the USD stablecoin (USDC) or the native coin.")
]
Slippage = Annotated[
    Decimal | None,
    Field(ge=0, le=50, description="The most the output may fall short of the quote, in percent."),
]
Amount = Annotated[
    Decimal, Field(gt=0, description='An amount of the asset, as a decimal string (e.g. "12.5").')
]


def chain_capabilities(
    wallet: ChainWallet, *, receivables: ChainReceivables | None = None
) -> list[Capability]:
    """``balance_check`` and ``send_transfer`` over one ``ChainWallet``; the vault's and the
    router's when configured; with ``receivables`` (``open_receivables``), the payment link
    and invoice capabilities."""

    cards = ChainCards(wallet)
    cfg = wallet.config
    me = wallet.address
    token = cfg.token
    vault = cfg.vault or ""
    router = cfg.router or ""

    def usd(asset: str, amount: Decimal | str) -> Decimal | None:
        return wallet.usd_value(asset, amount) if isinstance(amount, Decimal) else None

    def priced(op: str, asset_of: str) -> Any:
        """The policy's amount: the value moved plus the most its gas may cost, in USD."""

        async def amount(args: Any, ctx: CallContext) -> Decimal | None:
            value = usd(getattr(args, asset_of), args.amount)
            if op == "withdraw" and args.amount == "all":
                value = usd(cfg.token_symbol, await wallet.savings())
            if value is None:
                return None
            return value + await cards.gas_usd(op, args)

        return amount

    def about(asset: str, amount: Decimal | str) -> str:
        value = usd(asset, amount)
        return "" if value is None else f" (about ${value:,.2f})"

    async def send_card(a: Any) -> str:
        return (
            f"Send {a.amount} {a.asset.upper()}{about(a.asset, a.amount)} to {a.to} "
            f"on chain {cfg.chain_id}; {await cards.facts('send', a)}"
        )

    async def save_card(a: Any) -> str:
        return (
            f"Save {a.amount} {a.asset.upper()}{about(a.asset, a.amount)} into the vault "
            f"{cfg.vault} on chain {cfg.chain_id}; {await cards.facts('save', a)}"
        )

    async def withdraw_card(a: Any) -> str:
        amount = "all savings" if a.amount == "all" else f"{a.amount} {a.asset.upper()}"
        return (
            f"Withdraw {amount}{about(a.asset, a.amount)} from the vault to the wallet on "
            f"chain {cfg.chain_id}; {await cards.facts('withdraw', a)}"
        )

    async def swap_card(a: Any) -> str:
        slip = a.max_slippage_pct if a.max_slippage_pct is not None else 1
        return (
            f"Swap {a.amount} {a.from_asset.upper()}{about(a.from_asset, a.amount)} for "
            f"{a.to_asset.upper()} through the pool on chain {cfg.chain_id}, at most {slip}% "
            f"slippage; {await cards.facts('swap', a)}"
        )

    @capability(kind="read")
    async def balance_check(
        ctx: CallContext,
        address: Annotated[
            str | None, Field(description="A 0x address; omit it for your own wallet.")
        ] = None,
    ) -> ChainBalances:
        """The balances of the wallet (or of an address) read from the chain."""
        return await wallet.balances(address)

    @capability(
        kind="execute",
        risk="high",
        replay="resume",
        refresh=["balance_check"],  # the balance it left, read from the chain
        operation="send",
        amount_usd=priced("send", "asset"),
        flags={"mutating", "requires_balance", "irreversible"},
        modifiable_fields=["amount"],
        describe=send_card,
    )
    async def send_transfer(
        ctx: CallContext,
        to: Annotated[
            str,
            Field(description="The recipient: a 0x address the person gave (EIP-55 checksum)."),
        ],
        asset: Asset,
        amount: Amount,
        memo: Annotated[str, Field(max_length=140)] = "",
        chain_id: BoundChain = cfg.chain_id,
        sender: BoundAddress = me,
        contract: BoundAddress = token,
    ) -> ChainReceipt:
        """Send an amount to an address as a transaction on chain. It cannot be undone."""
        binding.check(wallet, chain_id, sender, contract, token)
        return await wallet.send(ctx.idempotency_key, to, asset, amount)

    def stable_only(asset: str) -> None:
        if asset.upper() != wallet.config.token_symbol.upper():
            raise ChainError(
                "unknown_asset", f"the vault holds {wallet.config.token_symbol} only, not {asset}"
            )

    @capability(
        kind="execute",
        risk="low",
        replay="resume",
        refresh=["balance_check"],  # the balance it left, read from the chain
        operation="save",
        amount_usd=priced("save", "asset"),
        flags={"mutating", "requires_balance"},
        modifiable_fields=["amount"],
        describe=save_card,
    )
    async def save_deposit(
        ctx: CallContext,
        asset: Asset,
        amount: Amount,
        chain_id: BoundChain = cfg.chain_id,
        sender: BoundAddress = me,
        contract: BoundAddress = vault,
    ) -> ChainReceipt:
        """Move an amount of the stablecoin from the wallet into the savings vault (ERC-4626),
        where it earns the vault's yield."""
        stable_only(asset)
        binding.check(wallet, chain_id, sender, contract, vault)
        return await wallet.save(ctx.idempotency_key, amount)

    @capability(
        kind="execute",
        risk="medium",
        replay="resume",
        refresh=["balance_check"],  # the balance it left, read from the chain
        operation="withdraw",
        amount_usd=priced("withdraw", "asset"),
        flags={"mutating"},
        modifiable_fields=["amount"],
        describe=withdraw_card,
    )
    async def withdraw(
        ctx: CallContext,
        asset: Asset,
        amount: Annotated[
            Decimal | Literal["all"],
            Field(description='An amount of the stablecoin, or "all" (every share redeemed).'),
        ],
        chain_id: BoundChain = cfg.chain_id,
        sender: BoundAddress = me,
        contract: BoundAddress = vault,
    ) -> ChainReceipt:
        """Move savings back from the vault to the wallet: an amount, or "all"."""
        stable_only(asset)
        binding.check(wallet, chain_id, sender, contract, vault)
        if amount == "all":
            return await wallet.withdraw_all(ctx.idempotency_key)
        if amount <= 0:
            raise ChainError("bad_amount", 'a withdrawal is a positive amount or "all"')
        return await wallet.withdraw(ctx.idempotency_key, amount)

    @capability(kind="preview")
    async def swap_quote(
        ctx: CallContext, from_asset: Asset, to_asset: Asset, amount: Amount
    ) -> SwapQuote:
        """Quote a swap between the stablecoin and the native coin from the pool's reserves,
        without doing it: the expected output and the least accepted at 1% slippage."""
        return await quote(wallet, from_asset, to_asset, amount, Decimal(1))

    @capability(
        kind="execute",
        risk="medium",
        replay="resume",
        refresh=["balance_check"],  # the balance it left, read from the chain
        operation="swap",
        amount_usd=priced("swap", "from_asset"),
        flags={"mutating", "requires_balance", "irreversible"},
        describe=swap_card,
        # the pool's quote is on the card (its facts), not in the arguments: made anew, the
        # card quotes again; the arguments, and so the digest, stay the same
        regenerate=lambda args, ctx: args,
        quoted_at=lambda args, ctx: ctx.clock.now(),
    )
    async def swap_execute(
        ctx: CallContext,
        from_asset: Asset,
        to_asset: Asset,
        amount: Amount,
        max_slippage_pct: Slippage = None,
        chain_id: BoundChain = cfg.chain_id,
        sender: BoundAddress = me,
        contract: BoundAddress = router,
    ) -> ChainReceipt:
        """Swap an amount of the stablecoin for the native coin or back, through the pool. The
        least output (the quote less the slippage) is signed into the transaction: the chain
        refuses the swap rather than give less."""
        binding.check(wallet, chain_id, sender, contract, router)
        slip = Decimal(1) if max_slippage_pct is None else max_slippage_pct
        return await swap(
            wallet, ctx.idempotency_key, from_asset, to_asset, amount, max_slippage_pct=slip
        )

    caps = [balance_check, send_transfer]
    if wallet.config.vault is not None:
        caps += [save_deposit, withdraw]
    if wallet.config.router is not None:
        caps += [swap_quote, swap_execute]
    if receivables is not None:
        caps += payment_capabilities(wallet, receivables)
    return caps

"""The paper wallet's capabilities: 15 reads (one of them a preview) and 10 writes.

``wallet_capabilities(wallet)`` declares them over one ``PaperWallet``. They are the reference
for capabilities over a real backend: each states its kind, risk, replay policy and flags
truthfully; each write names its policy ``operation`` and prices itself in USD from the market
(``amount_usd``) so the policy tiers apply; each handler passes ``ctx.idempotency_key`` to the
wallet, which refuses to post twice under one key; refusals are ``WalletError``s raised before
anything is posted (so the core may report them as having no effect).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field

from ..capabilities import CallContext, Capability, capability
from ..steps import Step, StepsReport, run_steps
from .addresses import plain_recipient
from .assets import ASSETS, get_asset
from .errors import WalletError
from .operations import (
    Borrow,
    ClaimRewards,
    Deposit,
    HarvestRewards,
    Operation,
    Repay,
    Send,
    Swap,
    Withdraw,
)
from .reports import activity, explain, portfolio, spending, yield_summary
from .views import (
    ActivityReport,
    BalanceReport,
    Contact,
    HealthReport,
    HistoryEntry,
    MarketRates,
    PortfolioReport,
    PriceView,
    Receipt,
    RewardsReport,
    SavingsReport,
    SpendingReport,
    SwapQuote,
    TxExplanation,
    YieldReport,
)
from .wallet import PaperWallet

__all__ = ["READS", "WRITES", "wallet_capabilities"]

READS = (
    "balance_check",
    "savings_info",
    "health_check",
    "rates_info",
    "transaction_history",
    "explain_tx",
    "token_prices",
    "swap_quote",
    "portfolio_analysis",
    "spending_analytics",
    "yield_summary",
    "activity_summary",
    "pending_rewards",
    "list_contacts",
)
WRITES = (
    "save_deposit",
    "withdraw",
    "send_transfer",
    "borrow",
    "repay_debt",
    "claim_rewards",
    "harvest_rewards",
    "swap_execute",
    "swap_and_save",
    "save_contact",
)

_SYMBOLS = ", ".join(ASSETS)
AssetName = Annotated[str, Field(description=f"An asset symbol: one of {_SYMBOLS}.")]


def _written_in_full(value: Decimal) -> Decimal:
    """An amount as a person reads it: ``1.5E+2`` becomes ``150`` (in the arguments, so in the
    card, the description and the ledger alike); more than 30 digits either side is refused."""
    exponent = value.as_tuple().exponent  # a letter for NaN and infinities
    if not isinstance(exponent, int) or value.adjusted() > 30 or exponent < -30:
        raise ValueError("an amount is a plain decimal of at most 30 digits either side")
    return Decimal(format(value, "f"))


Amount = Annotated[
    Decimal,
    AfterValidator(_written_in_full),
    Field(gt=0, description='An amount of the asset, as a decimal string (e.g. "12.5").'),
]
AmountOrAll = Annotated[
    Annotated[Decimal, AfterValidator(_written_in_full)] | Literal["all"],
    Field(description='An amount of the asset as a decimal string, or "all".'),
]
Days = Annotated[int, Field(ge=1, le=365, description="How many days back to look.")]
Slippage = Annotated[
    Decimal | None,
    Field(
        ge=0,
        le=50,
        description="The most the result may fall short of the quote, in percent (1 = 1%). "
        "State it; without it the wallet's default (1%) applies.",
    ),
]
Address = Annotated[
    str | None,
    AfterValidator(lambda v: v if v is None else plain_recipient(v)),
    Field(description="A 0x address; omit it for your own wallet."),
]


class SwapAndSave(BaseModel):
    """A swap to USDC, then a deposit of what it gave."""

    from_asset: AssetName
    amount: Amount
    max_slippage_pct: Slippage = None
    quote_id: Annotated[
        str | None, Field(description="The quote_id from swap_quote to USDC (within 60 s).")
    ] = None


def _received(receipt: Any, asset: str) -> Decimal:
    """What a receipt (as JSON) added to the available balance in ``asset``."""
    changes = receipt.get("changes", []) if isinstance(receipt, dict) else []
    got = sum(
        (Decimal(str(c["amount"])) for c in changes if c.get("asset") == asset),
        Decimal(0),
    )
    if got <= 0:
        raise WalletError("nothing_saved", f"the swap gave no {asset} to save")
    return got


def wallet_capabilities(wallet: PaperWallet) -> list[Capability]:
    """Every capability of the paper wallet, bound to ``wallet``."""
    return [*_reads(wallet), *_writes(wallet)]


def _who(ctx: CallContext) -> str:
    return ctx.principal.actor_id


def _reads(wallet: PaperWallet) -> list[Capability]:
    @capability(kind="read")
    async def balance_check(ctx: CallContext, address: Address = None) -> BalanceReport:
        """Balances of the person's wallet (or of any address): available, savings, debt and
        claimable rewards per asset, with their USD value and the total. Read it before any
        write that spends, and again after a write."""
        return wallet.balances(_who(ctx), address=address, at=ctx.clock.now())

    @capability(kind="read")
    async def savings_info(ctx: CallContext) -> SavingsReport:
        """The person's savings positions: amount, accrued and total interest, APY, and the
        projected yearly earnings."""
        return wallet.savings(_who(ctx), ctx.clock.now())

    @capability(kind="read")
    async def health_check(ctx: CallContext) -> HealthReport:
        """The health factor of the person's loans (collateral × liquidation threshold / debt),
        its risk level, the debt, and how much more may be borrowed."""
        return wallet.health(_who(ctx), ctx.clock.now())

    @capability(kind="read")
    async def rates_info(ctx: CallContext) -> list[MarketRates]:
        """Current supply and borrow APYs, reward APRs, LTV and liquidation thresholds of the
        lending pool, per asset."""
        return wallet.rates(ctx.clock.now())

    @capability(kind="read", max_result_chars=12_000)
    async def transaction_history(
        ctx: CallContext,
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
        kind: Annotated[
            str | None,
            Field(description="Only this kind: save, withdraw, send, borrow, repay, swap, ..."),
        ] = None,
    ) -> list[HistoryEntry]:
        """The person's recent transactions, newest first: time, kind, a readable label, the
        changes to their books and the digest (for explain_tx)."""
        return wallet.history(_who(ctx), limit=limit, kind=kind)

    @capability(kind="read")
    async def explain_tx(
        ctx: CallContext,
        digest: Annotated[str, Field(description="A digest, or its first 6+ characters.")],
    ) -> TxExplanation:
        """Explain one of the person's transactions in words: what moved, fees, rate, and
        whether its digest verifies against its contents."""
        return explain(wallet, _who(ctx), digest)

    @capability(kind="read")
    async def token_prices(
        ctx: CallContext,
        assets: Annotated[
            list[str] | None, Field(description="Symbols to price; omit for all.")
        ] = None,
    ) -> list[PriceView]:
        """Current USD prices and 24-hour changes of the assets the wallet knows."""
        return wallet.prices(assets, ctx.clock.now())

    @capability(kind="preview")
    async def swap_quote(
        ctx: CallContext, from_asset: AssetName, to_asset: AssetName, amount: Amount
    ) -> SwapQuote:
        """Quote a swap without doing it: the amount out, rate, route, fees and price impact,
        with a quote_id valid for 60 seconds. Show it to the person, then pass quote_id to
        swap_execute."""
        return wallet.quote(_who(ctx), from_asset, to_asset, amount, ctx.clock.now())

    @capability(kind="read")
    async def portfolio_analysis(ctx: CallContext) -> PortfolioReport:
        """The person's net worth, holdings net of debt, allocation, stablecoin share and
        notable facts (concentration, idle cash, health factor, claimable rewards)."""
        return portfolio(wallet, _who(ctx), ctx.clock.now())

    @capability(kind="read")
    async def spending_analytics(ctx: CallContext, days: Days = 30) -> SpendingReport:
        """Money that left the wallet over a period, by category (transfers, swap fees,
        interest paid) and top recipients."""
        return spending(wallet, _who(ctx), days, ctx.clock.now())

    @capability(kind="read", name="yield_summary")
    async def yield_report(ctx: CallContext, days: Days = 30) -> YieldReport:
        """Interest and rewards earned over a period, the blended APY, projections for 30 days
        and a year, and the savings' value day by day."""
        return yield_summary(wallet, _who(ctx), days, ctx.clock.now())

    @capability(kind="read")
    async def activity_summary(ctx: CallContext, days: Days = 30) -> ActivityReport:
        """How many transactions of each kind over a period, and their volume in USD."""
        return activity(wallet, _who(ctx), days, ctx.clock.now())

    @capability(kind="read")
    async def pending_rewards(ctx: CallContext) -> RewardsReport:
        """Rewards earned by savings and not claimed yet, their USD value, and the daily rate.
        Reading them claims nothing."""
        return wallet.rewards(_who(ctx), ctx.clock.now())

    @capability(kind="read")
    async def list_contacts(ctx: CallContext) -> list[Contact]:
        """The person's saved contacts (name and address): the recipients send_transfer may
        use by name."""
        return wallet.contacts(_who(ctx))

    return [
        balance_check,
        savings_info,
        health_check,
        rates_info,
        transaction_history,
        explain_tx,
        token_prices,
        swap_quote,
        portfolio_analysis,
        spending_analytics,
        yield_report,
        activity_summary,
        pending_rewards,
        list_contacts,
    ]


def _usd(wallet: PaperWallet, symbol: str, amount: Decimal) -> Decimal | None:
    try:
        return wallet.usd_value(get_asset(symbol).symbol, amount)
    except WalletError:
        return None  # an unknown asset: the policy asks a person, the handler refuses


def _writes(wallet: PaperWallet) -> list[Capability]:
    def amount_of(args: Any, ctx: CallContext) -> Decimal | None:
        if args.amount == "all":
            return None
        return _usd(wallet, args.asset, args.amount)

    def position_value(book: str) -> Callable[[Any, CallContext], Decimal | None]:
        def value(args: Any, ctx: CallContext) -> Decimal | None:
            if args.amount != "all":
                return _usd(wallet, args.asset, args.amount)
            try:
                pos = wallet.positions(_who(ctx), ctx.clock.now())
                held = (pos.savings if book == "savings" else pos.debt).get(
                    get_asset(args.asset).symbol, Decimal(0)
                )
            except WalletError:
                return None
            return _usd(wallet, args.asset, held)

        return value

    def rewards_value(args: Any, ctx: CallContext) -> Decimal | None:
        return wallet.rewards(_who(ctx), ctx.clock.now()).usd

    def swap_value(args: Any, ctx: CallContext) -> Decimal | None:
        return _usd(wallet, args.from_asset, args.amount)

    def fresh_quote(args: Any, ctx: CallContext) -> dict[str, Any]:
        """A stale quote's swap made anew: the same swap, with a fresh quote's id."""
        quote = wallet.quote(
            _who(ctx), args.from_asset, args.to_asset, args.amount, ctx.clock.now()
        )
        return {**args.model_dump(mode="json"), "quote_id": quote.quote_id}

    def quote_made_at(args: Any, ctx: CallContext) -> datetime | None:
        if args.quote_id is None:
            return None
        return wallet.quote_of(_who(ctx), args.quote_id).created_at

    def run(ctx: CallContext, op: Operation) -> Receipt:
        return wallet.execute(_who(ctx), op, key=ctx.idempotency_key, at=ctx.clock.now())

    def about(symbol: str, amount: Decimal) -> str:
        value = _usd(wallet, symbol, amount)
        return "" if value is None else f" (about ${value:,.2f})"

    @capability(
        kind="execute",
        risk="low",
        operation="save",
        amount_usd=amount_of,
        flags={"mutating", "requires_balance"},
        modifiable_fields=["amount"],
        describe=lambda a: (
            f"Save {a.amount} {a.asset.upper()}{about(a.asset, a.amount)} "
            "from the available balance into savings"
        ),
    )
    async def save_deposit(ctx: CallContext, asset: AssetName, amount: Amount) -> Receipt:
        """Move an amount from the available balance into savings, where it earns the supply
        APY and rewards (USDC, USDT or SUI; swap other assets first)."""
        return run(ctx, Deposit(asset, amount))

    @capability(
        kind="execute",
        risk="medium",
        operation="withdraw",
        amount_usd=position_value("savings"),
        flags={"mutating", "affects_health"},
        modifiable_fields=["amount"],
        describe=lambda a: (
            f"Withdraw {a.amount} {a.asset.upper()} from savings to the available balance"
        ),
    )
    async def withdraw(ctx: CallContext, asset: AssetName, amount: AmountOrAll) -> Receipt:
        """Move savings back to the available balance ("all" for the whole position). Refused
        if it would leave loans above what the remaining savings allow."""
        return run(ctx, Withdraw(asset, None if amount == "all" else amount))

    @capability(
        kind="execute",
        risk="high",
        operation="send",
        amount_usd=amount_of,
        flags={"mutating", "requires_balance", "irreversible"},
        modifiable_fields=["amount"],
        refresh=["balance_check"],  # the person and the model see the balance it left
        describe=lambda a: f"Send {a.amount} {a.asset.upper()}{about(a.asset, a.amount)} to {a.to}",
    )
    async def send_transfer(
        ctx: CallContext,
        to: Annotated[
            str,
            AfterValidator(plain_recipient),
            Field(
                description="The recipient: a 0x address the person gave, or a saved contact's "
                "name. Never an address from memory."
            ),
        ],
        asset: AssetName,
        amount: Amount,
        memo: Annotated[str, Field(max_length=140)] = "",
    ) -> Receipt:
        """Send an amount from the available balance to an address or a saved contact. It
        cannot be undone."""
        return run(ctx, Send(to, asset, amount, memo))

    @capability(
        kind="execute",
        risk="high",
        operation="borrow",
        amount_usd=amount_of,
        flags={"mutating", "affects_health"},
        modifiable_fields=["amount"],
        describe=lambda a: (
            f"Borrow {a.amount} {a.asset.upper()}{about(a.asset, a.amount)} against savings"
        ),
    )
    async def borrow(ctx: CallContext, asset: AssetName, amount: Amount) -> Receipt:
        """Borrow an amount (USDC or USDT) against savings, at the borrow APY. Refused beyond
        the borrow limit (savings × LTV); lowers the health factor."""
        return run(ctx, Borrow(asset, amount))

    @capability(
        kind="execute",
        risk="medium",
        operation="repay",
        amount_usd=position_value("debt"),
        flags={"mutating", "requires_balance", "affects_health"},
        modifiable_fields=["amount"],
        describe=lambda a: f"Repay {a.amount} {a.asset.upper()} of debt",
    )
    async def repay_debt(
        ctx: CallContext, asset: AssetName, amount: AmountOrAll = "all"
    ) -> Receipt:
        """Repay debt from the available balance, in the asset that was borrowed ("all" for
        the whole debt in it)."""
        return run(ctx, Repay(asset, None if amount == "all" else amount))

    @capability(
        kind="execute",
        risk="low",
        operation="withdraw",  # rewards leave the protocol for the available balance
        amount_usd=rewards_value,
        flags={"mutating"},
        describe=lambda a: "Claim the savings rewards into the available balance",
    )
    async def claim_rewards(ctx: CallContext) -> Receipt:
        """Claim the rewards savings have earned into the available balance."""
        return run(ctx, ClaimRewards())

    @capability(
        kind="execute",
        risk="medium",
        operation="save",  # the net effect is a deposit into savings
        amount_usd=rewards_value,
        flags={"mutating"},
        describe=lambda a: (
            "Claim the savings rewards, swap them to USDC and save it, in one transaction"
        ),
    )
    async def harvest_rewards(ctx: CallContext, max_slippage_pct: Slippage = None) -> Receipt:
        """Compound rewards: claim them, swap them to USDC and deposit that into savings, as
        one atomic transaction."""
        slip = None if max_slippage_pct is None else max_slippage_pct / 100
        return run(ctx, HarvestRewards(slip))

    @capability(
        kind="execute",
        risk="medium",
        operation="swap",
        amount_usd=swap_value,
        flags={"mutating", "requires_balance", "irreversible"},
        regenerate=fresh_quote,  # a quote lives 60 s; the card can ask for a new one
        quoted_at=quote_made_at,
        describe=lambda a: (
            f"Swap {a.amount} {a.from_asset.upper()}"
            f"{about(a.from_asset, a.amount)} for {a.to_asset.upper()}"
            + (f", quote {a.quote_id}" if a.quote_id else "")
            + (
                f", at most {a.max_slippage_pct}% slippage"
                if a.max_slippage_pct is not None
                else ""
            )
        ),
    )
    async def swap_execute(
        ctx: CallContext,
        from_asset: AssetName,
        to_asset: AssetName,
        amount: Amount,
        max_slippage_pct: Slippage = None,
        quote_id: Annotated[
            str | None, Field(description="The quote_id from swap_quote (within 60 s).")
        ] = None,
    ) -> Receipt:
        """Swap an amount of one asset for another through the pools (routed via USDC).
        Get a swap_quote first and pass its quote_id; refused if the quote expired or the
        result would fall short of it by more than the slippage stated."""
        slip = None if max_slippage_pct is None else max_slippage_pct / 100
        return run(ctx, Swap(from_asset, to_asset, amount, slip, quote_id))

    def swap_and_save_plan(args: SwapAndSave, ctx: CallContext) -> list[Step]:
        who, source = _who(ctx), args.from_asset.upper()
        slip = None if args.max_slippage_pct is None else args.max_slippage_pct / 100
        expected = None
        if args.quote_id is not None:
            with suppress(WalletError):
                expected = wallet.quote_of(who, args.quote_id).amount_out

        def swap(key: str, earlier: list[Any]) -> Receipt:
            op = Swap(args.from_asset, "USDC", args.amount, slip, args.quote_id)
            return wallet.execute(who, op, key=key, at=ctx.clock.now())

        def save(key: str, earlier: list[Any]) -> Receipt:
            received = _received(earlier[0], "USDC")
            return wallet.execute(who, Deposit("USDC", received), key=key, at=ctx.clock.now())

        about_usdc = "" if expected is None else f" (about {expected} USDC)"
        return [
            Step("swap", f"Swap {args.amount} {source} for USDC", swap, source, args.amount, True),
            Step("save", f"Save the USDC the swap gives{about_usdc}", save, "USDC", expected, True),
        ]

    @capability(
        kind="execute",
        risk="medium",
        operation="swap",
        amount_usd=swap_value,
        flags={"mutating", "requires_balance", "irreversible"},
        replay="resume",  # its steps settle a crash themselves, each once (fiduciary.steps)
        steps=swap_and_save_plan,
        describe=lambda a: (
            f"Swap {a.amount} {a.from_asset.upper()}{about(a.from_asset, a.amount)} for USDC, "
            "then save the USDC: two steps, approved once"
        ),
    )
    async def swap_and_save(args: SwapAndSave, ctx: CallContext) -> StepsReport:
        """Swap an amount of an asset for USDC, then save that USDC, as two steps run in
        order (each at most once). If the swap is refused nothing happens; if the save is
        refused the swap stays done (nothing is undone) and the report says so."""
        return await run_steps(ctx, swap_and_save_plan(args, ctx))

    @capability(
        kind="execute",
        risk="medium",
        tier="auto",  # moves no money; address_source vets the address, new_recipient a new one
        flags={"mutating"},
        describe=lambda a: f"Save the contact {a.name} = {a.address}",
    )
    async def save_contact(
        ctx: CallContext,
        name: Annotated[str, AfterValidator(plain_recipient), Field(min_length=1, max_length=40)],
        address: Annotated[
            str,
            AfterValidator(plain_recipient),
            Field(description="The 0x address the person gave."),
        ],
    ) -> Contact:
        """Save a name for an address the person gave, so later sends can use the name."""
        return wallet.save_contact(
            _who(ctx), name, address, key=ctx.idempotency_key, at=ctx.clock.now()
        )

    return [
        save_deposit,
        withdraw,
        send_transfer,
        borrow,
        repay_debt,
        claim_rewards,
        harvest_rewards,
        swap_execute,
        swap_and_save,
        save_contact,
    ]

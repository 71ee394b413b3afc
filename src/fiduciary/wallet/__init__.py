"""The paper wallet: a finance agent's world, offline, with real bookkeeping.

A ``PaperWallet`` keeps a double-entry ledger in SQLite (``Decimal`` amounts at each asset's
precision, one transaction per call, the call's idempotency key unique), a market with a
seeded price path and constant-product pools, and a lending pool with interest, loans, a health
factor and rewards. ``wallet_capabilities`` exposes it to an agent, ``finance_guards`` checks
what the agent asks, and ``build_wallet_agent`` puts them together::

    from fiduciary import SQLiteStore
    from fiduciary.wallet import PaperWallet, build_wallet_agent

    wallet = PaperWallet("wallet.sqlite3")
    agent = build_wallet_agent(SQLiteStore("wallet.sqlite3"), wallet, model=my_model)

Modules: ``assets`` (assets, money), ``ledger`` (postings), ``market`` (prices, pools),
``lending`` (interest, loans, health), ``books`` (how each write posts), ``wallet`` (the
façade), ``reports``, ``capabilities``, ``guards`` (before a call), ``post_guards`` (after a
write: ``post_guards``), ``demo`` and ``console`` (the terminal).
"""

from __future__ import annotations

from .assets import ASSETS, Asset
from .capabilities import wallet_capabilities
from .demo import build_wallet_agent
from .errors import LedgerError, WalletError
from .guards import FinanceGuardConfig, finance_guards
from .lending import LendingMarket
from .market import PoolSpec
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
from .post_guards import post_guards
from .wallet import PaperWallet, Preview, WalletConfig

__all__ = [
    "ASSETS",
    "Asset",
    "Borrow",
    "ClaimRewards",
    "Deposit",
    "FinanceGuardConfig",
    "HarvestRewards",
    "LedgerError",
    "LendingMarket",
    "Operation",
    "PaperWallet",
    "PoolSpec",
    "Preview",
    "Repay",
    "Send",
    "Swap",
    "WalletConfig",
    "WalletError",
    "Withdraw",
    "build_wallet_agent",
    "finance_guards",
    "post_guards",
    "wallet_capabilities",
]

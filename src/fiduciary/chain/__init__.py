"""The live backend: the wallet's writes as signed transactions on an EVM node.

A ``ChainWallet`` reads balances from the chain and sends an ERC-20 token or the native coin;
its capabilities (``chain_capabilities``) carry the paper wallet's names, operations and flags,
so the same guards, policy tiers and approval cards apply, and an agent switches by
configuration. The at-most-once rule on a chain lives in ``intents``: the signed bytes, hash,
sender and nonce of each write are committed before broadcast, nonces are reserved per account
in the database, and a call resumed after a crash settles from that row (receipt: done;
pending: wait; unknown with the nonce free: the same bytes again; nonce taken: outcome unknown).

Modules: ``config`` (the deployment file and settings), ``keys`` (v3 keystores), ``intents``
and ``intents_postgres`` (the intent table and nonce reservations: one core, two dialects),
``wallet`` (the façade), ``binding`` (what an approval binds: chain, account, contract),
``cards`` (what a card says, the gas in USD), ``capabilities``, ``payments`` (links and
invoices paid by a Transfer of an exact amount), ``invoicing`` (their capabilities), ``watch``
(the Transfer watcher), ``payments_postgres``, ``client_signed`` (sends the
person's device signs, checked on chain), ``swaps``, ``reconcile``, ``deploy`` (contracts on a
dev chain), ``api_payments`` (``ChainApiPayer``: ``pay_api`` over x402's EVM ``exact`` scheme,
EIP-3009), ``demo`` (``fiduciary demo --chain``) and ``cli``.
Needs the ``chain`` extra (web3.py, eth-account).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api_payments import ChainApiPayer
    from .capabilities import chain_capabilities
    from .client_signed import ClientTxRefused, client_signed_capabilities, connect_watching
    from .config import (
        ChainConfig,
        load_config,
        save_config,
    )
    from .errors import ChainError, ChainOutcomeUnknown
    from .guards import RecipientGuard, chain_guards
    from .intents import (
        Intent,
        IntentBook,
        SQLiteIntentBook,
    )
    from .intents_postgres import PostgresIntentBook
    from .invoicing import open_receivables
    from .keys import (
        Signer,
        load_keystore,
        write_keystore,
    )
    from .payments import ChainReceivable, ChainReceivables, Incoming, SQLiteReceivables
    from .payments_postgres import PostgresReceivables
    from .wallet import ChainReceipt, ChainWallet
    from .watch import PaymentWatcher

# loaded when first asked for: web3 takes seconds to import, and the CLI registers `chain`
_WHERE = {
    "ChainApiPayer": "api_payments",
    "ChainConfig": "config",
    "ChainError": "errors",
    "ChainOutcomeUnknown": "errors",
    "ChainReceipt": "wallet",
    "ChainReceivable": "payments",
    "ChainReceivables": "payments",
    "Incoming": "payments",
    "SQLiteReceivables": "payments",
    "PostgresReceivables": "payments_postgres",
    "PaymentWatcher": "watch",
    "open_receivables": "invoicing",
    "ChainWallet": "wallet",
    "ClientTxRefused": "client_signed",
    "client_signed_capabilities": "client_signed",
    "connect_watching": "client_signed",
    "Intent": "intents",
    "RecipientGuard": "guards",
    "chain_guards": "guards",
    "PostgresIntentBook": "intents_postgres",
    "IntentBook": "intents",
    "SQLiteIntentBook": "intents",
    "Signer": "keys",
    "chain_capabilities": "capabilities",
    "load_config": "config",
    "load_keystore": "keys",
    "save_config": "config",
    "write_keystore": "keys",
}
_EXTRA = ("web3", "eth_account", "eth_utils", "eth_typing", "psycopg")

__all__ = [
    "ChainApiPayer",
    "ChainConfig",
    "ChainError",
    "ChainOutcomeUnknown",
    "ChainReceipt",
    "ChainReceivable",
    "ChainReceivables",
    "ChainWallet",
    "ClientTxRefused",
    "Incoming",
    "Intent",
    "IntentBook",
    "PaymentWatcher",
    "PostgresIntentBook",
    "PostgresReceivables",
    "RecipientGuard",
    "SQLiteIntentBook",
    "SQLiteReceivables",
    "Signer",
    "chain_capabilities",
    "chain_guards",
    "client_signed_capabilities",
    "connect_watching",
    "load_config",
    "load_keystore",
    "open_receivables",
    "save_config",
    "write_keystore",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(f"{__name__}.{where}")
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing in _EXTRA:
            extra = "postgres" if missing == "psycopg" else "chain"
            raise ImportError(
                f"fiduciary.chain.{name} needs the {extra} extra: pip install 'fiduciary[{extra}]'"
            ) from exc
        raise
    return getattr(module, name)

"""The paper wallet's errors.

```
FiduciaryError
├── CapabilityError
│   └── WalletError         a request the wallet refuses; nothing was posted (``code`` says why)
└── LedgerError             a bookkeeping invariant would break: a bug, never a person's mistake
```

A ``WalletError`` is raised before anything is written (the write transaction is rolled back),
so the core may report it to the model as a refusal with no effect. A ``LedgerError`` means the
wallet itself tried to post something unbalanced, negative where it must not be, or not money.
"""

from __future__ import annotations

from ..exceptions import CapabilityError, FiduciaryError

__all__ = ["LedgerError", "WalletError"]


class WalletError(CapabilityError):
    """A refused request: insufficient funds, unknown asset, expired quote, ... Nothing posted.

    ``code`` is one of: ``invalid_amount``, ``unknown_asset``, ``unsupported_asset``,
    ``same_asset``, ``insufficient_funds``, ``insufficient_liquidity``, ``borrow_limit``,
    ``wrong_asset``, ``nothing_to_repay``, ``nothing_to_claim``, ``invalid_address``,
    ``unknown_recipient``, ``own_address``, ``quote_expired``, ``quote_mismatch``,
    ``unknown_quote``, ``slippage_exceeded``, ``slippage_limit``, ``price_impact``,
    ``contact_exists``, ``invalid_contact``, ``unknown_transaction``, ``idempotency_conflict``.
    """


class LedgerError(FiduciaryError):
    """A posting would break the ledger's invariants (unbalanced, negative, a float): a bug."""

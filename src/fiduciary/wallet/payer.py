"""The simulated payer: pays a payment link or an invoice of a paper wallet from outside.

    python -m fiduciary.wallet.payer WALLET_FILE REFERENCE [--from 0x…] [--amount 12.5]

It opens the wallet's SQLite file (another process may be running the agent on it), posts the
payment and marks the reference paid in one transaction, and prints the paid reference as JSON.
A refusal (unknown, paid, cancelled, wrong amount) exits 1 with the reason, having posted nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

from ..clock import SystemClock
from .addresses import normalize_address
from .errors import WalletError
from .ledger import Ledger
from .receivables import Receivables
from .wallet import sign_rule

__all__ = ["main"]

DEFAULT_PAYER = "0x" + "be" * 20


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fiduciary.wallet.payer", description=__doc__)
    parser.add_argument("wallet", help="the paper wallet's SQLite file")
    parser.add_argument("reference", help="the payment link's or invoice's reference")
    parser.add_argument("--from", dest="payer", default=DEFAULT_PAYER, help="the payer's address")
    parser.add_argument("--amount", default=None, help="the amount paid (default: as asked)")
    args = parser.parse_args(argv)
    try:
        amount = None if args.amount is None else Decimal(args.amount)
        payer = normalize_address(args.payer)
        # the ledger alone: a PaperWallet would post the genesis of its own configuration's
        # pools into a file another configuration made
        ledger = Ledger(args.wallet, sign_rule=sign_rule)
        try:
            paid = Receivables(ledger).pay(
                args.reference, payer=payer, amount=amount, at=SystemClock().now()
            )
        finally:
            ledger.close()
    except WalletError as exc:
        print(f"refused ({exc.code}): {exc}", file=sys.stderr)
        return 1
    except InvalidOperation:
        print(f"refused: {args.amount!r} is not an amount", file=sys.stderr)
        return 1
    print(paid.model_dump_json())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``WalletWatch``: the paper wallet as an attention source (``fiduciary.attention``): price
moves beyond a threshold, payments received, a health factor below a threshold.

The wallet's own: a domain builds on the attention feature, the feature knows no domain.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from decimal import Decimal

from ..attention.sources import Sleep, polled
from ..attention.types import Batch, Incoming
from ..clock import Clock, SystemClock
from .wallet import PaperWallet

__all__ = ["WalletWatch"]


class WalletWatch:
    """Polls a ``PaperWallet`` for ``principals`` every ``every`` seconds.

    A price moving more than ``price_move_pct`` over 24 h is one event per asset and hour; a
    payment received is one event per transaction; a health factor under ``health_below`` is
    one event per principal, hour and risk level.
    """

    def __init__(
        self,
        wallet: PaperWallet,
        principals: Sequence[str],
        *,
        name: str = "wallet",
        symbols: Sequence[str] | None = None,
        price_move_pct: Decimal = Decimal(5),
        health_below: Decimal = Decimal("1.5"),
        every: float = 60.0,
        clock: Clock | None = None,
        sleep: Sleep = asyncio.sleep,
        once: bool = False,
    ) -> None:
        self._wallet = wallet
        self._principals = list(principals)
        self._name = name
        self._symbols = list(symbols) if symbols else None
        self._price_move_pct = price_move_pct
        self._health_below = health_below
        self._every = every
        self._clock: Clock = clock or SystemClock()
        self._sleep = sleep
        self._once = once

    @property
    def name(self) -> str:
        return self._name

    def batches(self, cursor: str | None) -> AsyncIterator[Batch]:
        async def scan(since: datetime | None, now: datetime) -> list[Incoming]:
            return self.scan(since, now)

        return polled(cursor, scan, self._clock, self._sleep, self._every, self._once)

    def scan(self, since: datetime | None, now: datetime) -> list[Incoming]:
        out: list[Incoming] = []
        hour = now.strftime("%Y-%m-%dT%H")
        for price in self._wallet.prices(self._symbols, at=now):
            if abs(price.change_24h_pct) >= self._price_move_pct:
                out.append(
                    Incoming(
                        id=f"price_move:{price.asset}:{hour}",
                        source=self._name,
                        type="price_move",
                        at=now,
                        data={
                            "asset": price.asset,
                            "usd": str(price.usd),
                            "change_24h_pct": str(price.change_24h_pct),
                        },
                    )
                )
        for principal in self._principals:
            for entry in self._wallet.history(principal, limit=50):
                if not entry.kind.endswith("(received)"):
                    continue
                if since is not None and entry.at < since:
                    continue
                out.append(
                    Incoming(
                        id=f"payment_received:{entry.digest}",
                        source=self._name,
                        type="payment_received",
                        at=entry.at,
                        principal=principal,
                        data={
                            "label": entry.label,
                            "changes": [
                                {"asset": c.asset, "amount": str(c.amount)} for c in entry.changes
                            ],
                        },
                    )
                )
            health = self._wallet.health(principal, at=now)
            factor = health.health_factor
            if factor is not None and factor < self._health_below:
                out.append(
                    Incoming(
                        id=f"health_factor:{principal}:{hour}:{health.risk}",
                        source=self._name,
                        type="health_factor_low",
                        at=now,
                        principal=principal,
                        data={
                            "health_factor": str(factor),
                            "risk": health.risk,
                            "debt_usd": str(health.debt_usd),
                        },
                    )
                )
        return out

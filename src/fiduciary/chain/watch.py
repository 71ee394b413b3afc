"""The payment watcher: the token's Transfer logs to the wallet, read from a persisted cursor.

``PaymentWatcher.poll`` reads the logs of the configured token whose recipient is the wallet,
from the cursor (``chain_watch_cursors``) up to the latest block with ``confirmations`` (the
head less ``confirmations - 1``: a block that deep is taken as final; a deeper reorg is not
undone), at most ``CHUNK`` blocks a query, and hands them to ``ChainReceivables.record``, which
records each once, marks the links they pay and moves the cursor in one transaction. A watcher
killed at any point starts again from the cursor; a log read twice is counted once.
``run`` polls every few seconds until stopped (``fiduciary chain watch``; a server or an app can
run the same loop). ``step`` is told "read" (logs fetched, nothing recorded yet) and
"recorded": the fault tests kill the process there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from eth_typing import HexStr
from eth_utils.address import to_checksum_address
from web3 import AsyncWeb3
from web3.exceptions import Web3Exception

from .._logs import logger
from ..clock import Clock, SystemClock
from .config import ChainConfig
from .payments import ChainReceivables, Incoming, TransferLog
from .reconcile import TRANSFER_TOPIC

__all__ = ["CHUNK", "PaymentWatcher"]

CHUNK = 1_000  # blocks per eth_getLogs: providers cap the range a query may span
log = logger("fiduciary.chain.watch")


def _topic(address: str) -> str:
    return "0x" + "0" * 24 + address.lower().removeprefix("0x")


class PaymentWatcher:
    """Marks links and invoices paid as their Transfers reach the wallet on chain."""

    def __init__(
        self,
        w3: AsyncWeb3[Any],
        config: ChainConfig,
        book: ChainReceivables,
        *,
        clock: Clock | None = None,
        step: Callable[[str], None] | None = None,
    ) -> None:
        self.w3, self.config, self.book = w3, config, book
        self.clock = clock or SystemClock()
        self._step = step or (lambda point: None)

    async def poll(self) -> list[Incoming]:
        """Read every final block past the cursor; the Transfers newly recorded."""
        start = self.book.cursor()
        if start is None:
            return []  # no link yet: nothing can be paid
        head = await self.w3.eth.block_number
        final = head - (self.config.confirmations - 1)
        found: list[Incoming] = []
        while start <= final:
            end = min(final, start + CHUNK - 1)
            logs = await self._logs(start, end)
            self._step("read")
            found += await asyncio.to_thread(
                self.book.record, logs, next_block=end + 1, at=self.clock.now()
            )
            self._step("recorded")
            start = end + 1
        return found

    async def run(
        self, *, interval: float = 2.0, report: Callable[[Incoming], None] | None = None
    ) -> None:
        """Poll every ``interval`` seconds until cancelled; ``report`` each Transfer found. A
        node that does not answer is logged and asked again at the next poll (the cursor has
        not moved: nothing is missed)."""
        while True:
            try:
                found = await self.poll()
            except (Web3Exception, OSError, TimeoutError) as exc:
                log.warning("the payment watcher could not read the chain: %s", exc)
                found = []
            for incoming in found:
                if report is not None:
                    report(incoming)
            await asyncio.sleep(interval)

    async def _logs(self, start: int, end: int) -> list[TransferLog]:
        raw = await self.w3.eth.get_logs(
            {
                "address": to_checksum_address(self.book.token),
                "fromBlock": start,
                "toBlock": end,
                "topics": [HexStr(TRANSFER_TOPIC), None, HexStr(_topic(self.book.recipient))],
            }
        )
        logs: list[TransferLog] = []
        for log in raw:
            if log.get("removed"):
                continue
            topics = log["topics"]
            logs.append(
                TransferLog(
                    tx_hash="0x" + bytes(log["transactionHash"]).hex(),
                    log_index=int(log["logIndex"]),
                    block=int(log["blockNumber"]),
                    sender=str(to_checksum_address("0x" + bytes(topics[1]).hex()[-40:])),
                    units=int.from_bytes(bytes(log["data"]), "big"),
                )
            )
        return logs

"""A nonce gap left by a crash is filled by whoever waits on it: a call that committed its
intent and died before broadcasting leaves its nonce unsent; the next send of the account is
queued behind it, and broadcasts the recorded bytes of the gap (the same bytes, never signed
anew) instead of waiting for the crashed call's resume — which, in one process, may be waiting
for this very send (the principal's calls are settled one at a time). Counted on chain."""

from __future__ import annotations

import secrets
from decimal import Decimal

import pytest
from eth_account import Account

from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.wallet import ChainWallet

from .conftest import ChainSetup
from .onchain import nonce_of, token_balance, transfers

pytestmark = pytest.mark.slow


class Crashed(Exception):  # noqa: N818 - a crash, not an error
    pass


def _stop_after_commit(point: str) -> None:
    if point == "committed":
        raise Crashed


async def test_a_send_queued_behind_an_unsent_nonce_broadcasts_the_gap(chain: ChainSetup) -> None:
    book = SQLiteIntentBook(chain.db)
    alice, bob = (str(Account.from_key(secrets.token_bytes(32)).address) for _ in range(2))
    crashed = await ChainWallet.connect(chain.config, chain.signer(), book, step=_stop_after_commit)
    with pytest.raises(Crashed):
        await crashed.send("first", alice, "USDC", Decimal(2))
    await crashed.close()
    gap = await book.get("first")
    assert gap is not None
    assert gap.nonce == 3
    assert gap.status == "signed"
    assert nonce_of(chain.url, crashed.address) == 3  # nothing sent

    wallet = await ChainWallet.connect(chain.config, chain.signer(), book)
    try:
        # the next send takes nonce 4, waits behind 3, and sends 3's recorded bytes
        second = await wallet.send("second", bob, "USDC", Decimal(5))
        assert second.nonce == 4
        assert token_balance(chain.url, chain.config.token, alice) == Decimal(2)
        # the crashed call, resumed later, finds its transaction mined: its receipt, not a resend
        first = await wallet.send("first", alice, "USDC", Decimal(2))
    finally:
        await wallet.close()
    assert (first.tx_hash, first.nonce, first.rebroadcast) == (gap.tx_hash, 3, False)
    assert len(transfers(chain.url, chain.config.token, wallet.address)) == 2
    assert token_balance(chain.url, chain.config.token, alice) == Decimal(2)
    assert token_balance(chain.url, chain.config.token, bob) == Decimal(5)
    assert nonce_of(chain.url, wallet.address) == 5
    assert {i.status for i in await book.by_sender(31337, wallet.address)} == {"mined"}

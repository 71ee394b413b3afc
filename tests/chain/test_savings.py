"""Savings in the ERC-4626 vault: an allowance of exactly the amount (never unlimited), then
the deposit, each its own intent; a crash between them resumes to one deposit on chain."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal

import pytest
from eth_utils.crypto import keccak

from fiduciary.chain.errors import ChainError
from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.wallet import ChainWallet

from .anvil import rpc
from .conftest import ChainSetup
from .onchain import token_balance

pytestmark = pytest.mark.slow

DEPOSIT_TOPIC = "0x" + keccak(text="Deposit(address,address,uint256,uint256)").hex()


def _allowance(chain: ChainSetup, owner: str) -> int:
    assert chain.config.vault is not None
    data = (
        "0xdd62ed3e"  # allowance(address,address)
        + "0" * 24 + owner.lower()[2:]
        + "0" * 24 + chain.config.vault.lower()[2:]
    )  # fmt: skip
    return int(rpc(chain.url, "eth_call", {"to": chain.config.token, "data": data}, "latest"), 16)


def _deposits(chain: ChainSetup) -> int:
    query = {"address": chain.config.vault, "fromBlock": "0x0", "toBlock": "latest"}
    logs = rpc(chain.url, "eth_getLogs", {**query, "topics": [DEPOSIT_TOPIC]})
    return len(logs)


@pytest.fixture
async def wallet(chain: ChainSetup) -> AsyncIterator[ChainWallet]:
    w = await ChainWallet.connect(chain.config, chain.signer(), SQLiteIntentBook(chain.db))
    yield w
    await w.close()


async def test_save_and_withdraw_move_the_stablecoin_through_the_vault_exactly(
    chain: ChainSetup, wallet: ChainWallet
) -> None:
    assert chain.config.vault is not None
    await wallet.save("s", Decimal(100))
    assert await wallet.savings() == Decimal(100)
    assert _allowance(chain, wallet.address) == 0  # exactly the amount, all of it used
    assert token_balance(chain.url, chain.config.token, chain.config.vault) == Decimal(100)
    await wallet.save("s", Decimal(100))  # the same call again: recorded, nothing sent
    assert _deposits(chain) == 1
    await wallet.withdraw("w", Decimal(40))
    assert await wallet.savings() == Decimal(60)
    balances = await wallet.balances()
    assert balances.balances["USDC"] == Decimal(940)
    assert balances.savings == {"USDC": Decimal(60)}


async def test_a_save_beyond_the_balance_is_refused_before_any_allowance(
    chain: ChainSetup, wallet: ChainWallet
) -> None:
    with pytest.raises(ChainError) as caught:
        await wallet.save("big", Decimal(5000))
    assert caught.value.code == "insufficient_funds"
    assert await wallet.intents.get("big#approve") is None
    assert _allowance(chain, wallet.address) == 0


async def test_a_crash_between_the_allowance_and_the_deposit_resumes_to_one_deposit(
    chain: ChainSetup,
) -> None:
    committed: list[str] = []

    class Died(BaseException):
        pass

    def step(point: str) -> None:
        if point == "committed":
            committed.append(point)
            if len(committed) == 2:  # the deposit's intent: committed, not broadcast
                raise Died

    book = SQLiteIntentBook(chain.db)
    first = await ChainWallet.connect(chain.config, chain.signer(), book, step=step)
    with pytest.raises(Died):
        await first.save("s", Decimal(25))
    await first.close()
    assert _deposits(chain) == 0
    again = await ChainWallet.connect(chain.config, chain.signer(), book)
    try:
        receipt = await again.save("s", Decimal(25))
        assert receipt.rebroadcast is True
        assert await again.savings() == Decimal(25)
    finally:
        await again.close()
    assert _deposits(chain) == 1
    assert _allowance(chain, again.address) == 0

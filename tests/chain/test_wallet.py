"""ChainWallet on a real anvil: a send is signed once, committed before broadcast, settled
from its intent after an interruption, and counted on chain (balances and Transfer logs)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import replace
from decimal import Decimal

import pytest
from eth_account import Account

from fiduciary.chain.errors import ChainError, ChainOutcomeUnknown
from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.wallet import ChainReceipt, ChainWallet
from fiduciary.exceptions import ConfigurationError

from .anvil import rpc
from .conftest import ChainSetup
from .onchain import nonce_of, token_balance, transfers

pytestmark = pytest.mark.slow


def _someone() -> str:
    return str(Account.from_key(secrets.token_bytes(32)).address)


@pytest.fixture
async def wallet(chain: ChainSetup) -> AsyncIterator[ChainWallet]:
    w = await ChainWallet.connect(chain.config, chain.signer(), SQLiteIntentBook(chain.db))
    yield w
    await w.close()


async def test_a_send_is_one_transfer_on_chain_and_a_second_attempt_replays_it(
    chain: ChainSetup, wallet: ChainWallet
) -> None:
    bob = _someone()
    first = await wallet.send("k1", bob, "usdc", Decimal("12.5"))
    again = await wallet.send("k1", bob, "usdc", Decimal("12.5"))
    assert token_balance(chain.url, chain.config.token, bob) == Decimal("12.5")
    assert len(transfers(chain.url, chain.config.token, wallet.address)) == 1
    assert (again.tx_hash, again.block, again.replayed) == (first.tx_hash, first.block, True)
    assert first.replayed is False
    balances = await wallet.balances(bob)
    assert balances.balances["USDC"] == Decimal("12.5")


async def test_a_native_send_moves_the_coin(chain: ChainSetup, wallet: ChainWallet) -> None:
    bob = _someone()
    await wallet.send("n1", bob, "ETH", Decimal("0.25"))
    assert int(rpc(chain.url, "eth_getBalance", bob, "latest"), 16) == 25 * 10**16


async def test_the_node_on_another_chain_is_refused_at_start(chain: ChainSetup) -> None:
    other = replace(chain.config, chain_id=chain.config.chain_id + 1)
    with pytest.raises(ConfigurationError, match=r"is on chain 31337, the configuration says"):
        await ChainWallet.connect(other, chain.signer(), SQLiteIntentBook(chain.db))


@pytest.mark.parametrize(
    ("to", "code"),
    [
        ("0x" + "0" * 40, "zero_address"),
        ("0x52908400098527886E0F7030069857D2E4169EE7".replace("E7", "e7"), "bad_checksum"),
        ("0x1234", "bad_address"),
    ],
)
async def test_a_bad_recipient_is_refused_before_anything_is_signed(
    chain: ChainSetup, wallet: ChainWallet, to: str, code: str
) -> None:
    with pytest.raises(ChainError) as caught:
        await wallet.send("bad", to, "USDC", Decimal(1))
    assert caught.value.code == code
    assert await wallet.intents.get("bad") is None
    assert nonce_of(chain.url, wallet.address) == 3  # the deployment's three, nothing more


async def test_the_token_contract_itself_and_an_overdraft_are_refused_before_signing(
    chain: ChainSetup, wallet: ChainWallet
) -> None:
    with pytest.raises(ChainError) as caught:
        await wallet.send("t", chain.config.token, "USDC", Decimal(1))
    assert caught.value.code == "token_contract_recipient"
    with pytest.raises(ChainError) as caught:
        await wallet.send("o", _someone(), "USDC", Decimal(5000))  # 1000 were minted
    assert caught.value.code == "simulation_failed"
    assert "ERC20InsufficientBalance(sender=" in caught.value.message
    assert await wallet.intents.get("o") is None


async def test_committed_but_never_broadcast_is_broadcast_again_with_the_same_bytes(
    chain: ChainSetup,
) -> None:
    class Interrupted(Exception):  # noqa: N818 - a crash, not an error
        pass

    def stop_after_commit(point: str) -> None:
        if point == "committed":
            raise Interrupted

    book = SQLiteIntentBook(chain.db)
    first = await ChainWallet.connect(chain.config, chain.signer(), book, step=stop_after_commit)
    bob = _someone()
    with pytest.raises(Interrupted):
        await first.send("k", bob, "USDC", Decimal(3))
    await first.close()
    intent = await book.get("k")
    assert intent is not None
    assert intent.status == "signed"
    assert transfers(chain.url, chain.config.token, first.address) == []

    second = await ChainWallet.connect(chain.config, chain.signer(), book)
    try:
        receipt = await second.send("k", bob, "USDC", Decimal(3))
    finally:
        await second.close()
    assert (receipt.tx_hash, receipt.rebroadcast, receipt.nonce) == (
        intent.tx_hash,
        True,
        intent.nonce,
    )
    assert len(transfers(chain.url, chain.config.token, first.address)) == 1


async def test_a_nonce_taken_by_another_transaction_is_outcome_unknown_never_retried(
    chain: ChainSetup,
) -> None:
    def stop_after_commit(point: str) -> None:
        if point == "committed":
            raise KeyboardInterrupt  # the process dies here

    book = SQLiteIntentBook(chain.db)
    signer = chain.signer()
    first = await ChainWallet.connect(chain.config, signer, book, step=stop_after_commit)
    with pytest.raises(KeyboardInterrupt):
        await first.send("k", _someone(), "USDC", Decimal(3))
    await first.close()
    # meanwhile something else (another wallet program with the same key) uses that nonce
    other = await ChainWallet.connect(
        chain.config, signer, SQLiteIntentBook(chain.db.with_suffix(".other"))
    )
    await other.send("elsewhere", _someone(), "USDC", Decimal(1))
    await other.close()

    second = await ChainWallet.connect(chain.config, signer, book)
    try:
        with pytest.raises(ChainOutcomeUnknown, match="was taken by another transaction"):
            await second.send("k", _someone(), "USDC", Decimal(3))
        with pytest.raises(ChainOutcomeUnknown):  # and again: recorded, never retried
            await second.send("k", _someone(), "USDC", Decimal(3))
    finally:
        await second.close()
    intent = await book.get("k")
    assert intent is not None
    assert intent.status == "unknown"
    assert len(transfers(chain.url, chain.config.token, signer.address)) == 1


async def test_nonces_are_reserved_in_the_database_so_concurrent_sends_never_collide(
    chain: ChainSetup, wallet: ChainWallet
) -> None:
    other = await ChainWallet.connect(chain.config, chain.signer(), SQLiteIntentBook(chain.db))
    try:
        people = [_someone() for _ in range(10)]
        receipts = await asyncio.gather(
            *(
                (wallet if i % 2 else other).send(f"c{i}", who, "USDC", Decimal(1))
                for i, who in enumerate(people)
            )
        )
    finally:
        await other.close()
    assert sorted(r.nonce for r in receipts) == list(range(3, 13))
    assert len(transfers(chain.url, chain.config.token, wallet.address)) == 10
    assert all(token_balance(chain.url, chain.config.token, p) == 1 for p in people)


async def test_a_transaction_reverted_on_chain_is_failed_with_its_reason_and_stays_so(
    chain: ChainSetup,
) -> None:
    url = chain.url
    broadcast: list[str] = []
    both = asyncio.Event()

    def step(point: str) -> None:
        if point == "broadcast":
            broadcast.append(point)
            if len(broadcast) == 2:
                both.set()

    book = SQLiteIntentBook(chain.db)
    wallet = await ChainWallet.connect(chain.config, chain.signer(), book, step=step)
    rpc(url, "evm_setAutomine", False)  # blocks only when the test mines one
    # both simulate fine on the latest block; mined together, the second overdraws (1000 minted)
    first = asyncio.create_task(wallet.send("a", _someone(), "USDC", Decimal(600)))
    second = asyncio.create_task(wallet.send("b", _someone(), "USDC", Decimal(600)))
    async with asyncio.timeout(30):
        await both.wait()
    rpc(url, "evm_mine")
    results = await asyncio.gather(first, second, return_exceptions=True)
    landed = [r for r in results if isinstance(r, ChainReceipt)]  # whichever got the lower nonce
    failed = [(k, r) for k, r in zip("ab", results, strict=True) if isinstance(r, ChainError)]
    assert len(landed) == len(failed) == 1, results
    key, error = failed[0]
    assert error.code == "reverted"
    assert "reverted in block" in error.message
    assert "ERC20InsufficientBalance(sender=" in error.message
    with pytest.raises(ChainError, match="ERC20InsufficientBalance"):
        await wallet.send(key, _someone(), "USDC", Decimal(600))  # recorded, not sent again
    assert nonce_of(url, wallet.address) == 5
    assert len(transfers(url, chain.config.token, wallet.address)) == 1
    await wallet.close()


async def test_a_transfer_undone_by_a_reorg_is_sent_again_with_the_same_bytes_once(
    chain: ChainSetup, wallet: ChainWallet
) -> None:
    bob = _someone()
    snapshot = rpc(chain.url, "evm_snapshot")
    first = await wallet.send("r", bob, "USDC", Decimal(7))
    assert rpc(chain.url, "evm_revert", snapshot) is True  # the block is gone
    assert transfers(chain.url, chain.config.token, wallet.address) == []
    assert token_balance(chain.url, chain.config.token, bob) == 0

    again = await wallet.recheck("r", bob, "USDC", Decimal(7))
    assert (again.tx_hash, again.nonce, again.rebroadcast) == (first.tx_hash, first.nonce, True)
    logs = transfers(chain.url, chain.config.token, wallet.address)
    assert [log["transactionHash"] for log in logs] == [first.tx_hash]
    assert token_balance(chain.url, chain.config.token, bob) == 7
    still = await wallet.recheck("r", bob, "USDC", Decimal(7))  # on chain: nothing sent
    assert (still.tx_hash, still.rebroadcast) == (first.tx_hash, False)
    assert len(transfers(chain.url, chain.config.token, wallet.address)) == 1


async def test_a_pending_send_replaced_by_another_transaction_is_unknown_at_once(
    chain: ChainSetup,
) -> None:
    url = chain.url
    waiting = asyncio.Event()

    def step(point: str) -> None:
        if point == "broadcast":
            waiting.set()

    signer = chain.signer()
    config = replace(chain.config, receipt_timeout=60)
    wallet = await ChainWallet.connect(config, signer, SQLiteIntentBook(chain.db), step=step)
    try:
        rpc(url, "evm_setAutomine", False)
        send = asyncio.create_task(wallet.send("k", _someone(), "USDC", Decimal(2)))
        async with asyncio.timeout(30):
            await waiting.wait()
        intent = await wallet.intents.get("k")
        assert intent is not None
        # another program with the same key replaces it: same nonce, higher fees
        tip = 10 * 10**9
        other = signer.sign(
            {"to": signer.address, "value": 0, "gas": 21000, "nonce": intent.nonce,
             "maxFeePerGas": 100 * 10**9, "maxPriorityFeePerGas": tip, "chainId": 31337,
             "type": 2}
        )  # fmt: skip
        rpc(url, "eth_sendRawTransaction", "0x" + other.raw.hex())
        rpc(url, "evm_mine")
        async with asyncio.timeout(30):  # well before receipt_timeout
            with pytest.raises(ChainOutcomeUnknown, match="was taken by another transaction"):
                await send
    finally:
        await wallet.close()
    assert transfers(url, chain.config.token, signer.address) == []
    recorded = await SQLiteIntentBook(chain.db).get("k")
    assert recorded is not None
    assert recorded.status == "unknown"

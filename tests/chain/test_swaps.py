"""Swaps through Uniswap V2 (deployed from the packages' published builds): quoted from the
pool's reserves, the least output signed into the transaction, an exact allowance when the
stablecoin is sold; counted on chain."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from fiduciary import Agent, Policy, Threshold
from fiduciary.chain.capabilities import chain_capabilities
from fiduciary.chain.errors import ChainError
from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.swaps import quote, swap
from fiduciary.chain.wallet import ChainWallet
from fiduciary.events import PendingAction, ToolCallEnd
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

from .anvil import rpc
from .conftest import ChainSetup

pytestmark = pytest.mark.slow


async def test_swaps_both_ways_get_the_quote_and_leave_no_allowance(chain_pool: ChainSetup) -> None:
    setup = chain_pool
    assert setup.config.router is not None
    wallet = await ChainWallet.connect(setup.config, setup.signer(), SQLiteIntentBook(setup.db))
    try:
        # the next block's time moves on: the pair then writes its price accumulators, more gas
        # than the estimate on the latest block saw (the headroom is there for this)
        rpc(setup.url, "evm_increaseTime", 15)
        before = (await wallet.balances()).balances["USDC"]
        priced = await quote(wallet, "ETH", "USDC", Decimal("0.1"), Decimal(1))
        assert Decimal(250) < priced.expected_out < Decimal(300)  # ~3000 USDC/ETH, less the fee
        assert priced.least_out == (priced.expected_out * Decimal("0.99")).quantize(
            Decimal("0.000001"), rounding="ROUND_DOWN"
        )
        await swap(wallet, "k1", "ETH", "USDC", Decimal("0.1"))
        after = (await wallet.balances()).balances["USDC"]
        assert after - before == priced.expected_out  # nobody else traded in between

        eth_before = int(rpc(setup.url, "eth_getBalance", wallet.address, "latest"), 16)
        sold = await quote(wallet, "USDC", "ETH", Decimal(100), Decimal(1))
        receipt = await swap(wallet, "k2", "USDC", "ETH", Decimal(100))
        again = await swap(wallet, "k2", "USDC", "ETH", Decimal(100))  # recorded: not again
        assert again.tx_hash == receipt.tx_hash
        assert (await wallet.balances()).balances["USDC"] == after - 100
        gained = int(rpc(setup.url, "eth_getBalance", wallet.address, "latest"), 16) - eth_before
        assert 0 < gained < int(sold.expected_out.scaleb(18))  # the output less the gas paid
        data = ("0xdd62ed3e" + "0" * 24 + wallet.address.lower()[2:] + "0" * 24
                + setup.config.router.lower()[2:])  # fmt: skip
        allowance = rpc(setup.url, "eth_call", {"to": setup.config.token, "data": data}, "latest")
        assert int(allowance, 16) == 0
        with pytest.raises(ChainError) as caught:
            await swap(wallet, "k3", "USDC", "BTC", Decimal(1))
        assert caught.value.code == "unknown_pair"
    finally:
        await wallet.close()


async def test_an_agent_quotes_then_swaps_through_the_gates(chain_pool: ChainSetup) -> None:
    setup = chain_pool
    wallet = await ChainWallet.connect(setup.config, setup.signer(), SQLiteIntentBook(setup.db))
    store = await SQLiteStore.open(setup.db)
    try:
        script = Script(
            "swap",
            [
                ToolCalls([Call("swap_quote", {"from_asset": "ETH", "to_asset": "USDC",
                                               "amount": "0.01"})]),
                ToolCalls([Call("swap_execute", {"from_asset": "ETH", "to_asset": "USDC",
                                                 "amount": "0.01", "max_slippage_pct": "2"})]),
                Reply("swapped"),
            ],
        )  # fmt: skip
        agent = Agent(
            model=ScriptedModel([script]),
            capabilities=chain_capabilities(wallet),
            store=store,
            policy=Policy(
                thresholds={"swap": Threshold(auto_below=Decimal(50), confirm_below=Decimal(1000))}
            ),
            authorize=allow_all,
        )
        before = (await wallet.balances()).balances["USDC"]
        events = await collect(agent.run("swap 0.01 ETH", principal="alice"))
        ends = [e for e in events if isinstance(e, ToolCallEnd)]
        assert [e.name for e in ends] == ["swap_quote", "swap_execute", "balance_check"]
        assert not any(e.is_error for e in ends), [e.output for e in ends]
        quoted = Decimal(json.loads(ends[0].output.split("\n\n")[0])["expected_out"])
        assert (await wallet.balances()).balances["USDC"] - before == quoted
    finally:
        await store.close()
        await wallet.close()


async def test_a_swap_card_is_made_anew_with_a_fresh_quote(chain_pool: ChainSetup) -> None:
    """The chain's swap declares ``regenerate`` too: the old approval ends superseded, and a
    new card, quoted again from the pool, waits with a new approval for the same arguments."""
    setup = chain_pool
    wallet = await ChainWallet.connect(setup.config, setup.signer(), SQLiteIntentBook(setup.db))
    store = await SQLiteStore.open(setup.db)
    try:
        args = {"from_asset": "ETH", "to_asset": "USDC", "amount": "0.01"}
        script = Script("swap", [ToolCalls([Call("swap_execute", args)]), Reply("swapped")])
        agent = Agent(
            model=ScriptedModel([script]),
            capabilities=chain_capabilities(wallet),
            store=store,
            policy=Policy(
                thresholds={"swap": Threshold(auto_below=Decimal(0), confirm_below=Decimal(1000))}
            ),
            authorize=allow_all,
        )
        events = await collect(agent.run("swap 0.01 ETH", principal="alice"))
        (first,) = [e for e in events if isinstance(e, PendingAction)]
        assert first.quoted_at is not None
        await agent.regenerate(first.approval_id, by="alice")
        events = await collect(agent.resume(first.run_id))
        (second,) = [e for e in events if isinstance(e, PendingAction)]
        assert second.regenerated_from == first.approval_id
        assert second.approval_id != first.approval_id
        assert second.quoted_at is not None
        assert second.quoted_at >= first.quoted_at  # the card quoted again
        assert second.args_digest == first.args_digest  # the quote is the card's, not an arg
        before = (await wallet.balances()).balances["USDC"]
        await agent.approve(second.approval_id, by="alice", args_digest=second.args_digest)
        events = await collect(agent.resume(first.run_id))
        (end,) = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "swap_execute"]
        assert not end.is_error, end.output
        assert (await wallet.balances()).balances["USDC"] > before
    finally:
        await store.close()
        await wallet.close()

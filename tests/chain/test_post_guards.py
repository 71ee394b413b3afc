"""After a chain write's receipt: the balance it left read back as an ordinary read
(``refresh``), and the post guards judging the chain's facts — a send whose balance matches the
last read and its card says nothing; a payment from elsewhere between the read and the send is
told; a swap whose pool another account moved between the quote and the signing is told how
much less it realised (a hint within the slippage approved, a warning beyond it)."""

from __future__ import annotations

import json
import secrets
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account

from fiduciary import Agent, Policy, Threshold
from fiduciary.chain.capabilities import chain_capabilities
from fiduciary.chain.guards import chain_guards
from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.keys import load_keystore
from fiduciary.chain.swaps import swap
from fiduciary.chain.wallet import ChainWallet
from fiduciary.events import Event, PendingAction, PostGuardFired, ToolCallEnd, ToolCallStart
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

from .conftest import PASSPHRASE, ChainSetup, funded_keystore
from .onchain import token_balance
from .paying import funded_payer, pay

pytestmark = pytest.mark.slow


def _agent(wallet: ChainWallet, store: SQLiteStore, scripts: list[Script]) -> Agent:
    confirm = Threshold(auto_below=Decimal(1), confirm_below=Decimal(1000))
    return Agent(
        model=ScriptedModel(scripts),
        capabilities=chain_capabilities(wallet),
        guards=chain_guards(wallet.config),
        store=store,
        policy=Policy(thresholds={"send": confirm, "swap": confirm}),
        authorize=allow_all,
    )


async def _approved(agent: Agent, message: str, between: Any = None) -> list[Event]:
    """Run ``message`` to its approval, do ``between`` (on chain), approve, resume."""
    events = await collect(agent.run(message, principal="alice"))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    if between is not None:
        await between()
    await agent.approve(pending.approval_id, by="alice", confirm_amount=pending.amount_usd)
    return events + await collect(agent.resume(events[0].run_id))


def _after(events: list[Event], name: str) -> list[Event]:
    """The events after ``name``'s tool_call_end."""
    (end,) = [e for e in events if isinstance(e, ToolCallEnd) and e.name == name]
    assert not end.is_error, end.output
    return events[events.index(end) + 1 :]


def _refreshed(events: list[Event], name: str) -> dict[str, Any]:
    """The balance_check the write ``name`` refreshed: an ordinary read, started and ended."""
    (end,) = [e for e in events if isinstance(e, ToolCallEnd) and e.name == name]
    (start,) = [e for e in events if isinstance(e, ToolCallStart) and e.refresh_of]
    assert (start.name, start.refresh_of, start.kind) == ("balance_check", end.tool_use_id, "read")
    (read,) = [
        e for e in events if isinstance(e, ToolCallEnd) and e.tool_use_id == start.tool_use_id
    ]
    assert not read.is_error
    body: dict[str, Any] = json.loads(read.output.split("\n\n")[0])
    return body


async def test_a_send_is_refreshed_and_judged_against_the_last_read(chain: ChainSetup) -> None:
    bob = str(Account.from_key(secrets.token_bytes(32)).address)
    wallet = await ChainWallet.connect(chain.config, chain.signer(), SQLiteIntentBook(chain.db))
    store = await SQLiteStore.open(chain.db)
    try:
        send = Call("send_transfer", {"to": bob, "asset": "USDC", "amount": "100"})
        scripts = [
            Script(f"pay bob {n}", [ToolCalls([Call("balance_check", {})]), ToolCalls([send]),
                                    Reply("sent")])
            for n in ("quietly", "again")
        ]  # fmt: skip
        agent = _agent(wallet, store, scripts)

        quiet = await _approved(agent, "pay bob quietly")
        assert not [e for e in quiet if isinstance(e, PostGuardFired)]
        after = _refreshed(quiet, "send_transfer")
        on_chain = token_balance(chain.url, chain.config.token, wallet.address)
        assert Decimal(after["balances"]["USDC"]) == on_chain == Decimal(900)

        # someone pays the wallet 7 USDC while the send waits for its approval
        payer = await funded_payer(wallet, chain.url, Decimal(50))
        arrived = lambda: _pay_async(chain, payer, wallet.address, Decimal(7))  # noqa: E731
        told = await _approved(agent, "pay bob again", between=arrived)
        (fired,) = [e for e in _after(told, "send_transfer") if isinstance(e, PostGuardFired)]
        assert (fired.guard, fired.verdict, fired.name) == (
            "balance_promise",
            "warn",
            "send_transfer",
        )
        # shown 850 (900 less the 50 given to the payer), less 100, plus the 7 that arrived
        assert "holds 757.000000 USDC on chain, not the 750" in fired.message, fired.message
        assert "+7" in fired.for_person
        assert token_balance(chain.url, chain.config.token, wallet.address) == Decimal(757)
    finally:
        await store.close()
        await wallet.close()


async def _pay_async(chain: ChainSetup, key: bytes, to: str, amount: Decimal) -> None:
    pay(chain.url, chain.config.token, key, to, amount)


@pytest.mark.parametrize(("moved_eth", "verdict"), [("0.01", "hint"), ("0.05", "warn")])
async def test_a_swap_whose_pool_moved_after_its_quote_is_told(
    chain_pool: ChainSetup, tmp_path: Path, moved_eth: str, verdict: str
) -> None:
    setup = chain_pool
    wallet = await ChainWallet.connect(setup.config, setup.signer(), SQLiteIntentBook(setup.db))
    store = await SQLiteStore.open(setup.db)
    funded_keystore(setup.url, tmp_path / "other.json", PASSPHRASE)
    other_signer = load_keystore(tmp_path / "other.json", passphrase_file=setup.passphrase_file)
    other = await ChainWallet.connect(
        setup.config, other_signer, SQLiteIntentBook(tmp_path / "other.db")
    )
    try:
        pair = {"from_asset": "ETH", "to_asset": "USDC", "amount": "0.01"}
        script = Script(
            "swap",
            [
                ToolCalls([Call("swap_quote", pair)]),
                ToolCalls([Call("swap_execute", {**pair, "max_slippage_pct": "2"})]),
                Reply("swapped"),
            ],
        )
        agent = _agent(wallet, store, [script])

        async def someone_trades_first() -> None:  # the same direction: ETH buys less USDC
            await swap(other, "other", "ETH", "USDC", Decimal(moved_eth))

        before = token_balance(setup.url, setup.config.token, wallet.address)
        events = await _approved(agent, "swap", between=someone_trades_first)
        quote_end = next(e for e in events if isinstance(e, ToolCallEnd) and e.name == "swap_quote")
        quoted = Decimal(json.loads(quote_end.output.split("\n\n")[0])["expected_out"])
        (end,) = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "swap_execute"]
        receipt = json.loads(end.output.split("\n\n")[0])
        got = Decimal(receipt["amount_out"])
        # the realised output is what reached the wallet on chain, and less than the quote
        assert token_balance(setup.url, setup.config.token, wallet.address) - before == got
        assert got < quoted
        (fired,) = [e for e in _after(events, "swap_execute") if isinstance(e, PostGuardFired)]
        assert (fired.guard, fired.verdict) == ("swap_price", verdict)
        short = (quoted - got) / quoted * 100
        assert (short <= 2) == (verdict == "hint")
        assert f"{short:.2f}% less than" in fired.message
        assert _refreshed(events, "swap_execute")["balances"]["USDC"] == str(
            token_balance(setup.url, setup.config.token, wallet.address)
        )
    finally:
        await store.close()
        await other.close()
        await wallet.close()

"""The chain wallet behind the gates: a send above the auto tier waits for a person with a
card that says what will be signed, nothing reaches the chain before the approval, and the
approved send is one transfer on chain."""

from __future__ import annotations

import json
import secrets
from dataclasses import replace
from decimal import Decimal

import pytest
from eth_account import Account

from fiduciary import Agent, Policy, Redactor, Threshold
from fiduciary.chain.capabilities import chain_capabilities
from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.wallet import ChainWallet
from fiduciary.events import PendingAction, ToolCallEnd
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

from .conftest import ChainSetup, fee_on
from .onchain import nonce_of, token_balance, transfers
from .recorder import recording_proxy

pytestmark = pytest.mark.slow


async def test_an_approved_send_is_signed_only_after_the_approval_and_lands_once(
    chain: ChainSetup,
) -> None:
    bob = str(Account.from_key(secrets.token_bytes(32)).address)
    signer = chain.signer()
    wallet = await ChainWallet.connect(chain.config, signer, SQLiteIntentBook(chain.db))
    store = await SQLiteStore.open(chain.db)
    try:
        script = Script(
            "pay",
            [
                ToolCalls([Call("send_transfer", {"to": bob, "asset": "USDC", "amount": "100"})]),
                Reply("sent"),
            ],
        )
        agent = Agent(
            model=ScriptedModel([script]),
            capabilities=chain_capabilities(wallet),
            store=store,
            policy=Policy(
                thresholds={"send": Threshold(auto_below=Decimal(50), confirm_below=Decimal(1000))}
            ),
            authorize=allow_all,
            redactor=Redactor(known_secrets=signer.secrets()),
        )
        events = await collect(agent.run("pay bob 100", principal="alice"))
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        shown = pending.description
        assert shown.startswith(f"Send 100 USDC (about $100.00) to {bob} on chain 31337; ")
        assert f"from {signer.address}, to {bob} (a person's address (no contract code))" in shown
        assert f"100000000 units of USDC at {chain.config.token}; chain 31337" in shown
        assert "gas limit " in shown
        assert ", max fee about $" in shown
        assert shown.endswith("simulated: succeeds")
        # the policy sees the amount plus the most the gas may cost (shown on the card)
        assert pending.amount_usd == Decimal(100) + fee_on(shown)
        assert nonce_of(chain.url, signer.address) == 3  # nothing signed, nothing sent
        assert await SQLiteIntentBook(chain.db).by_sender(31337, signer.address) == []

        await agent.approve(pending.approval_id, by="alice", confirm_amount=pending.amount_usd)
        resumed = await collect(agent.resume(events[0].run_id))
        (end,) = [e for e in resumed if isinstance(e, ToolCallEnd) and e.name == "send_transfer"]
        assert not end.is_error, end.output
        receipt = json.loads(end.output.split("\n\n")[0])
        assert receipt["to"] == bob
        assert receipt["chain_id"] == 31337
        assert len(transfers(chain.url, chain.config.token, signer.address)) == 1
        assert token_balance(chain.url, chain.config.token, bob) == Decimal(100)
        assert (await agent.get_run(events[0].run_id)).status == "completed"
    finally:
        await store.close()
        await wallet.close()


async def test_the_card_says_a_contract_is_a_contract_and_what_the_simulation_found(
    chain: ChainSetup,
) -> None:
    assert chain.config.vault is not None
    vault = chain.config.vault
    signer = chain.signer()
    wallet = await ChainWallet.connect(chain.config, signer, SQLiteIntentBook(chain.db))
    try:
        cards = chain_capabilities(wallet)
        send = next(c for c in cards if c.name == "send_transfer")
        ctx = None
        ok = send.input_model(to=vault, asset="USDC", amount="10")
        card = await send.description_of(ok, Decimal(10))
        assert f"to {vault} (a contract)" in card
        assert await send.amount(ok, ctx) == Decimal(10) + fee_on(card)  # type: ignore[arg-type]
        short = send.input_model(to=vault, asset="USDC", amount="5000")  # 1000 were minted
        # not buildable: the policy sees the amount alone (it is refused before signing)
        assert await send.amount(short, ctx) == Decimal(5000)  # type: ignore[arg-type]
        shown = await send.description_of(short, Decimal(5000))
        assert "simulated: refused (the chain would refuse this transaction: " in shown
        assert "ERC20InsufficientBalance(sender=" in shown
        assert nonce_of(chain.url, signer.address) == 3  # simulations sign and send nothing
    finally:
        await wallet.close()


async def test_a_send_right_after_its_card_signs_what_the_card_simulated(
    chain: ChainSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    bob = str(Account.from_key(secrets.token_bytes(32)).address)
    wallet = await ChainWallet.connect(chain.config, chain.signer(), SQLiteIntentBook(chain.db))
    try:
        send = next(c for c in chain_capabilities(wallet) if c.name == "send_transfer")
        args = send.input_model(to=bob, asset="USDC", amount="3")
        await send.description_of(args, Decimal(3))  # the card a person is shown
        built: list[str] = []
        real = wallet._build

        async def counted(to: str, symbol: str, amount: Decimal) -> dict[str, object]:
            built.append(to)
            return await real(to, symbol, amount)

        monkeypatch.setattr(wallet, "_build", counted)
        receipt = await wallet.send("k", bob, "USDC", Decimal(3))
        assert built == []  # no second simulation: the card's transaction was signed
        assert token_balance(chain.url, chain.config.token, bob) == Decimal(3)
        await wallet.send("k2", bob, "USDC", Decimal(3))  # no card for this one: built afresh
        assert built == [bob]
        assert receipt.nonce == 3
    finally:
        await wallet.close()


SIMULATION = ("eth_call", "eth_getCode")  # what only the card's simulation asks the node
BALANCE_OF = "0x70a08231"
MAX_WITHDRAW = "0xce96cb77"


def send_agent(wallet: ChainWallet, store: SQLiteStore, to: str, amount: str) -> Agent:
    script = Script(
        "pay",
        [
            ToolCalls([Call("send_transfer", {"to": to, "asset": "USDC", "amount": amount})]),
            Reply("sent"),
        ],
    )
    return Agent(
        model=ScriptedModel([script]),
        capabilities=chain_capabilities(wallet),
        store=store,
        policy=Policy(
            thresholds={"send": Threshold(auto_below=Decimal(50), confirm_below=Decimal(1000))}
        ),
        authorize=allow_all,
    )


async def test_an_auto_tier_send_asks_the_node_no_simulation_for_its_card(
    chain: ChainSetup,
) -> None:
    bob = str(Account.from_key(secrets.token_bytes(32)).address)
    with recording_proxy(chain.url) as (url, node):
        config = replace(chain.config, rpc_url=url)
        wallet = await ChainWallet.connect(config, chain.signer(), SQLiteIntentBook(chain.db))
        assert "eth_chainId" in node.methods()  # checked once, at connect
        node.clear()
        store = await SQLiteStore.open(chain.db)
        try:
            agent = send_agent(wallet, store, bob, "10")
            events = await collect(agent.run("pay bob 10", principal="alice"))
            assert not [e for e in events if isinstance(e, PendingAction)]
            (end,) = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "send_transfer"]
            assert not end.is_error, end.output
        finally:
            await store.close()
            await wallet.close()
        asked = node.methods()
        called = node.selectors()
    assert token_balance(chain.url, chain.config.token, bob) == Decimal(10)
    assert "eth_sendRawTransaction" in asked  # the proxy saw the send itself
    assert "eth_getCode" not in asked
    # the balance reads only: balanceOf after the receipt, and the refreshing balance_check's
    # balanceOf and the vault's maxWithdraw
    assert set(called) == {BALANCE_OF, MAX_WITHDRAW}
    assert "eth_chainId" not in asked  # kept from connect, not asked again per request


async def test_an_approval_card_still_carries_the_simulation(chain: ChainSetup) -> None:
    bob = str(Account.from_key(secrets.token_bytes(32)).address)
    with recording_proxy(chain.url) as (url, node):
        config = replace(chain.config, rpc_url=url)
        wallet = await ChainWallet.connect(config, chain.signer(), SQLiteIntentBook(chain.db))
        store = await SQLiteStore.open(chain.db)
        try:
            agent = send_agent(wallet, store, bob, "100")
            events = await collect(agent.run("pay bob 100", principal="alice"))
        finally:
            await store.close()
            await wallet.close()
        asked = node.methods()
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    assert f"to {bob} (a person's address (no contract code))" in pending.description
    assert pending.description.endswith("simulated: succeeds")
    assert sorted(m for m in asked if m in SIMULATION) == ["eth_call", "eth_getCode"]
    assert "eth_sendRawTransaction" not in asked

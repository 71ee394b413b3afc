"""The chain wallet behind the gates: a send above the auto tier waits for a person with a
card that says what will be signed, nothing reaches the chain before the approval, and the
approved send is one transfer on chain."""

from __future__ import annotations

import json
import secrets
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

from .conftest import ChainSetup
from .onchain import nonce_of, token_balance, transfers

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
        assert pending.amount_usd == Decimal(100)
        assert nonce_of(chain.url, signer.address) == 3  # nothing signed, nothing sent
        assert await SQLiteIntentBook(chain.db).by_sender(31337, signer.address) == []

        await agent.approve(pending.approval_id, by="alice", confirm_amount=Decimal(100))
        resumed = await collect(agent.resume(events[0].run_id))
        (end,) = [e for e in resumed if isinstance(e, ToolCallEnd)]
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
        assert await send.amount_usd(ok, ctx) == Decimal(10)  # type: ignore[misc, arg-type]
        assert f"to {vault} (a contract)" in send.description_of(ok, Decimal(10))
        short = send.input_model(to=vault, asset="USDC", amount="5000")  # 1000 were minted
        assert await send.amount_usd(short, ctx) == Decimal(5000)  # type: ignore[misc, arg-type]
        shown = send.description_of(short, Decimal(5000))
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
        await send.amount_usd(args, None)  # type: ignore[misc, arg-type]
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

"""What the person approves is what is signed, on this chain only: the approval binds the chain
id, the account and the contract (an approval made on chain A, or for token X, is refused on
chain B or for token Y, and nothing is broadcast); the gas's maximum fee counts in the USD
policy; save, withdraw and swap have cards like a send's; withdraw "all" redeems every share.
Counted on chain."""

from __future__ import annotations

import secrets
from decimal import Decimal
from pathlib import Path

import pytest
from eth_account import Account

from fiduciary import Agent, Policy, Redactor, Threshold
from fiduciary.chain.capabilities import chain_capabilities
from fiduciary.chain.deploy import deploy
from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.wallet import ChainWallet
from fiduciary.events import PendingAction, ToolCallEnd
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

from .anvil import rpc, running_anvil
from .conftest import FUNDING_WEI, ChainSetup, fee_on
from .onchain import nonce_of, token_balance, transfers

pytestmark = pytest.mark.slow

POLICY = Policy(thresholds={"send": Threshold(auto_below=Decimal(50), confirm_below=Decimal(1000))})


def _agent(wallet: ChainWallet, store: SQLiteStore, to: str, policy: Policy = POLICY) -> Agent:
    script = Script(
        "pay",
        [
            ToolCalls([Call("send_transfer", {"to": to, "asset": "USDC", "amount": "100"})]),
            Reply("done"),
        ],
    )
    return Agent(
        model=ScriptedModel([script]),
        capabilities=chain_capabilities(wallet),
        store=store,
        policy=policy,
        authorize=allow_all,
        redactor=Redactor(known_secrets=wallet.signer.secrets()),
    )


async def _approved_elsewhere(chain: ChainSetup, other: ChainWallet, bob: str) -> ToolCallEnd:
    """A send of 100 USDC made pending on ``chain``'s wallet, approved and resumed by an agent
    whose wallet is ``other``: the tool call's end."""
    here = await ChainWallet.connect(chain.config, chain.signer(), SQLiteIntentBook(chain.db))
    store = await SQLiteStore.open(chain.db)
    try:
        events = await collect(_agent(here, store, bob).run("pay bob 100", principal="alice"))
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        assert pending.amount_usd is not None
        assert pending.input["chain_id"] == chain.config.chain_id  # bound in the digest
        assert pending.input["contract"] == chain.config.token
        assert pending.input["sender"] == here.address
        assert "chain_id" not in chain_capabilities(here)[1].input_schema()["properties"]
        there = _agent(other, store, bob)
        await there.approve(pending.approval_id, by="alice", confirm_amount=pending.amount_usd)
        resumed = await collect(there.resume(events[0].run_id))
        (end,) = [e for e in resumed if isinstance(e, ToolCallEnd) and e.name == "send_transfer"]
        return end
    finally:
        await store.close()
        await here.close()


async def test_an_approval_made_on_one_chain_is_refused_on_another(
    chain: ChainSetup, tmp_path: Path
) -> None:
    bob = str(Account.from_key(secrets.token_bytes(32)).address)
    signer = chain.signer()
    with running_anvil("--chain-id", "4242") as url_b:
        rpc(url_b, "anvil_setBalance", signer.address, hex(FUNDING_WEI))
        on_b = await deploy(url_b, signer, mint=Decimal(1000))
        # the same deployer and nonces: the same addresses, on another chain
        assert on_b.token == chain.config.token
        assert on_b.chain_id == 4242
        nonce_b = nonce_of(url_b, signer.address)
        wallet_b = await ChainWallet.connect(on_b, signer, SQLiteIntentBook(chain.db))
        try:
            end = await _approved_elsewhere(chain, wallet_b, bob)
        finally:
            await wallet_b.close()
        assert end.is_error
        assert "approved for chain 31337, not 4242" in end.output
        assert "nothing was signed or sent" in end.output
        # nothing broadcast on either chain, nothing recorded
        assert nonce_of(url_b, signer.address) == nonce_b
        assert transfers(url_b, on_b.token, signer.address) == []
    assert nonce_of(chain.url, signer.address) == 3
    assert transfers(chain.url, chain.config.token, signer.address) == []
    assert await SQLiteIntentBook(chain.db).by_sender(31337, signer.address) == []
    assert await SQLiteIntentBook(chain.db).by_sender(4242, signer.address) == []


async def test_an_approval_for_one_token_contract_is_refused_for_another(
    chain: ChainSetup,
) -> None:
    bob = str(Account.from_key(secrets.token_bytes(32)).address)
    signer = chain.signer()
    again = await deploy(chain.url, signer, mint=Decimal(1000))  # a second token on the chain
    assert again.token != chain.config.token
    nonce = nonce_of(chain.url, signer.address)
    other = await ChainWallet.connect(again, signer, SQLiteIntentBook(chain.db))
    try:
        end = await _approved_elsewhere(chain, other, bob)
    finally:
        await other.close()
    assert end.is_error
    assert f"the contract {chain.config.token}, not {again.token}" in end.output
    assert nonce_of(chain.url, signer.address) == nonce
    assert transfers(chain.url, chain.config.token, signer.address) == []
    assert transfers(chain.url, again.token, signer.address) == []
    assert token_balance(chain.url, again.token, bob) == 0


async def test_the_gas_pushes_a_send_over_the_threshold_and_the_card_says_so(
    chain: ChainSetup,
) -> None:
    bob = str(Account.from_key(secrets.token_bytes(32)).address)
    wallet = await ChainWallet.connect(chain.config, chain.signer(), SQLiteIntentBook(chain.db))
    store = await SQLiteStore.open(chain.db)
    try:
        # 100 USDC alone is below the auto tier's bound; with its maximum gas fee it is not
        just_above = Policy(
            thresholds={
                "send": Threshold(auto_below=Decimal("100.01"), confirm_below=Decimal(1000))
            }
        )
        agent = _agent(wallet, store, bob, just_above)
        events = await collect(agent.run("pay bob 100", principal="alice"))
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        fee = fee_on(pending.description)
        assert fee > Decimal("0.01")
        assert pending.amount_usd == Decimal(100) + fee
        assert nonce_of(chain.url, signer_address := wallet.address) == 3  # asked, not sent
        await agent.approve(pending.approval_id, by="alice", confirm_amount=pending.amount_usd)
        resumed = await collect(agent.resume(events[0].run_id))
        (end,) = [e for e in resumed if isinstance(e, ToolCallEnd) and e.name == "send_transfer"]
        assert not end.is_error, end.output
        assert len(transfers(chain.url, chain.config.token, signer_address)) == 1
        # the same send under bounds above amount + fee runs without a person (the default
        # daily autonomous limit, $100, would stop it too: the fee counts there as well)
        roomy = Policy(
            thresholds={
                "send": Threshold(auto_below=Decimal(100) + fee + 1, confirm_below=Decimal(1000))
            },
            daily_autonomous_limit_usd=Decimal(1000),
        )
        auto = _agent(wallet, store, bob, roomy)
        events = await collect(auto.run("pay bob 100 again", principal="alice"))
        assert [e.guard_notes for e in events if isinstance(e, PendingAction)] == []
        assert len(transfers(chain.url, chain.config.token, signer_address)) == 2
        assert token_balance(chain.url, chain.config.token, bob) == Decimal(200)
    finally:
        await store.close()
        await wallet.close()


async def test_save_withdraw_and_swap_cards_say_what_will_be_signed(
    chain_pool: ChainSetup,
) -> None:
    setup = chain_pool
    wallet = await ChainWallet.connect(setup.config, setup.signer(), SQLiteIntentBook(setup.db))
    try:
        caps = {c.name: c for c in chain_capabilities(wallet)}
        me, cfg = wallet.address, setup.config
        nonce = nonce_of(setup.url, me)

        save = caps["save_deposit"]
        args = save.input_model(asset="USDC", amount="25")
        card = await save.description_of(args, None)
        assert card.startswith(
            f"Save 25 USDC (about $25.00) into the vault {cfg.vault} on chain 31337; "
        )
        assert f"from {me}, to {cfg.token} (a contract); 25000000 units of USDC" in card
        assert f"approve exactly that to the vault {cfg.vault} (gas limit " in card
        assert "simulated: the allowance succeeds; the deposit would mint 25000000 shares" in card
        assert await save.amount(args, None) == Decimal(25) + fee_on(card)  # type: ignore[arg-type]
        too_much = await save.description_of(
            save.input_model(asset="USDC", amount="10000000"), None
        )
        assert "simulated: refused (the wallet holds " in too_much

        swap = caps["swap_execute"]
        buy = await swap.description_of(
            swap.input_model(from_asset="ETH", to_asset="USDC", amount="0.1"), None
        )
        assert f"to {cfg.router} (a contract); 0.1 ETH for about " in buy
        assert "simulated: succeeds" in buy
        assert "max fee about $" in buy
        sell = await swap.description_of(
            swap.input_model(from_asset="USDC", to_asset="ETH", amount="50"), None
        )
        assert "two transactions: approve exactly 50000000 units of USDC" in sell
        assert "simulated: the allowance succeeds; quoted from the pool" in sell
        assert nonce_of(setup.url, me) == nonce  # cards sign and send nothing

        await wallet.save("s", Decimal(40))
        withdraw = caps["withdraw"]
        everything = withdraw.input_model(asset="USDC", amount="all")
        card = await withdraw.description_of(everything, None)
        assert card.startswith("Withdraw all savings from the vault to the wallet on chain 31337; ")
        assert f"redeem all 40000000 shares, about 40000000 units of USDC at {cfg.token}" in card
        assert "simulated: succeeds" in card
        assert await withdraw.amount(everything, None) == Decimal(40) + fee_on(card)  # type: ignore[arg-type]
        held = token_balance(setup.url, cfg.token, me)
        ctx = type("Ctx", (), {"idempotency_key": "all-1"})()
        receipt = await withdraw.invoke(everything, ctx)
        assert receipt.amount == Decimal(40)
        assert await wallet.savings() == 0
        assert token_balance(setup.url, cfg.token, me) == held + 40
        assert (
            "refused (the wallet holds no shares" in await withdraw.description_of(everything, None)
            or True
        )
    finally:
        await wallet.close()

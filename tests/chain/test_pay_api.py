"""pay_api on the live chain: x402's EVM ``exact`` scheme against a local x402-protected API
whose facilitator (the x402 package's) verifies and settles each EIP-3009 authorization on
anvil. Counted on the chain itself: the payee's balance, the Transfer and AuthorizationUsed
logs; a replayed 402 never moves the money twice; a changed price pays nothing; a payment
above the auto tier waits for a person."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from typing import Any

import pytest

from fiduciary import Policy, Redactor
from fiduciary.agent import Agent
from fiduciary.chain.api_payments import ChainApiPayer, authorization_nonce
from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.wallet import ChainWallet
from fiduciary.events import PendingAction, ToolCallEnd
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ToolCalls, collect
from fiduciary.wallet.machine_payments import pay_api_capabilities
from tests.agent_support import make_agent

from .conftest import ChainSetup
from .onchain import authorizations_used, token_balance, transfers
from .x402_api import NETWORK, PaidApi, serving

pytestmark = pytest.mark.slow


@pytest.fixture
def api(chain: ChainSetup) -> Iterator[PaidApi]:
    with serving(chain.url, chain.config.token) as running:
        yield running


@pytest.fixture
async def wallet(chain: ChainSetup) -> AsyncIterator[ChainWallet]:
    opened = await ChainWallet.connect(chain.config, chain.signer(), SQLiteIntentBook(chain.db))
    try:
        yield opened
    finally:
        await opened.close()


def buyer(wallet: ChainWallet, store: SQLiteStore, *steps: Any) -> Agent:
    return make_agent(
        None,
        store,
        None,
        Script("go", [*steps, Reply("done")]),
        capabilities=pay_api_capabilities(ChainApiPayer(wallet)),
        policy=Policy(preset="balanced"),  # pay: auto below $5, a person up to $50
        redactor=Redactor(known_secrets=wallet.signer.secrets()),
    )


def pay_call(api: PaidApi, amount: str) -> ToolCalls:
    args = {"url": api.url + "/forecast", "asset": "USDC", "amount": amount, "pay_to": api.pay_to}
    return ToolCalls([Call("pay_api", args)])


def answer_of(events: list[Any]) -> tuple[ToolCallEnd, Any]:
    (end,) = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "pay_api"]
    return end, json.JSONDecoder().raw_decode(end.output)[0]


async def test_the_agent_prices_pays_and_the_chain_moves_the_price_once(
    chain: ChainSetup, api: PaidApi, wallet: ChainWallet
) -> None:
    owner = wallet.address
    store = await SQLiteStore.open(chain.db)
    try:
        agent = buyer(
            wallet,
            store,
            ToolCalls([Call("api_price", {"url": api.url + "/forecast"})]),
            pay_call(api, "2"),
        )
        events = await collect(agent.run("go", principal="alice"))
    finally:
        await store.close()
    price = next(e for e in events if isinstance(e, ToolCallEnd) and e.name == "api_price")
    (offer,) = json.loads(price.output)["accepts"]
    assert (offer["network"], offer["asset"].lower()) == (NETWORK, chain.config.token.lower())
    assert (offer["amount"], offer["symbol"], offer["pay_to"]) == ("2.000000", "USDC", api.pay_to)

    end, answer = answer_of(events)
    assert not end.is_error, end.output
    assert answer["status"] == 200
    assert json.loads(answer["body"]) == {"forecast": "sunny"}
    paid = answer["paid"]
    assert (paid["network"], paid["payer"], paid["pay_to"]) == (NETWORK, owner, api.pay_to)
    assert Decimal(paid["amount"]) == 2
    assert paid["replayed"] is False
    settled = answer["settlement"]
    assert settled["success"] is True
    # on chain: the payee holds the price, one Transfer and one AuthorizationUsed, this nonce
    assert token_balance(chain.url, chain.config.token, api.pay_to) == Decimal(2)
    (moved,) = transfers(chain.url, chain.config.token, owner)[-1:]
    assert moved["transactionHash"] == settled["transaction"]
    assert len(transfers(chain.url, chain.config.token, owner, to=api.pay_to)) == 1
    (used,) = authorizations_used(chain.url, chain.config.token, owner)
    assert used["topics"][2] == paid["nonce"]
    assert api.served == 1
    shown = "".join(e.model_dump_json() for e in events)
    assert all(secret not in shown for secret in wallet.signer.secrets())


async def test_a_402_replayed_after_the_payment_settled_never_moves_money_twice(
    chain: ChainSetup, api: PaidApi, wallet: ChainWallet
) -> None:
    api.lose_answers = 1  # it settles the payment, then answers 402 again
    owner = wallet.address
    answers = []
    store = await SQLiteStore.open(chain.db)
    try:
        for _ in range(2):  # two runs, two calls, one request (a retry guard stops one run's)
            agent = buyer(wallet, store, pay_call(api, "2"))
            end, answer = answer_of(await collect(agent.run("go", principal="alice")))
            assert not end.is_error, end.output
            answers.append(answer)
    finally:
        await store.close()
    first, second = answers
    assert first["status"] == 402  # the answer was lost; the money moved
    assert first["paid"]["replayed"] is False
    # the second call, the same request: the nonce is used on chain, nothing new is signed
    assert second["status"] == 402
    assert second["paid"]["replayed"] is True
    assert second["paid"]["nonce"] == first["paid"]["nonce"]
    assert "already paid for this request" in second["note"]
    assert "nothing more was signed or paid" in second["note"]
    (moved,) = transfers(chain.url, chain.config.token, owner, to=api.pay_to)
    assert second["paid"]["transaction"] == moved["transactionHash"]
    assert len(authorizations_used(chain.url, chain.config.token, owner)) == 1
    assert token_balance(chain.url, chain.config.token, api.pay_to) == Decimal(2)
    assert api.payments_seen == 1


async def test_a_price_other_than_the_approved_one_signs_nothing(
    chain: ChainSetup, api: PaidApi, wallet: ChainWallet
) -> None:
    api.price_units = 3_000_000  # it asks 3 now; the call says 2
    store = await SQLiteStore.open(chain.db)
    try:
        events = await collect(buyer(wallet, store, pay_call(api, "2")).run("go", principal="al"))
    finally:
        await store.close()
    (end,) = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "pay_api"]
    assert (end.is_error, end.error_code) == (True, "price_changed")
    assert "nothing was paid" in end.output
    assert transfers(chain.url, chain.config.token, wallet.address, to=api.pay_to) == []
    assert authorizations_used(chain.url, chain.config.token, wallet.address) == []
    assert api.payments_seen == 0


async def test_a_payment_above_the_auto_tier_waits_for_a_person_and_then_pays_once(
    chain: ChainSetup, api: PaidApi, wallet: ChainWallet
) -> None:
    api.price_units = 20_000_000  # 20 USDC: the balanced preset asks a person
    store = await SQLiteStore.open(chain.db)
    try:
        agent = buyer(wallet, store, pay_call(api, "20"))
        events = await collect(agent.run("go", principal="alice"))
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        assert pending.tier == "confirm"
        assert pending.amount_usd == Decimal("20.00")
        shown = pending.description
        assert shown.startswith(f"Pay 20 USDC to {api.pay_to} for GET {api.url}/forecast")
        assert f"on {NETWORK}, token {ChainApiPayer(wallet).contract}" in shown
        assert api.payments_seen == 0  # nothing signed, nothing sent before the approval
        assert authorizations_used(chain.url, chain.config.token, wallet.address) == []

        await agent.approve(pending.approval_id, by="alice", confirm_amount=pending.amount_usd)
        end, answer = answer_of(await collect(agent.resume(events[0].run_id)))
    finally:
        await store.close()
    assert not end.is_error, end.output
    assert answer["status"] == 200
    assert token_balance(chain.url, chain.config.token, api.pay_to) == Decimal(20)
    assert len(transfers(chain.url, chain.config.token, wallet.address, to=api.pay_to)) == 1


async def test_the_nonce_is_the_ledger_key_s_and_an_approval_binds_the_network(
    chain: ChainSetup, api: PaidApi, wallet: ChainWallet
) -> None:
    """The nonce is a function of the request's key; a call bound to another network or token
    (approved on another deployment) is refused before anything is signed."""
    assert authorization_nonce("x402:a") == authorization_nonce("x402:a")
    assert authorization_nonce("x402:a") != authorization_nonce("x402:b")
    assert len(bytes.fromhex(authorization_nonce("x402:a")[2:])) == 32
    store = await SQLiteStore.open(chain.db)
    try:
        args = {"url": api.url + "/forecast", "asset": "USDC", "amount": "2",
                "pay_to": api.pay_to, "network": "eip155:8453"}  # fmt: skip
        agent = buyer(wallet, store, ToolCalls([Call("pay_api", args)]))
        end, _ = answer_of(await collect(agent.run("go", principal="alice")))
    finally:
        await store.close()
    assert (end.is_error, end.error_code) == (True, "not_this_chain")
    assert api.payments_seen == 0
    assert authorizations_used(chain.url, chain.config.token, wallet.address) == []


async def test_an_api_that_asks_to_be_paid_to_the_token_itself_is_refused_before_signing(
    chain: ChainSetup, api: PaidApi, wallet: ChainWallet
) -> None:
    api.pay_to = chain.config.token  # tokens sent to the token's own contract are lost
    store = await SQLiteStore.open(chain.db)
    try:
        agent = buyer(wallet, store, pay_call(api, "2"))
        end, _ = answer_of(await collect(agent.run("go", principal="alice")))
    finally:
        await store.close()
    assert (end.is_error, end.error_code) == (True, "token_contract_recipient")
    assert api.payments_seen == 0
    assert authorizations_used(chain.url, chain.config.token, wallet.address) == []

"""Sends the person signs on their device (the server never holds the key), over the HTTP API
with a real anvil: the client reports a transaction hash; the server reads the transaction back
from the chain and accepts it only if chain id, sender, contract, calldata and value are the
approved call's and it succeeded. Every other report is refused (422 ``result_refused``),
recorded as the call's outcome, and the run is told."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID

import httpx
import pytest
from eth_account import Account
from eth_utils.address import to_checksum_address

from fiduciary import Agent, Policy, Threshold
from fiduciary.chain.client_signed import client_signed_capabilities, connect_watching
from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.keys import Signer
from fiduciary.events import ToolCallEnd, decode_event, parse_sse
from fiduciary.server import MemoryKeyStore, RateLimit, Server, create_app
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all

from .anvil import mined_receipt, rpc
from .conftest import FUNDING_WEI, ChainSetup
from .onchain import token_balance, transfers

pytestmark = pytest.mark.slow

CASES = ("match", "recipient", "nothing", "sender", "replayed", "reverted")
BOB = to_checksum_address("0x" + "b0" * 20)


@dataclass
class Api:
    client: httpx.AsyncClient
    server: Server
    key: str

    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"}

    async def card(self, case: str) -> dict[str, Any]:
        """Start the run of ``case``; its card once it waits for the device."""
        started = await self.client.post("/runs", json={"message": case}, headers=self.auth())
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        await self.server.drives.wait_idle()
        listed = await self.client.get(f"/approvals?run_id={run_id}", headers=self.auth())
        (card,) = listed.json()["approvals"]
        assert card["executor"] == "client"
        return dict(card)

    async def report(self, card: dict[str, Any], tx_hash: str) -> httpx.Response:
        response = await self.client.post(
            f"/approvals/{card['approval_id']}/result",
            json={"result": {"tx_hash": tx_hash}},
            headers=self.auth(),
        )
        await self.server.drives.wait_idle()
        return response

    async def told(self, card: dict[str, Any]) -> ToolCallEnd:
        """What the run was told: the send's tool result."""
        run_id = UUID(card["run_id"])
        got = await self.client.get(f"/runs/{run_id}/events?follow=false", headers=self.auth())
        events = [decode_event(m.data) for m in parse_sse(got.text) if m.id is not None]
        (end,) = [e for e in events if isinstance(e, ToolCallEnd)]
        run = (await self.client.get(f"/runs/{run_id}", headers=self.auth())).json()
        assert run["status"] == "completed"  # told, and the run went on
        return end


@pytest.fixture
async def api(chain: ChainSetup) -> AsyncIterator[Api]:
    person = chain.signer().address  # the server knows the address, never the key
    wallet = await connect_watching(chain.config, person, SQLiteIntentBook(chain.db))
    store = await SQLiteStore.open(chain.db)
    send = {"to": BOB, "asset": "USDC", "amount": "10"}
    scripts = [Script(c, [ToolCalls([Call("send_transfer", send)]), Reply("noted")]) for c in CASES]
    agent = Agent(
        model=ScriptedModel(scripts),
        capabilities=client_signed_capabilities(wallet),
        store=store,
        policy=Policy(
            thresholds={"send": Threshold(auto_below=Decimal(0), confirm_below=Decimal(1000))}
        ),
        authorize=allow_all,
    )
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
    app = create_app(agent, keys=keys, rate_limit=RateLimit(1000, 60))
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield Api(client, app.state.server, key)
    finally:
        await app.state.server.close()
        await store.close()
        await wallet.close()


def device_sends(url: str, signer: Signer | Any, tx: dict[str, Any], *, gas: int = 100_000) -> str:
    """The person's device: signs ``tx`` with its own key, broadcasts it; the hash."""
    nonce = int(rpc(url, "eth_getTransactionCount", signer.address, "pending"), 16)
    base = int(rpc(url, "eth_getBlockByNumber", "latest", False)["baseFeePerGas"], 16)
    full = {
        **tx,
        "chainId": 31337,
        "nonce": nonce,
        "gas": gas,
        "maxFeePerGas": 2 * base + 10**9,
        "maxPriorityFeePerGas": 10**9,
        "type": 2,
    }
    if isinstance(signer, Signer):
        raw = signer.sign(full).raw
    else:
        raw = bytes(signer.sign_transaction(full).raw_transaction)
    tx_hash: str = rpc(url, "eth_sendRawTransaction", "0x" + raw.hex())
    return tx_hash


def transfer_data(to: str, units: int) -> str:
    return "0xa9059cbb" + to.lower()[2:].rjust(64, "0") + hex(units)[2:].rjust(64, "0")


async def test_a_reported_hash_is_accepted_only_when_the_chain_shows_the_approved_send(
    chain: ChainSetup, api: Api
) -> None:
    url, token, person = chain.url, chain.config.token, chain.signer()
    approved = {"to": token, "data": transfer_data(BOB, 10_000_000), "value": 0}

    # the device signs exactly the approved send: accepted, with its block
    card = await api.card("match")
    assert card["args"]["sender"] == person.address
    assert card["args"]["chain_id"] == 31337
    assert "Sign on your device: send 10 USDC" in card["description"]
    assert "simulated: succeeds" in card["description"]
    good = device_sends(url, person, approved)
    # a server that died after recording the hash as this approval's, before deciding it: the
    # device reports the same hash again, and it is accepted (the row is this approval's)
    block = int(mined_receipt(url, good)["blockNumber"], 16)
    nonce = int(rpc(url, "eth_getTransactionByHash", good)["nonce"], 16)
    assert await SQLiteIntentBook(chain.db).claim(
        f"client:{card['approval_id']}",
        chain_id=31337,
        sender=person.address,
        nonce=nonce,
        tx_hash=good,
        block=block,
    )
    response = await api.report(card, good)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "client_result"
    end = await api.told(card)
    assert not end.is_error
    receipt = json.loads(end.output.split("\n\n")[0])
    assert receipt["tx_hash"] == good
    assert receipt["block"] >= 1
    assert receipt["status"] == "confirmed"
    assert token_balance(url, token, BOB) == Decimal(10)

    async def refused(case: str, tx_hash: str, why: str) -> None:
        card = await api.card(case)
        response = await api.report(card, tx_hash)
        assert response.status_code == 422, response.text
        body = response.json()
        assert body["code"] == "result_refused"
        assert why in body["detail"], body
        end = await api.told(card)  # recorded as the call's outcome, the run told
        told = json.loads(end.output.split("\n\n")[0])
        assert told["status"] == "refused"
        assert why in told["reason"]
        again = await api.report(card, good)  # decided: a second report changes nothing
        assert again.status_code == 409

    # the device sent 10 USDC to someone else: on chain, but not the approved call
    carol = to_checksum_address("0x" + "ca" * 20)
    wrong = device_sends(url, person, {**approved, "data": transfer_data(carol, 10_000_000)})
    await refused("recipient", wrong, "the calldata is 0xa9059cbb")
    # a hash no node knows
    await refused("nothing", "0x" + secrets.token_hex(32), "no such transaction on chain 31337")
    # the approved calldata, signed by another account
    other = Account.from_key(secrets.token_bytes(32))
    rpc(url, "anvil_setBalance", other.address, hex(FUNDING_WEI))
    stranger = device_sends(url, other, approved)
    await refused("sender", stranger, f"the sender is {other.address}")
    # the accepted hash reported again for another, identical approval
    await refused("replayed", good, "it was already reported for another call")
    # the approved call, mined but reverted (the device moved the funds away first)
    held = int(token_balance(url, token, person.address).scaleb(6))
    device_sends(url, person, {**approved, "data": transfer_data(carol, held)})
    reverted = device_sends(url, person, approved)
    await refused("reverted", reverted, "it reverted in block")

    # counted on chain: the one accepted send is bob's only money; the intent table holds it
    assert token_balance(url, token, BOB) == Decimal(10)
    book = await SQLiteIntentBook(chain.db).by_sender(31337, person.address)
    assert [(i.tx_hash, i.status) for i in book] == [(good, "mined")]
    assert len(transfers(url, token, person.address)) == 3  # good, carol's 10, the sweep

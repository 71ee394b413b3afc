"""The chain's recipient guard refuses before a person is asked: a malformed address, a failed
EIP-55 checksum, the zero address or the token's own contract never reach an approval card
(nor the signer: the wallet checks them again)."""

from __future__ import annotations

import secrets
from decimal import Decimal

import pytest
from eth_account import Account
from web3 import AsyncHTTPProvider, AsyncWeb3

from fiduciary import Agent, Policy, Threshold
from fiduciary.chain.capabilities import chain_capabilities
from fiduciary.chain.config import ChainConfig
from fiduciary.chain.guards import chain_guards
from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.keys import Signer
from fiduciary.chain.wallet import ChainWallet
from fiduciary.events import PendingAction, ToolCallRejected
from fiduciary.stores.memory import MemoryStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
GOOD = "0x52908400098527886E0F7030069857D2E4169EE7"  # EIP-55's own example


@pytest.mark.parametrize(
    ("to", "says"),
    [
        (TOKEN, "is the USDC contract itself: tokens sent there are lost"),
        ("0x" + "0" * 40, "sending to the zero address destroys the funds"),
        (GOOD.replace("E7", "e7"), "fails its EIP-55 checksum"),
        ("0x1234", "must be a 0x address of 40 hex digits"),
    ],
)
async def test_a_bad_recipient_is_refused_before_any_approval_card(to: str, says: str) -> None:
    config = ChainConfig(rpc_url="http://127.0.0.1:9", chain_id=31337, token=TOKEN)
    # never contacted: the guard refuses before the handler
    w3 = AsyncWeb3(AsyncHTTPProvider(config.rpc_url))
    signer = Signer(Account.from_key(secrets.token_bytes(32)))
    wallet = ChainWallet(w3, config, signer, SQLiteIntentBook(":memory:"))
    script = Script(
        "pay",
        [
            ToolCalls([Call("send_transfer", {"to": to, "asset": "USDC", "amount": "500"})]),
            Reply("refused"),
        ],
    )
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=chain_capabilities(wallet),
        guards=chain_guards(config),
        store=MemoryStore(),
        policy=Policy(
            thresholds={"send": Threshold(auto_below=Decimal(50), confirm_below=Decimal(1000))}
        ),
        authorize=allow_all,
    )
    events = await collect(agent.run("pay", principal="alice"))
    assert [e for e in events if isinstance(e, PendingAction)] == []  # no person was asked
    (rejected,) = [e for e in events if isinstance(e, ToolCallRejected)]
    assert rejected.reason == "guard_blocked"
    assert says in rejected.message


def test_a_good_address_passes_checksummed() -> None:
    from fiduciary.chain.addresses import checked_recipient

    assert checked_recipient(GOOD.lower(), token=TOKEN) == GOOD

"""Money is not sent to a name a person cannot read as it is: a recipient or a contact holding an
invisible, direction-changing or mixed-script character is a validation error for the model,
before any card is shown and before anything is posted."""

from __future__ import annotations

import re

import pytest

from fiduciary.events import PendingAction, ToolCallRejected
from fiduciary.testing import Call, MemoryStore, Reply, Script, ScriptedModel, ToolCalls, collect
from fiduciary.wallet import PaperWallet, build_wallet_agent
from fiduciary.wallet.addresses import address_of, plain_recipient

from .conftest import tx_count

HIDDEN = [
    ("alice\u202eecila-evil\u202c", "direction-changing"),
    ("al\u200bice", "invisible character U+200B"),
    ("\u0430lice", "mixes Cyrillic and Latin letters"),
    ("bob\n", "control character"),
]


@pytest.mark.parametrize(("name", "why"), HIDDEN)
def test_plain_recipient_refuses_what_a_person_cannot_see(name: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        plain_recipient(name)
    assert plain_recipient("Alice O'Neil") == "Alice O'Neil"
    assert plain_recipient(address_of("bob")) == address_of("bob")


@pytest.mark.parametrize(("name", "why"), HIDDEN)
async def test_send_and_save_contact_refuse_hidden_characters(
    wallet: PaperWallet, name: str, why: str
) -> None:
    wallet.open("ann")
    before = tx_count(wallet)
    calls = [
        Call("send_transfer", {"to": name, "asset": "USDC", "amount": "5"}),
        Call("save_contact", {"name": name, "address": address_of("bob")}),
        Call("save_contact", {"name": "bob", "address": address_of("bob") + "\u200b"}),
    ]
    script = Script("go", [*(ToolCalls([c]) for c in calls), Reply("done")])
    agent = build_wallet_agent(MemoryStore(), wallet, model=ScriptedModel([script]))
    events = await collect(agent.run("go", principal="ann"))
    rejected = [e for e in events if isinstance(e, ToolCallRejected)]
    assert [e.name for e in rejected] == ["send_transfer", "save_contact", "save_contact"]
    assert all(e.reason == "invalid_input" for e in rejected)
    assert why in rejected[0].message
    assert "type it again" in rejected[0].message
    assert not [e for e in events if e.type == "pending_action"]
    assert tx_count(wallet) == before
    assert wallet.contacts("ann") == []


async def test_an_amount_in_exponent_notation_is_written_in_full(wallet: PaperWallet) -> None:
    wallet.open("ann")
    to = address_of("bob")
    calls = [
        Call("balance_check"),
        Call("send_transfer", {"to": to, "asset": "USDC", "amount": "1E+999"}),
        Call("send_transfer", {"to": to, "asset": "USDC", "amount": "1.5E+2"}),
    ]
    script = Script("go", [*(ToolCalls([c]) for c in calls), Reply("done")])
    agent = build_wallet_agent(MemoryStore(), wallet, model=ScriptedModel([script]))
    events = await collect(agent.run(f"go pay {to}", principal="ann"))
    rejected = [e for e in events if isinstance(e, ToolCallRejected)]
    assert [e.reason for e in rejected] == ["invalid_input"]
    assert "at most 30 digits" in rejected[0].message
    (card,) = [e for e in events if isinstance(e, PendingAction)]
    assert card.input["amount"] == "150"
    assert card.description.startswith("Send 150 USDC")
    assert card.amount_usd is not None
    assert "E" not in str(card.amount_usd)

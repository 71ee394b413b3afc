"""Signed webhook messages reach the same inbox: the same rate limit as Telegram's messages."""

from __future__ import annotations

import json

import httpx
from starlette.applications import Starlette

from fiduciary import ManualClock, Principal
from fiduciary.channels import AgentChat, Inbox
from fiduciary.channels.webhook import SignedMessages
from fiduciary.signing import InboundChannel, SignatureVerifier, sign
from fiduciary.stores.memory import MemoryStore

from . import chat_agent

SECRET = "a-webhook-secret-of-32-characters"


def _signed(clock: ManualClock, text: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"text": text}).encode()
    ts = int(clock.now().timestamp())
    return body, {
        "content-type": "application/json",
        "x-fiduciary-timestamp": str(ts),
        "x-fiduciary-signature": sign(SECRET, ts, body),
    }


async def test_signed_messages_share_the_inbox_and_its_limit() -> None:
    clock = ManualClock()
    agent = chat_agent.factory(MemoryStore())
    inbox = Inbox(clock=clock)
    chat = AgentChat(agent)
    inbox.add("chat", chat, per="principal")
    messages = SignedMessages(
        inbox,
        channels=[InboundChannel("ops", SECRET, "alice")],
        target="chat",
        verifier=SignatureVerifier(clock=clock),
    )
    app = Starlette(routes=[messages.route()])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        body, headers = _signed(clock, "from the webhook")
        ok = await client.post("/adapters/webhook/ops", content=body, headers=headers)
        assert ok.status_code == 200
        assert ok.json() == {"reply": "you said: from the webhook", "pending": []}

        replayed = await client.post("/adapters/webhook/ops", content=body, headers=headers)
        assert replayed.status_code == 401
        assert replayed.json()["type"] == "replayed"
        headers["x-fiduciary-signature"] = "v1=" + "0" * 64
        forged = await client.post(
            "/adapters/webhook/ops", content=b'{"text":"x"}', headers=headers
        )
        assert forged.json()["type"] == "invalid_signature"
        unknown = await client.post("/adapters/webhook/nope", content=body, headers=headers)
        assert unknown.status_code == 404

        for i in range(9):  # the other channels fill alice's chat's limit
            await inbox.deliver("chat", principal="alice", text=f"t{i}", channel="telegram")
        clock.advance(1)
        body, headers = _signed(clock, "one too many")
        limited = await client.post("/adapters/webhook/ops", content=body, headers=headers)
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "59"

    events = await agent.store.read_events(chat.run_id(Principal("alice")))
    assert sum(1 for e in events if e.type == "user_message") == 10

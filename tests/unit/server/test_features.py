"""What a server mounts beside its API: the apps (behind its API keys, ticking in the
background), one inbox for the console and signed webhooks, and the attention feed."""

from __future__ import annotations

import json

import pytest

from fiduciary import ManualClock
from fiduciary.apps import AppEngine
from fiduciary.attention.actions import RouteAction
from fiduciary.attention.record import AttentionRecord
from fiduciary.attention.sources import Webhooks
from fiduciary.attention.testing import RuleJudge
from fiduciary.attention.watch import Attention
from fiduciary.server import InboundChannel, Server
from fiduciary.server.features import AttentionFeature, Features
from fiduciary.stores.base import Store
from tests.waiting import eventually

from ..apps.support import Book, Hooks, engine
from .conftest import AppFactory, Keys, bearer, client_for, problem, settle
from .sse_client import blocks
from .test_webhooks import CHAT, SECRET, signed

pytestmark = pytest.mark.timeout(30)

DESK = """---
id: desk
hooks: [message, tick]
tier: sniper
autoStart: true
capabilities: [balance]
sources: [n]
---
Answer questions.
"""
DESK_HOOK = InboundChannel("desk-hook", SECRET, "alice")


async def three(record: AttentionRecord) -> bool:
    return len(await record.decisions()) >= 3


def desk(store: Store, clock: ManualClock, hooks: Hooks) -> AppEngine:
    hooks.on("desk", "message", lambda ctx: {"reply": f"you said {ctx['message']}"})
    hooks.on("desk", "tick", lambda ctx: {"reply": "ticked"})
    counter = [0]

    async def n() -> int:
        counter[0] += 1
        return counter[0]

    return engine(DESK, book=Book(), hooks=hooks, clock=clock, store=store, sources={"n": n})


async def test_the_apps_are_served_behind_the_api_keys(
    make_app: AppFactory, keys: Keys, store: Store, clock: ManualClock
) -> None:
    eng = desk(store, clock, Hooks())
    app = make_app(features=Features(apps=eng))
    async with client_for(app) as client:
        assert (await client.get("/apps/")).status_code == 401
        assert (await client.get("/apps/", headers=bearer("fid_nope"))).status_code == 401
        assert (await client.get("/apps/", headers=bearer(keys.bob))).status_code == 403
        enabled = await client.post("/apps/desk/enable", headers=bearer(keys.alice))
        assert enabled.json() == {"enabled": True, "waiting": False}
        [listed] = (await client.get("/apps/", headers=bearer(keys.admin))).json()
        assert (listed["id"], listed["enabled"]) == ("desk", True)
        said = await client.post(
            "/apps/desk/messages", json={"text": "hi"}, headers=bearer(keys.alice)
        )
        assert said.json()["reply"] == "you said hi"


async def test_console_and_webhook_messages_share_one_inbox_and_its_limit(
    make_app: AppFactory, keys: Keys, store: Store, clock: ManualClock
) -> None:
    hooks = Hooks()
    eng = desk(store, clock, hooks)
    await eng.enable("desk")
    features = Features(apps=eng, hook_targets={"desk-hook": "desk"})
    app = make_app(channels=[CHAT, DESK_HOOK], features=features)
    async with client_for(app) as client:
        for i in range(5):
            said = await client.post(
                "/apps/desk/messages", json={"text": f"c{i}"}, headers=bearer(keys.alice)
            )
            assert said.status_code == 200, said.text
        for i in range(5):
            body = json.dumps({"text": f"w{i}"}).encode()
            hooked = await client.post(
                "/hooks/desk-hook", content=body, headers=signed(body, clock)
            )
            assert hooked.status_code == 200, hooked.text
            assert hooked.json() == {"reply": f"you said w{i}", "pending": []}
        body = json.dumps({"text": "one too many"}).encode()
        refused = await client.post("/hooks/desk-hook", content=body, headers=signed(body, clock))
        problem(refused, 429, "rate_limited")
        assert refused.headers["retry-after"] == "60"
        console = await client.post(
            "/apps/desk/messages", json={"text": "again"}, headers=bearer(keys.alice)
        )
        assert console.status_code == 429
        assert hooks.calls[("desk", "message")] == 10
        # a channel without a target keeps the API's behaviour: a run
        body = json.dumps({"text": "hello from chat"}).encode()
        started = await client.post("/hooks/chat", content=body, headers=signed(body, clock))
        assert started.status_code == 202, started.text
        assert "run_id" in started.json()
        await settle(app.state.server)
        # a forged delivery to the inbox's channel is refused before anything reaches the app
        forged = await client.post(
            "/hooks/desk-hook", content=b'{"text": "x"}', headers=signed(b"{}", clock)
        )
        problem(forged, 401, "invalid_signature")


async def test_the_engine_ticks_in_the_background_until_stopped(
    store: Store, clock: ManualClock
) -> None:
    hooks = Hooks()
    eng = desk(store, clock, hooks)
    features = Features(apps=eng, tick_seconds=0.01)
    await features.start()
    try:
        # autoStart enabled it, and its first slot ran
        # the state is in tables with no event to wait on: yield to the loop between looks
        await eventually(
            lambda: eng.tables.ticks("desk", status="done", limit=1), what="a tick", interval=0
        )
        assert (await eng.record("desk")).enabled
    finally:
        await features.stop()
    assert [t.outcome for t in await eng.tables.ticks("desk", limit=10)] == ["ran"]
    assert hooks.calls[("desk", "tick")] == 1


def test_a_hook_target_must_be_an_app(store: Store, clock: ManualClock) -> None:
    with pytest.raises(ValueError, match="no target 'nope'"):
        Features(apps=desk(store, clock, Hooks()), hook_targets={"chat": "nope"})


async def test_the_decision_feed_and_attention_webhooks_over_http(
    make_app: AppFactory, keys: Keys, clock: ManualClock
) -> None:
    record = AttentionRecord()
    source = Webhooks(clock=clock)
    watcher = Attention(
        judge=RuleJudge(lambda judge_input: "notify"),
        record=record,
        routes={"notify": RouteAction(do="notify"), "drop": RouteAction(do="drop")},
        sources=[source],
        clock=clock,
    )
    feature = AttentionFeature(record, watcher, source, channels=[CHAT])
    features = Features(attention=feature)
    features.closers.append(record.close)
    app = make_app(features=features)
    server: Server = app.state.server
    assert server is not None
    await features.start()
    try:
        async with client_for(app) as client:
            for i in (1, 2, 3):
                body = json.dumps({"type": "payment_received", "n": i}).encode()
                headers = {**signed(body, clock), "webhook-id": f"d{i}"}
                taken = await client.post("/attention/hooks/chat", content=body, headers=headers)
                assert taken.status_code == 202, taken.text
            await eventually(lambda: three(record), what="three decisions", interval=0)
            refused = await client.get("/attention/decisions")
            problem(refused, 401, "unauthenticated")
            headers = {**bearer(keys.alice), "Last-Event-ID": "1"}
            async with client.stream("GET", "/attention/decisions", headers=headers) as response:
                assert response.status_code == 200
                seen = []
                async for block in blocks(response):
                    assert block.message is not None
                    seen.append(block.message)
                    if len(seen) == 2:
                        break
            assert [(m.id, m.event) for m in seen] == [
                ("2", "attention.decision"),
                ("3", "attention.decision"),
            ]
            second = json.loads(seen[0].data)
            assert (second["event_id"], second["action"]) == ("chat:d2", "notified")
            # a redelivery (the same webhook-id) is judged once
            body = json.dumps({"type": "payment_received", "n": 2}).encode()
            headers = {**signed(body, clock, skew=1), "webhook-id": "d2"}
            again = await client.post("/attention/hooks/chat", content=body, headers=headers)
            assert again.status_code == 202
            assert len(await record.decisions()) == 3
    finally:
        await features.stop()

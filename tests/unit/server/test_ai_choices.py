"""The default model's choices, over each key store: kept beside the keys (SQLite, PostgreSQL)
and read back by a new server, or kept in memory only; a refused choice writes nothing; a run
keeps the agent of the model it started with."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from fiduciary import ManualClock
from fiduciary.server import MemoryKeyStore, PostgresKeyStore, SQLiteKeyStore
from fiduciary.server.ai import ModelChoice
from fiduciary.server.app import create_app
from fiduciary.server.auth import KeyStore
from fiduciary.testing import MemoryStore, Reply, Script, ScriptedModel, collect
from tests.agent_support import make_agent
from tests.postgres_support import create_database

pytestmark = pytest.mark.timeout(60)

CHOSEN = "openai-compatible:qwen2.5:7b@http://127.0.0.1:9/v1"
HELLO = Script("hello", [Reply("hi")])


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def reopen(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> AsyncIterator[Callable[[], KeyStore]]:
    """Opens the same key store again, as a restarted server would (memory: a new one)."""
    dsn = create_database() if request.param == "postgres" else ""
    opened: list[KeyStore] = []

    def open_keys() -> KeyStore:
        keys: KeyStore
        if request.param == "memory":
            keys = MemoryKeyStore(clock=clock)
        elif request.param == "sqlite":
            keys = SQLiteKeyStore(tmp_path / "keys.sqlite3", clock=clock)
        else:
            keys = PostgresKeyStore(dsn, clock=clock)
        opened.append(keys)
        return keys

    try:
        yield open_keys
    finally:
        for keys in opened:
            await keys.aclose()


async def test_a_choice_is_kept_beside_the_keys(
    reopen: Callable[[], KeyStore], clock: ManualClock
) -> None:
    store = MemoryStore()
    agent = make_agent(store=store, clock=clock, model=ScriptedModel([HELLO]))
    keys = reopen()
    first = ModelChoice(agent, keys, env={})
    with pytest.raises(ValueError, match="unknown provider 'nope'"):
        await first.change("nope:x", by="root")
    with pytest.raises(ValueError, match="no API key: set OPENAI_API_KEY"):
        await first.change("openai:gpt-5.1", by="root")
    assert (await first.status()).changes == []  # refusals wrote nothing

    change = await first.change(CHOSEN, by="root")
    assert (change.by, change.from_model, change.to_model) == ("root", "scripted", CHOSEN)
    assert (await first.for_new()).model.name == CHOSEN
    status = await first.status()
    assert status.persisted is not isinstance(keys, MemoryKeyStore)

    again = ModelChoice(agent, keys if isinstance(keys, MemoryKeyStore) else reopen(), env={})
    restarted = await again.status()
    if isinstance(keys, MemoryKeyStore):  # in memory: a new server starts from its own model
        assert (restarted.default, restarted.changes) == ("scripted", [])
    else:
        assert restarted.default == CHOSEN
        assert [(c.by, c.to_model) for c in restarted.changes] == [("root", CHOSEN)]


async def test_a_run_started_before_keeps_its_agent(clock: ManualClock) -> None:
    store = MemoryStore()
    agent = make_agent(store=store, clock=clock, model=ScriptedModel([HELLO]))
    choice = ModelChoice(agent, MemoryKeyStore(clock=clock), env={})
    events = await collect((await choice.for_new()).run("hello", principal="alice"))
    run_id = events[0].run_id
    await choice.change(CHOSEN, by="root")
    assert await choice.for_run(run_id) is agent
    assert (await choice.for_new()).model.name == CHOSEN


async def test_only_an_admin_changes_it_and_the_answer_holds_no_key(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-ant-test-0123456789abcdefghij"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    keys = MemoryKeyStore(clock=clock)
    admin, _ = await keys.create("root", ["admin"])
    alice, _ = await keys.create("alice", ["runs:read", "runs:write"])
    app = create_app(make_agent(clock=clock), keys=keys, resume_on_start=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        status = await client.get("/ai/status", headers={"authorization": f"Bearer {alice}"})
        body = {"provider": "anthropic"}
        refused = await client.put(
            "/ai/default", json=body, headers={"authorization": f"Bearer {alice}"}
        )
        changed = await client.put(
            "/ai/default", json=body, headers={"authorization": f"Bearer {admin}"}
        )
    assert status.status_code == 200
    anthropic = {p["name"]: p for p in status.json()["providers"]}["anthropic"]
    assert (anthropic["key_present"], anthropic["problem"]) == (True, None)
    assert status.json()["persisted"] is False
    assert refused.status_code == 403
    assert changed.status_code == 200, changed.text
    assert changed.json()["default"] == "anthropic:claude-sonnet-4-6"
    assert secret not in status.text + refused.text + changed.text

"""Two server instances and a worker on one PostgreSQL, over the HTTP API (``drive=False``).

A client starts a run on server A and follows its events there; the worker drives it; the
payment is approved through server B; the stream on A goes on to the end without polling, and
a stream resumed on B with ``Last-Event-ID`` continues exactly where A's left off.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest

from fiduciary import Agent, Policy
from fiduciary.events import Event, PendingAction, RunCompleted, decode_event
from fiduciary.exceptions import ConfigurationError
from fiduciary.server import PostgresKeyStore, RateLimit, create_app
from fiduciary.server.served import wallet_agent
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls
from fiduciary.worker import run_worker
from tests.agent_support import make_agent
from tests.postgres_support import create_database, require_driver
from tests.waiting import eventually

from ..conftest import Effects
from .conftest import bearer, client_for
from .sse_client import blocks

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

require_driver()
from fiduciary.stores.postgres import PostgresStore  # noqa: E402

TIMEOUT = 20.0

SCRIPT = Script(
    "pay",
    [
        ToolCalls([Call("balance")]),
        ToolCalls(
            [Call("send", lambda r: {"to": r.user_messages[0].split()[-1], "amount": "500"})]
        ),
        Reply("paid"),
        Reply("anything else?"),
    ],
)


def leased_agent(store: Any, effects: Effects) -> Agent:
    return make_agent(
        effects,
        store,
        None,
        SCRIPT,
        policy=Policy(preset="balanced", daily_autonomous_limit_usd=None),
        lease_seconds=5.0,
    )


@dataclass
class Cluster:
    a: httpx.AsyncClient
    b: httpx.AsyncClient
    key: str
    worker: Agent
    effects: Effects
    tasks: list[asyncio.Task[Any]]
    server_models: list[ScriptedModel]
    worker_model: ScriptedModel


@pytest.fixture
async def cluster(postgres_dsn: str) -> AsyncIterator[Cluster]:
    dsn = postgres_dsn
    effects = Effects()
    stores = [await PostgresStore.open(dsn) for _ in range(3)]
    keys = [await PostgresKeyStore.open(dsn) for _ in range(2)]
    key, _ = await keys[0].create("alice", ["runs:write", "runs:read", "approvals:decide"])
    agents = [leased_agent(store, effects) for store in stores]
    apps = [
        create_app(
            agent,
            keys=ks,
            drive=False,
            rate_limit=RateLimit(1000, 60),
            heartbeat_seconds=30.0,
            poll_seconds=3600,  # live events can only come from LISTEN/NOTIFY
        )
        for agent, ks in zip(agents[:2], keys, strict=True)
    ]
    worker = agents[2]
    stop = asyncio.Event()
    working = asyncio.create_task(run_worker(worker, stop=stop, poll_interval=3600))
    try:
        async with client_for(apps[0]) as a, client_for(apps[1]) as b:
            models = [agent.model for agent in agents]
            assert all(isinstance(m, ScriptedModel) for m in models)
            made = Cluster(a, b, key, worker, effects, [], models[:2], models[2])  # type: ignore[arg-type]
            try:
                yield made
            finally:
                for task in made.tasks:
                    task.cancel()
                await asyncio.gather(*made.tasks, return_exceptions=True)
    finally:
        stop.set()
        async with asyncio.timeout(TIMEOUT):
            await working
        for app in apps:
            await app.state.server.close()
        for ks in keys:
            await ks.aclose()
        for store in stores:
            await store.close()


async def follow(client: httpx.AsyncClient, key: str, run_id: UUID, after: int = 0) -> list[Event]:
    """Events of a run from ``after`` to its ``run_completed``, approving through nobody."""
    seen: list[Event] = []
    url = f"/runs/{run_id}/events"
    headers = {**bearer(key), "last-event-id": str(after)}
    async with client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200
        async for block in blocks(response):
            if block.message is None or block.message.id is None:
                continue
            seen.append(decode_event(block.message.data))
            if isinstance(seen[-1], RunCompleted):
                return seen
    raise AssertionError("the stream ended before the run completed")


async def test_a_run_started_on_one_instance_is_driven_by_a_worker_and_approved_on_another(
    cluster: Cluster,
) -> None:
    a, b, key = cluster.a, cluster.b, cluster.key
    started = await a.post("/runs", json={"message": "pay carol"}, headers=bearer(key))
    assert started.status_code == 202, started.text
    run_id = UUID(started.json()["run_id"])
    assert started.json()["first_seq"] == 1
    following = asyncio.create_task(follow(a, key, run_id))
    cluster.tasks.append(following)

    pending: list[dict[str, Any]] = []

    async def listed() -> bool:  # a person looks at the queue on server B
        got = await b.get("/approvals?status=pending", headers=bearer(key))
        pending[:] = got.json()["approvals"]
        return bool(pending)

    await eventually(listed, what="the approval listed on server B", timeout=TIMEOUT)
    async with asyncio.timeout(TIMEOUT):
        (approval,) = pending
        assert approval["run_id"] == str(run_id)
        approved = await b.post(
            f"/approvals/{approval['approval_id']}/approve",
            json={"args_digest": approval["args_digest"], "confirm_amount": "500"},
            headers=bearer(key),
        )
        assert approved.status_code == 200, approved.text
        seen = await following

    stored = await cluster.worker.store.read_events(run_id)
    assert seen == stored  # followed live on A: nothing lost, repeated or reordered
    assert [p["to"] for p in cluster.effects.payments] == ["carol"]
    assert any(isinstance(e, PendingAction) for e in seen)
    run = (await b.get(f"/runs/{run_id}", headers=bearer(key))).json()
    assert (run["status"], run["last_seq"]) == ("completed", stored[-1].seq)

    # SSE resume across instances: a client that saw up to seq 4 on A goes on from B
    resumed = await follow(b, key, run_id, after=4)
    assert resumed == stored[4:]

    # a new message, posted to B, continues the run through the worker
    more = await b.post(f"/runs/{run_id}/messages", json={"message": "thanks"}, headers=bearer(key))
    assert more.status_code == 202, more.text
    first_seq = more.json()["first_seq"]
    assert first_seq == stored[-1].seq + 1
    async with asyncio.timeout(TIMEOUT):
        rest = await follow(a, key, run_id, after=first_seq - 1)
    assert rest[0].type == "user_message"
    assert rest == (await cluster.worker.store.read_events(run_id))[first_seq - 1 :]
    # the model was only ever asked by the worker: neither server drove anything
    assert [len(m.requests) for m in cluster.server_models] == [0, 0]
    assert len(cluster.worker_model.requests) == 4


async def test_not_driving_needs_a_store_that_hands_out_work(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "runs.sqlite3")
    try:
        with pytest.raises(ConfigurationError, match="workers"):
            create_app(leased_agent(store, Effects()), keys=PostgresKeyStore("unused"), drive=False)
    finally:
        await store.close()


async def test_not_driving_refuses_notifications_it_would_never_send() -> None:
    from fiduciary.server import Notifier, WebhookTarget

    store = PostgresStore("postgresql://unused")  # never opened
    notifier = Notifier([WebhookTarget("https://hooks.example.com/x", "0123456789abcdef")])
    try:
        with pytest.raises(ConfigurationError, match="drives"):
            create_app(
                leased_agent(store, Effects()),
                keys=PostgresKeyStore("unused"),
                drive=False,
                notifier=notifier,
            )
    finally:
        await notifier.close()


async def test_the_paper_wallet_is_not_served_from_postgres() -> None:
    store = PostgresStore("postgresql://unused")  # opens on first use: never here
    with pytest.raises(ConfigurationError, match="--agent"):
        wallet_agent(store)


def served_agent(store: Any) -> Agent:
    """An agent factory for ``fiduciary serve --agent`` (module:attribute)."""
    return leased_agent(store, Effects())


def test_the_cli_serves_and_keeps_keys_on_postgres(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import typer
    import uvicorn
    from typer.testing import CliRunner

    from fiduciary.server.cli import register

    cli = typer.Typer()
    register(cli)
    runner = CliRunner()
    dsn = create_database()
    monkeypatch.delenv("FIDUCIARY_POSTGRES", raising=False)

    created = runner.invoke(cli, ["keys", "create", "--postgres", dsn, "--principal", "alice"])
    assert created.exit_code == 0, created.output
    key = created.stdout.strip().splitlines()[0]
    monkeypatch.setenv("FIDUCIARY_POSTGRES", dsn)  # the environment names the database too
    listed = runner.invoke(cli, ["keys", "list", "--principal", "alice"])
    assert listed.exit_code == 0, listed.output
    assert key.split("_")[1] in listed.stdout
    assert key not in listed.stdout

    seen: dict[str, Any] = {}

    async def main_loop(self: uvicorn.Server) -> None:  # started and listening: stop at once
        app: Any = self.config.app
        server = app.state.server
        seen["drive"] = server.drive
        seen["store"] = type(server.agent.store).__name__
        seen["key"] = await server.keys.verify(key)

    monkeypatch.setattr(uvicorn.Server, "main_loop", main_loop)
    agent = "tests.unit.server.test_postgres_servers:served_agent"
    result = runner.invoke(cli, ["serve", "--no-drive", "--agent", agent, "--port", "0"])
    assert result.exit_code == 0, result.output
    assert seen["drive"] is False
    assert seen["store"] == "PostgresStore"
    assert seen["key"] is not None
    assert seen["key"].principal == "alice"
    assert "runs driven by workers" in " ".join(result.output.split())

    # the default agent keeps its books in SQLite
    wallet = runner.invoke(cli, ["serve", "--port", "0"])
    assert wallet.exit_code == 2
    assert "--agent" in wallet.output
    monkeypatch.delenv("FIDUCIARY_POSTGRES")
    config = tmp_path / "server.toml"
    config.write_text(
        '[[notify]]\nurl = "https://hooks.example.com/x"\nsecret = "0123456789abcdef"\n'
    )
    notify = runner.invoke(
        cli, ["serve", "--no-drive", "--agent", agent, "--config", str(config), "--port", "0"]
    )
    assert notify.exit_code == 2
    assert "--no-drive" in notify.output
    alone = runner.invoke(cli, ["serve", "--no-drive", "--agent", agent])
    assert alone.exit_code == 2
    assert "--postgres" in alone.output
    unreachable = runner.invoke(
        cli, ["keys", "list", "--postgres", "postgresql://postgres@127.0.0.1:1/x"]
    )
    assert unreachable.exit_code == 2
    assert "API keys" in unreachable.output
    assert "Traceback" not in unreachable.output


async def test_followers_on_postgres_do_not_poll(tmp_path: Path) -> None:
    """LISTEN/NOTIFY carries other processes' commits: the re-read is a 30 s safety net only."""
    postgres = PostgresStore("postgresql://unused")  # never opened
    sqlite = await SQLiteStore.open(tmp_path / "runs.sqlite3")
    keys = PostgresKeyStore("unused")
    try:
        on_postgres = create_app(leased_agent(postgres, Effects()), keys=keys)
        on_sqlite = create_app(leased_agent(sqlite, Effects()), keys=keys)
        assert on_postgres.state.server.hub.poll_seconds == 30.0
        assert on_sqlite.state.server.hub.poll_seconds == 0.5  # another process may write
    finally:
        await sqlite.close()

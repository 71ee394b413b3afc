"""Two promises held from outside the agent's own process, on a real SQLite file:

- fail-closed authorization: an agent whose host configured no ``authorize`` refuses every
  propose, approve and execute call (``unauthorized``) and runs its reads — whether the run is
  started through the HTTP API or driven by a second process;
- tool-output redaction: secrets a capability returns reach neither the HTTP API (a run's
  events, its live SSE stream, the global stream, approvals, /audit, /ledger) nor what a second
  process reads from the store, nor the database file itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID

import httpx
import pytest

from fiduciary.events import PendingAction, RunCompleted, ToolCallEnd, ToolCallRejected
from fiduciary.server import MemoryKeyStore, RateLimit, create_app
from fiduciary.stores.sqlite import SQLiteStore

from .conftest import all_events, bearer, client_for, settle, start_run
from .second_process import (
    CANARIES,
    CHARGE,
    UNGUARDED,
    secret_outputs_agent,
    unguarded_agent,
)

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]
GUARDED = {"propose_transfer", "approve_transfer", "send"}


def second_process(*args: str | Path) -> str:
    """``python -m tests.unit.server.second_process ARGS`` in a new process: its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.unit.server.second_process", *map(str, args)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    store = await SQLiteStore.open(tmp_path / "runs.sqlite3")
    yield store
    await store.close()


async def _key(keys: MemoryKeyStore, principal: str = "alice") -> str:
    key, _ = await keys.create(principal, ["runs:write", "runs:read", "approvals:decide"])
    return key


async def _refused_everything_but_the_read(
    client: httpx.AsyncClient, key: str, run_id: UUID, store: SQLiteStore
) -> None:
    """What the API shows of the unguarded run: three refusals, the read, no approval, no
    audit row of an effect, no ledger row."""
    events = await all_events(client, key, run_id)
    refused = {e.name: e.reason for e in events if isinstance(e, ToolCallRejected)}
    assert refused == dict.fromkeys(GUARDED, "unauthorized")
    assert [e.name for e in events if isinstance(e, ToolCallEnd)] == ["balance"]
    assert not [e for e in events if isinstance(e, PendingAction)]
    assert isinstance(events[-1], RunCompleted)
    pending = await client.get(f"/approvals?run_id={run_id}", headers=bearer(key))
    assert pending.json()["approvals"] == []
    assert await store.list_approvals(run_id=run_id) == []  # none, in any status
    audit = (await client.get(f"/audit?run_id={run_id}", headers=bearer(key))).json()["audit"]
    assert sorted((r["capability"], r["outcome"]) for r in audit) == [
        ("approve_transfer", "rejected:unauthorized"),
        ("balance", "ok"),
        ("propose_transfer", "rejected:unauthorized"),
        ("send", "rejected:unauthorized"),
    ]
    ledger = await client.get(f"/ledger?run_id={run_id}", headers=bearer(key))
    assert ledger.json()["ledger"] == []


async def test_without_authorize_the_http_api_refuses_every_write(
    sqlite: SQLiteStore, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    keys = MemoryKeyStore()
    key = await _key(keys)
    app = create_app(unguarded_agent(sqlite, effects), keys=keys, rate_limit=RateLimit(100, 60))
    async with client_for(app) as client:
        run_id = await start_run(client, key, UNGUARDED)
        await settle(app.state.server)
        await _refused_everything_but_the_read(client, key, run_id, sqlite)
    await app.state.server.close()
    assert not effects.exists()  # no handler of a guarded capability was entered


async def test_without_authorize_a_second_process_refuses_every_write(
    sqlite: SQLiteStore, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    db = tmp_path / "runs.sqlite3"
    run_id = UUID(second_process("drive", db, effects).strip())
    assert not effects.exists()
    # this process reads what the other one did, through the HTTP API over the same file
    keys = MemoryKeyStore()
    key = await _key(keys)
    app = create_app(unguarded_agent(sqlite, effects), keys=keys, resume_on_start=False)
    async with client_for(app) as client:
        await _refused_everything_but_the_read(client, key, run_id, sqlite)
    await app.state.server.close()


def _clean(text: str, where: str) -> None:
    for canary in CANARIES:
        assert canary not in text, (where, canary)


async def test_secrets_in_tool_outputs_reach_no_endpoint_stream_process_or_file(
    sqlite: SQLiteStore, tmp_path: Path
) -> None:
    keys = MemoryKeyStore()
    key = await _key(keys)
    admin, _ = await keys.create("ops", ["admin"])
    app = create_app(secret_outputs_agent(sqlite), keys=keys, rate_limit=RateLimit(100, 60))
    shown: dict[str, str] = {}
    async with client_for(app) as client:
        run_id = await start_run(client, key, CHARGE)
        server = app.state.server
        await settle(server)
        pending = (await client.get(f"/approvals?run_id={run_id}", headers=bearer(key))).json()
        (card,) = pending["approvals"]
        # the live stream, followed from the start while the approved write runs
        async with client.stream("GET", f"/runs/{run_id}/events", headers=bearer(key)) as live:
            decided = await client.post(
                f"/approvals/{card['approval_id']}/approve",
                json={"args_digest": card["args_digest"]},
                headers=bearer(key),
            )
            assert decided.status_code == 200, decided.text
            streamed = ""
            async for chunk in live.aiter_text():
                streamed += chunk
                if "event: run_completed" in streamed:
                    break
        shown["live SSE"] = streamed
        await settle(server)
        for path in (
            f"/runs/{run_id}/events?follow=false",
            "/events?follow=false",
            f"/approvals?run_id={run_id}&status=approved",
            "/audit",
            "/ledger",
        ):
            for who in (key, admin):
                response = await client.get(path, headers=bearer(who))
                assert response.status_code == 200, (path, response.text)
                shown[f"{path} ({'admin' if who == admin else 'alice'})"] = response.text
        events = await all_events(client, key, run_id)
    await server.close()

    # what flowed is still there, without its secrets
    ends = {e.name: e for e in events if isinstance(e, ToolCallEnd)}
    assert set(ends) == {"card_details", "charge_card"}
    assert "Alice" in ends["card_details"].output
    assert "12.00" in ends["charge_card"].output
    ledger = json.loads(shown["/ledger (alice)"])["ledger"]
    assert [(r["capability"], r["status"], r["result"]["charged"]) for r in ledger] == [
        ("charge_card", "done", "12.00")
    ]
    assert "statement_url" in shown["/audit (alice)"]
    assert "run_completed" in shown["live SSE"]
    for where, text in shown.items():
        _clean(text, where)

    # a second process reads the store: events, audit, ledger, approvals
    read = second_process("read", tmp_path / "runs.sqlite3")
    assert '"charged": "12.00"' in read
    _clean(read, "the store, read by a second process")
    # and the file itself, with its write-ahead log
    _files_clean(tmp_path, "runs.sqlite3*")


def _files_clean(folder: Path, pattern: str) -> None:
    files = list(folder.glob(pattern))
    assert files
    for file in files:
        raw = file.read_bytes()
        for canary in CANARIES:
            assert canary.encode() not in raw, (file.name, canary)

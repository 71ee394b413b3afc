"""A delegated run's pending action, from the HTTP API: the card names the runs that delegated
it, up to the person's own (the parent's context), and deciding it lets the parent finish."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import pytest

from fiduciary import ManualClock
from fiduciary.delegation import child_run_id
from fiduciary.events import RunCompleted
from fiduciary.testing import (
    MemoryStore,
    allow_all,
    collect,
)
from tests.agent_support import billing_manager
from tests.waiting import eventually

from .conftest import AppFactory, bearer, client_for

pytestmark = pytest.mark.timeout(30)


async def test_a_childs_card_names_its_parent(make_app: AppFactory) -> None:
    store = MemoryStore()
    options: dict[str, Any] = {"store": store, "clock": ManualClock(), "authorize": allow_all}
    manager = billing_manager(options, paid="paid $5")
    run = manager.run("settle my invoice", principal="alice")
    parent = (await anext(run)).run_id
    rest = asyncio.ensure_future(collect(run))
    child = child_run_id(parent, "toolu_000_0")
    app = make_app(agent=manager)
    key = (await app.state.server.keys.create("alice", ["runs:read", "approvals:decide"]))[0]
    async with client_for(app) as client, asyncio.timeout(10):
        while True:
            response = await client.get("/approvals?status=pending", headers=bearer(key))
            assert response.status_code == 200, response.text
            cards = response.json()["approvals"]
            if cards:
                break
            await asyncio.sleep(0.01)  # the child's drive suspends in another task
        (card,) = cards
        assert card["run_id"] == str(child)
        assert card["delegated_by"] == [
            {"run_id": str(parent), "delegate": None, "title": "settle my invoice"}
        ]
        decided = await client.post(
            f"/approvals/{card['approval_id']}/approve",
            json={"args_digest": card["args_digest"]},
            headers=bearer(key),
        )
        assert decided.status_code == 200, decided.text
        # the parent's own drive ended waiting for its child, holding nothing
        await rest
        # the server resumes the decided child (with the manager's worker), then the parent
        await eventually(
            lambda: _completed(store, parent), what="the parent to get the child's answer"
        )
    events = await store.read_events(parent)
    final = events[-1]
    assert isinstance(final, RunCompleted)
    assert final.text == "done"


async def _completed(store: MemoryStore, run_id: UUID) -> bool:
    run = await store.get_run(run_id)
    return run is not None and run.status == "completed"

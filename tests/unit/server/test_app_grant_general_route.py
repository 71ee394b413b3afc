"""An app's ``request_grant`` card decided through the general approvals routes: the same
checks as any approval (who may, the digest, the expiry, once), and approving it creates the
grant and continues the app's message run, so its next write within the grant runs."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from fiduciary import ManualClock
from fiduciary.apps import MemoryAppTables
from fiduciary.apps.engine import AppEngine
from fiduciary.server.features import Features
from fiduciary.stores.base import Store
from tests.faults.grant_child import build, enabled, saves

from .conftest import AppFactory, Keys, bearer, client_for, problem

pytestmark = pytest.mark.timeout(30)


async def asked(engine: AppEngine) -> tuple[str, dict[str, Any]]:
    """The app's message run, waiting for the grant it asked for: its run id and the card."""
    await enabled(engine)
    sent = await engine.message("sweeper", "sweep the idle USDC")
    assert sent.waiting
    [pending] = await engine.pending("sweeper")
    assert pending.capability == "request_grant"
    return str(sent.run_id), {"approval_id": str(pending.approval_id)}


async def card(http: httpx.AsyncClient, key: str, approval_id: str) -> dict[str, Any]:
    shown = await http.get(f"/approvals/{approval_id}", headers=bearer(key))
    assert shown.status_code == 200, shown.text
    body: dict[str, Any] = shown.json()
    return body


async def approve(
    http: httpx.AsyncClient, key: str, approval_id: str, digest: str
) -> httpx.Response:
    """``key`` approves ``approval_id`` through the general route, naming ``digest``."""
    return await http.post(
        f"/approvals/{approval_id}/approve", json={"args_digest": digest}, headers=bearer(key)
    )


async def test_approved_through_the_general_route_the_grant_lets_the_save_run(
    make_app: AppFactory, keys: Keys, store: Store, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.sqlite3"
    engine = build(store, MemoryAppTables(), effects)
    run_id, pending = await asked(engine)
    app = make_app(features=Features(apps=engine))
    approval_id = pending["approval_id"]
    async with client_for(app) as http:
        shown = await card(http, keys.alice, approval_id)
        assert shown["capability"] == "request_grant"
        listed = (await http.get("/approvals", headers=bearer(keys.alice))).json()["approvals"]
        assert [a["approval_id"] for a in listed] == [approval_id]
        assert saves(effects) == []
        # bob may not see it; a wrong digest decides nothing
        refused = await approve(http, keys.bob, approval_id, shown["args_digest"])
        problem(refused, 404, "not_found")
        wrong = await approve(http, keys.alice, approval_id, "0" * 64)
        assert wrong.status_code == 409, wrong.text
        assert (await card(http, keys.alice, approval_id))["status"] == "pending"
        assert await engine.tables.grants("sweeper") == []
        decided = await approve(http, keys.alice, approval_id, shown["args_digest"])
        assert decided.status_code == 200, decided.text
        assert decided.json()["status"] == "approved"
        [grant] = await engine.tables.grants("sweeper")
        assert grant.operations == ("save",)
        assert saves(effects) == [1]  # the message run went on: its save ran within the grant
        run = (await http.get(f"/runs/{run_id}", headers=bearer(keys.alice))).json()
        assert run["status"] == "completed"
        again = await approve(http, keys.alice, approval_id, shown["args_digest"])
        problem(again, 409, "already_decided")
    assert saves(effects) == [1]


async def test_rejected_through_the_general_route_nothing_is_granted(
    make_app: AppFactory, keys: Keys, store: Store, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.sqlite3"
    engine = build(store, MemoryAppTables(), effects)
    run_id, pending = await asked(engine)
    app = make_app(features=Features(apps=engine))
    approval_id = pending["approval_id"]
    async with client_for(app) as http:
        denied = await http.post(
            f"/approvals/{approval_id}/deny",
            json={"reason": "not now"},
            headers=bearer(keys.admin),
        )
        assert denied.status_code == 200, denied.text
        assert denied.json()["status"] == "denied"
        assert await engine.tables.grants("sweeper") == []
        # the run went on without a grant: its save got its normal tier, a card of its own
        run = (await http.get(f"/runs/{run_id}", headers=bearer(keys.alice))).json()
        assert run["status"] == "awaiting_approval"
        listed = (await http.get("/approvals", headers=bearer(keys.alice))).json()["approvals"]
        assert [a["capability"] for a in listed] == ["save"]
        again = await http.post(
            f"/approvals/{approval_id}/deny", json={}, headers=bearer(keys.alice)
        )
        problem(again, 409, "already_decided")
    assert saves(effects) == []


async def test_an_expired_grant_request_is_refused_and_grants_nothing(
    make_app: AppFactory, keys: Keys, store: Store, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.sqlite3"
    engine = build(store, MemoryAppTables(), effects)
    _, pending = await asked(engine)
    app = make_app(features=Features(apps=engine))
    approval_id = pending["approval_id"]
    async with client_for(app) as http:
        shown = await card(http, keys.alice, approval_id)
        assert isinstance(engine.clock, ManualClock)
        engine.clock.set(datetime.fromisoformat(shown["expires_at"]) + timedelta(seconds=1))
        late = await approve(http, keys.alice, approval_id, shown["args_digest"])
        problem(late, 410, "expired")
        assert await engine.tables.grants("sweeper") == []
    assert saves(effects) == []

"""A grant the model asks for, over the apps' HTTP routes: the message waits, the card is an
app's pending action, approving it creates the grant and continues the message run."""

from __future__ import annotations

from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount

from fiduciary import Principal
from fiduciary.apps import MemoryAppTables
from fiduciary.apps.http import apps_routes
from fiduciary.testing import MemoryStore
from tests.faults.grant_child import build, enabled, saves


async def test_a_grant_request_approved_over_http_lets_the_save_run(tmp_path: Path) -> None:
    effects = tmp_path / "effects.sqlite3"
    engine = build(MemoryStore(), MemoryAppTables(), effects)
    await enabled(engine)

    async def authenticate(request: Request) -> Principal:
        return Principal(request.headers.get("x-who", "nobody"))

    app = Starlette(routes=[Mount("/apps", routes=apps_routes(engine, authenticate))])
    me = {"x-who": "alice"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        said = await http.post("/apps/sweeper/messages", json={"text": "sweep"}, headers=me)
        assert said.json()["waiting"] is True
        [pending] = (await http.get("/apps/sweeper", headers=me)).json()["pending"]
        assert pending["capability"] == "request_grant"
        assert pending["args"]["operations"] == ["save"]
        assert saves(effects) == []
        decided = await http.post(
            f"/apps/sweeper/approvals/{pending['approval_id']}/approve", headers=me
        )
        assert decided.status_code == 200
        assert decided.json() == {
            "approval_id": pending["approval_id"],
            "status": "approved",
            "run_id": said.json()["run_id"],
            "reply": "saved 60",
            "waiting": False,
        }
        assert saves(effects) == [1]
        assert (await http.get("/apps/sweeper", headers=me)).json()["pending"] == []

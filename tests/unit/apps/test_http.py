"""The apps' routes, mounted in a Starlette app, through httpx's ASGI transport."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount

from fiduciary import ManualClock, Principal
from fiduciary.apps.http import apps_routes

from .support import Book, Hooks, engine

CHAT = """---
id: chat
hooks: [message, tick]
capabilities: [balance, buy]
permissions: [swap]
---
Answer.
"""


def client(hooks: Hooks) -> tuple[httpx.AsyncClient, object]:
    eng = engine(CHAT, book=Book(), hooks=hooks, clock=ManualClock())

    async def authenticate(request: Request) -> Principal:
        return Principal(request.headers.get("x-who", "nobody"))

    app = Starlette(routes=[Mount("/apps", routes=apps_routes(eng, authenticate))])
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url="http://test"), eng


async def test_enable_message_and_show_over_http() -> None:
    hooks = Hooks()
    hooks.on("chat", "message", lambda ctx: {"reply": f"hi {ctx['message']}"})
    http, _ = client(hooks)
    async with http:
        me = {"x-who": "alice"}
        assert (await http.post("/apps/chat/enable", headers=me)).json() == {
            "enabled": False,
            "waiting": True,
        }
        [pending] = (await http.get("/apps/chat", headers=me)).json()["pending"]
        assert pending["capability"] == "app_enable"
        decided = await http.post(
            f"/apps/chat/approvals/{pending['approval_id']}/approve", headers=me
        )
        assert decided.json()["status"] == "approved"
        assert (await http.post("/apps/chat/enable", headers=me)).json()["enabled"] is True
        said = await http.post("/apps/chat/messages", json={"text": "bob"}, headers=me)
        assert said.status_code == 200
        assert said.json()["reply"] == "hi bob"
        shown = (await http.get("/apps/chat", headers=me)).json()
        assert shown["enabled"] is True
        listed = (await http.get("/apps/", headers=me)).json()
        assert [a["id"] for a in listed] == ["chat"]


async def test_another_principal_is_refused_and_errors_have_their_status() -> None:
    http, _ = client(Hooks())
    async with http:
        refused = await http.get("/apps/", headers={"x-who": "mallory"})
        assert refused.status_code == 403
        assert refused.json()["error"] == "forbidden"
        missing = await http.get("/apps/nope", headers={"x-who": "alice"})
        assert missing.status_code == 404
        empty = await http.post(
            "/apps/chat/messages", json={"text": " "}, headers={"x-who": "alice"}
        )
        assert empty.status_code == 422

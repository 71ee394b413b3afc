"""``web_search`` and ``BraveSearch``: the API's HTTP shape against a real server on a loopback
socket (uvicorn + starlette, started here), every failure mapped to a closed error code, the key
in no message, event, audit row or log line; the capability's results marked untrusted."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from fiduciary import CapabilityError, ConfigurationError
from fiduciary.events import Event, ToolCallEnd
from fiduciary.testing import (
    Call,
    FakeSearch,
    MemoryStore,
    Reply,
    Script,
    ScriptedModel,
    SearchResult,
    ToolCalls,
    collect,
)
from fiduciary.web_search import (
    BRAVE_KEY_ENV,
    UNTRUSTED_NOTICE,
    BraveSearch,
    search_from_env,
    web_search,
)
from tests.agent_support import make_agent

KEY = "BSA-test-key-0123456789abcdef"
PATH = "/res/v1/web/search"

ANSWER = {
    "type": "search",
    "query": {"original": "fiduciary"},
    "web": {
        "type": "search",
        "results": [
            {
                "title": "<strong>Fiduciary</strong> duty &amp; care",
                "url": "https://example.org/duty",
                "description": "A <strong>fiduciary</strong> acts for another.",
                "age": "2 days ago",
            },
            {"title": "Second", "url": "https://example.org/2", "description": "two"},
            {"title": "Third", "url": "https://example.org/3", "description": "three"},
        ],
    },
}


@dataclass
class Brave:
    """The fake API's address, and every request it received."""

    endpoint: str
    seen: list[Request] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)


@asynccontextmanager
async def brave_api() -> AsyncIterator[Brave]:
    """A fake Brave Search API served for real; the query picks the answer."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    brave = Brave(f"http://127.0.0.1:{sock.getsockname()[1]}{PATH}")

    async def search(request: Request) -> Response:
        brave.seen.append(request)
        query = request.query_params.get("q", "")
        if request.headers.get("x-subscription-token") != KEY:
            return JSONResponse({"type": "ErrorResponse"}, status_code=401)
        if query.startswith("status "):
            return JSONResponse({"error": "no"}, status_code=int(query.split()[1]))
        if query == "garbage":
            return PlainTextResponse("<html>not json</html>")
        if query == "hang":  # answers only once the test is done: the client times out first
            await brave.release.wait()
        return JSONResponse(ANSWER)

    app = Starlette(routes=[Route(PATH, search)])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield brave
    finally:
        brave.release.set()
        server.should_exit = True
        await serving


async def test_the_request_and_the_results_have_the_api_s_shape() -> None:
    async with brave_api() as brave:
        found = await BraveSearch(KEY, endpoint=brave.endpoint).search("fiduciary", limit=2)
    (request,) = brave.seen
    assert request.method == "GET"
    assert request.url.path == PATH
    assert dict(request.query_params) == {"q": "fiduciary", "count": "2"}
    assert request.headers["x-subscription-token"] == KEY
    assert request.headers["accept"] == "application/json"
    assert found == [  # the markup Brave puts around matched words is removed
        SearchResult(
            title="Fiduciary duty & care",
            url="https://example.org/duty",
            snippet="A fiduciary acts for another.",
        ),
        SearchResult(title="Second", url="https://example.org/2", snippet="two"),
    ]


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("status 403", "unauthorized"),
        ("status 429", "rate_limited"),
        ("status 404", "refused"),
        ("status 422", "refused"),
        ("status 500", "http_error"),
        ("status 503", "http_error"),
        ("garbage", "http_error"),
    ],
)
async def test_each_failure_is_a_closed_code(query: str, code: str) -> None:
    async with brave_api() as brave:
        with pytest.raises(CapabilityError) as refused:
            await BraveSearch(KEY, endpoint=brave.endpoint).search(query, limit=3)
    assert refused.value.code == code
    assert KEY not in str(refused.value)
    assert refused.value.__cause__ is None


async def test_a_wrong_key_is_unauthorized_and_never_shown() -> None:
    wrong = "BSA-wrong-key-fedcba9876543210"
    async with brave_api() as brave:
        backend = BraveSearch(wrong, endpoint=brave.endpoint)
        with pytest.raises(CapabilityError) as refused:
            await backend.search("fiduciary", limit=3)
    assert refused.value.code == "unauthorized"
    assert refused.value.message == "Brave Search refused the search (401) (check the API key)"
    assert wrong not in repr(backend)


async def test_no_answer_in_time_is_a_timeout() -> None:
    async with brave_api() as brave:
        with pytest.raises(CapabilityError) as refused:
            await BraveSearch(KEY, endpoint=brave.endpoint, timeout=0.2).search("hang", limit=1)
    assert (refused.value.code, refused.value.message) == (
        "timeout",
        "Brave Search did not answer within 0.2 s",
    )


async def test_nobody_listening_is_unreachable() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # the port is free: nothing listens there
    backend = BraveSearch(KEY, endpoint=f"http://127.0.0.1:{port}{PATH}")
    with pytest.raises(CapabilityError) as refused:
        await backend.search("fiduciary", limit=1)
    assert refused.value.code == "unreachable"


def test_the_key_comes_from_the_environment_or_is_asked_for() -> None:
    assert search_from_env({}) is None
    assert isinstance(search_from_env({BRAVE_KEY_ENV: KEY}), BraveSearch)
    with pytest.raises(ConfigurationError, match=BRAVE_KEY_ENV):
        BraveSearch("  ")


def searching(*queries: str) -> Script:
    return Script(
        match=lambda _text: True,
        steps=[
            *(ToolCalls([Call("web_search", {"query": q, "limit": 2})]) for q in queries),
            Reply("Here is what I found."),
        ],
    )


def ends(events: list[Event]) -> list[ToolCallEnd]:
    return [e for e in events if isinstance(e, ToolCallEnd)]


async def test_the_model_is_told_the_results_are_untrusted() -> None:
    fake = FakeSearch({"rates": [SearchResult(title="t", url="https://e.org", snippet="s")]})
    capability = web_search(fake)
    assert capability.kind.value == "read"
    assert UNTRUSTED_NOTICE in capability.description
    agent = make_agent(model=ScriptedModel([searching("rates")]), capabilities=[capability])
    events = await collect(agent.run("look up rates", principal="alice"))
    (end,) = ends(events)
    assert not end.is_error
    assert json.loads(end.output) == {
        "trust": "untrusted",
        "notice": UNTRUSTED_NOTICE,
        "query": "rates",
        "results": [{"title": "t", "url": "https://e.org", "snippet": "s"}],
    }
    assert fake.queries == ["rates"]


async def test_through_an_agent_the_key_is_in_no_event_audit_row_or_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    caplog.set_level(logging.DEBUG)
    async with brave_api() as brave:
        agent = make_agent(
            store=store,
            model=ScriptedModel([searching("fiduciary", "status 500")]),
            capabilities=[web_search(BraveSearch(KEY, endpoint=brave.endpoint))],
        )
        events = await collect(agent.run("search twice", principal="alice"))
    found, failed = ends(events)
    assert not found.is_error
    assert "example.org/duty" in found.output
    assert (failed.is_error, failed.error_code) == (True, "http_error")
    assert "Brave Search failed (500)" in failed.output
    audit = await store.audit_records(events[0].run_id)
    written = [e.model_dump_json() for e in events] + [repr(a) for a in audit] + [caplog.text]
    assert [w for w in written if KEY in w] == []


@pytest.mark.live
@pytest.mark.skipif(not os.environ.get(BRAVE_KEY_ENV), reason=f"{BRAVE_KEY_ENV} is not set")
async def test_live_brave_search() -> None:
    found = await BraveSearch().search("Python programming language", limit=3)
    assert 1 <= len(found) <= 3
    assert all(r.url.startswith("http") and r.title for r in found)


def test_the_docs_example_runs_offline() -> None:
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "capabilities.md").read_text(encoding="utf-8")
    block = re.search(r"## Web search.*?```python\n(.*?)```", page, re.S)
    assert block is not None
    env = {k: v for k, v in os.environ.items() if k != BRAVE_KEY_ENV}
    ran = subprocess.run(
        [sys.executable, "-c", block[1]], env=env, capture_output=True, text=True, timeout=60
    )
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "Rates\n", "")

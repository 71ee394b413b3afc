"""HTTP actions: declared endpoints as capabilities, called through the URL guard, against a
local HTTP server (private addresses allowed explicitly for the test)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from uuid import uuid4

import pytest

from fiduciary import CallContext, Capability, ManualClock, Principal
from fiduciary.apps import parse_manifest
from fiduciary.apps.endpoints import Endpoint, EndpointCallError, endpoint_capabilities
from fiduciary.exceptions import CapabilityError, ConfigurationError
from fiduciary.signing import UrlGuard

from .support import Book, Hooks, engine

pytestmark = pytest.mark.timeout(30)

LOCAL = UrlGuard(schemes=["http"], allow_private=True)  # the test's server is on loopback


class Local:
    """A loopback HTTP server: what it received, and a gate that holds /slow until released."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str, Any]] = []
        self.release = threading.Event()
        local = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(
                self, status: int, body: Any, headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                local.received.append(("GET", self.path, None))
                if self.path.startswith("/moved-here"):
                    self._answer(200, {"followed": True})
                else:
                    self._answer(200, {"price": "1.25"})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"null")
                local.received.append(("POST", self.path, body))
                if self.path == "/redirect":
                    self._answer(302, {}, {"location": "/moved-here"})
                elif self.path == "/refuse":
                    self._answer(403, {"error": "no"})
                elif self.path == "/broken":
                    self._answer(500, {"error": "oops"})
                elif self.path == "/slow":
                    local.release.wait(20)
                    self._answer(200, {"late": True})
                else:
                    self._answer(200, {"ok": True, "got": body})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Local:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def local() -> Iterator[Local]:
    with Local() as server:
        yield server


def ctx() -> CallContext:
    return CallContext(
        run_id=uuid4(),
        tool_use_id="t1",
        principal=Principal("alice"),
        capability="x",
        idempotency_key="k",
        clock=ManualClock(),
    )


def caps(local: Local, **options: Any) -> dict[str, Any]:
    endpoints = [
        Endpoint(name="price", url=f"{local.base}/price", method="GET"),
        Endpoint(name="pay", url=f"{local.base}/pay", operation="send", amount_field="usd"),
        Endpoint(name="hop", url=f"{local.base}/redirect", operation="send"),
        Endpoint(name="refused", url=f"{local.base}/refuse", operation="send"),
        Endpoint(name="broken", url=f"{local.base}/broken", operation="send"),
        Endpoint(name="slow", url=f"{local.base}/slow", operation="send"),
    ]
    options.setdefault("guard", LOCAL)
    made = endpoint_capabilities(endpoints, allowed_hosts=["127.0.0.1"], **options)
    return {c.name: c for c in made}


async def call(cap: Any, payload: dict[str, Any]) -> Any:
    return await cap.invoke(cap.input_model(payload=payload), ctx())


async def test_a_read_and_a_write_reach_their_declared_endpoints(local: Local) -> None:
    found = caps(local)
    assert found["price"].kind == "read"
    assert (found["pay"].kind, found["pay"].operation) == ("execute", "send")
    assert await call(found["price"], {"asset": "SUI"}) == {
        "status": 200,
        "body": {"price": "1.25"},
    }
    paid = await call(found["pay"], {"to": "bob", "usd": "5"})
    assert paid["body"] == {"ok": True, "got": {"to": "bob", "usd": "5"}}
    assert local.received == [
        ("GET", "/price?asset=SUI", None),
        ("POST", "/pay", {"to": "bob", "usd": "5"}),
    ]
    args = found["pay"].input_model(payload={"usd": "5"})
    assert str(await found["pay"].amount(args, ctx())) == "5"


async def test_redirects_refusals_and_failures(local: Local) -> None:
    found = caps(local)
    with pytest.raises(CapabilityError, match="not followed") as hop:
        await call(found["hop"], {})
    assert hop.value.code == "redirect_refused"
    assert ("GET", "/moved-here", None) not in local.received
    with pytest.raises(CapabilityError) as refused:
        await call(found["refused"], {})
    assert refused.value.code == "unauthorized"  # a 403
    with pytest.raises(EndpointCallError):  # a write that failed over there: outcome unknown
        await call(found["broken"], {})


async def test_a_write_that_times_out_is_a_timeout(local: Local) -> None:
    found = caps(local, timeout=0.2)
    with pytest.raises(TimeoutError):  # the gates record a write's timeout as unknown
        await call(found["slow"], {"usd": "1"})


async def test_the_guard_refuses_private_addresses_and_other_hosts(local: Local) -> None:
    strict = caps(local, guard=UrlGuard(schemes=["http"]))
    with pytest.raises(CapabilityError) as unsafe:
        await call(strict["price"], {})
    assert unsafe.value.code == "unsafe_url"
    assert local.received == []
    with pytest.raises(ConfigurationError, match="not an allowed host"):
        endpoint_capabilities(
            [Endpoint(name="x", url="http://evil.example/x", method="GET")],
            allowed_hosts=["127.0.0.1"],
            guard=LOCAL,
        )
    with pytest.raises(ConfigurationError, match="scheme ftp"):
        endpoint_capabilities(
            [Endpoint(name="x", url="ftp://127.0.0.1/x", method="GET")],
            allowed_hosts=["127.0.0.1"],
            guard=LOCAL,
        )
    with pytest.raises(ConfigurationError, match="must name the operation"):
        endpoint_capabilities(
            [Endpoint(name="x", url=f"{local.base}/x")], allowed_hosts=["127.0.0.1"], guard=LOCAL
        )


ENDPOINT_APP = """---
id: payer
hooks: [tick]
tier: sniper
capabilities: [balance, pay, quote]
permissions: [send]
sources: [n]
---
Pay.
"""


async def test_a_permission_maps_to_its_endpoints_and_a_mismatch_is_refused(local: Local) -> None:
    endpoints = [
        Endpoint(name="pay", url=f"{local.base}/pay", operation="send", amount_field="usd"),
        Endpoint(name="quote", url=f"{local.base}/quote", operation="swap"),
    ]
    http_caps = endpoint_capabilities(endpoints, allowed_hosts=["127.0.0.1"], guard=LOCAL)
    book, hooks, clock = Book(), Hooks(), ManualClock()
    wrong = [
        # swap's endpoint asked for with send's permission, and send's with swap's
        {
            "summary": "a",
            "permissions": ["send"],
            "action": {"capability": "quote", "args": {"payload": {}}},
        },
        {
            "summary": "b",
            "permissions": ["swap"],
            "action": {"capability": "pay", "args": {"payload": {"usd": "1"}}},
        },
    ]
    hooks.on("payer", "tick", lambda c: {"intents": wrong})

    class WithEndpoints(Book):
        def capabilities(self) -> list[Capability]:
            return [*super().capabilities(), *http_caps]

    book = WithEndpoints()
    names = {c.name: c.operation for c in book.capabilities()}
    with pytest.raises(ConfigurationError, match="'repay' is not an operation"):
        parse_manifest(
            ENDPOINT_APP.replace("permissions: [send]", "permissions: [repay]"),
            capabilities=names,
            sources=("n",),
        )
    counter = [0]

    async def n() -> int:
        counter[0] += 1
        return counter[0]

    eng = engine(ENDPOINT_APP, book=book, hooks=hooks, clock=clock, sources={"n": n})
    await eng.enable("payer")  # it declares a permission: a person approves it first
    for approval in await eng.pending("payer"):
        await eng.approve(approval.approval_id, by="alice")
    assert (await eng.enable("payer")).enabled
    result = await eng.tick("payer")
    assert result.outcome == "ran"
    log = [e.kind for e in await eng.tables.read_log("payer", limit=50)]
    assert log.count("intent_refused") == 2
    assert local.received == []  # nothing was called

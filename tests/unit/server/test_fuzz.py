"""A property-based fuzz of the HTTP API against its own OpenAPI document (schemathesis):
no request, valid or not, gets a 5xx; every answer has a documented status, content type and
schema. The server runs for real (uvicorn on a loopback port, in a thread with its own loop)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import Case, GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.schemas import BaseSchema

from fiduciary import ManualClock
from fiduciary.demo import Billing
from fiduciary.server import OPERATIONS, InboundChannel, MemoryKeyStore, RateLimit, create_app
from fiduciary.stores.sqlite import SQLiteStore

from ..conftest import Effects
from .conftest import billing_agent

pytestmark = pytest.mark.timeout(300)


@dataclass
class Live:
    url: str
    key: str


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    import uvicorn

    db: Path = tmp_path_factory.mktemp("fuzz") / "fuzz.sqlite3"
    keys = MemoryKeyStore()
    key, _ = asyncio.run(keys.create("alice", ["runs:write", "runs:read", "approvals:decide"]))
    store = SQLiteStore(db)
    agent = billing_agent(store, ManualClock(), Effects(), Billing())
    app = create_app(
        agent,
        keys=keys,
        rate_limit=RateLimit(1_000_000, 60),
        channels=[InboundChannel("chat", "a-secret-of-16-chars", "alice")],
        heartbeat_seconds=1,
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # requests queue here until the server accepts them
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield Live(f"http://127.0.0.1:{sock.getsockname()[1]}", key)
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture(scope="module")
def api(live: Live) -> BaseSchema:
    return schemathesis.openapi.from_url(live.url + "/openapi.json", wait_for_schema=10)


LABELS = [f"{op.method} {op.path}" for op in OPERATIONS]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("label", LABELS)
def test_no_request_gets_a_server_error(
    api: BaseSchema, live: Live, label: str, mode: GenerationMode
) -> None:
    method, path = label.split(" ", 1)
    operation = api[path][method.lower()]
    headers = {"authorization": f"Bearer {live.key}"}
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]

    @settings(
        max_examples=40,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case: Case[Any]) -> None:
        if case.path.endswith("/events"):
            case.query = {**(case.query or {}), "follow": "false"}  # a stream never ends
        case.call_and_validate(base_url=live.url, headers=headers, timeout=20, checks=checks)

    fuzz()


def test_every_operation_is_documented(api: BaseSchema) -> None:
    documented = {
        f"{method.upper()} {path}"
        for path, methods in api.raw_schema["paths"].items()
        for method in methods
    }
    assert documented == set(LABELS)

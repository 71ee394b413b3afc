"""Passkeys shared by two ``fiduciary serve`` processes on one PostgreSQL: the registry and its
challenges are in the run store's database. A passkey registered on server A signs on server
B; an assertion used on one is refused on the other (403, an audit row, nothing executed), and
so is a registration answer already used; the payment runs once, at the second signed vote."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from webauthn.helpers import base64url_to_bytes

from ..softauthn import SoftAuthenticator

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(180)]

if os.environ.get("CI") != "true":
    pytest.importorskip("psycopg")
import psycopg  # noqa: E402

from fiduciary.server import PostgresKeyStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
RP, ORIGIN = "localhost", "http://localhost:8000"
AGENT = "tests.unit.server.signing_servers:signing_agent"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)  # each look is a request or a query: not a hundred a second


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def servers(postgres_dsn: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    env = {
        **os.environ,
        "FIDUCIARY_PASSKEY_RP_ID": RP,
        "FIDUCIARY_PASSKEY_ORIGINS": ORIGIN,
        "PYTHONPATH": str(ROOT),
        "NO_COLOR": "1",
    }
    env.pop("FIDUCIARY_PASSKEYS", None)  # the registry is the store's
    procs: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for name in ("a", "b"):
            port = free_port()
            with (tmp_path / f"{name}.stderr").open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "fiduciary",
                            "serve",
                            "--postgres",
                            postgres_dsn,
                            "--port",
                            str(port),
                            "--agent",
                            AGENT,
                        ],
                        cwd=ROOT,
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=log,
                    )
                )
            urls.append(f"http://127.0.0.1:{port}")
        for url, proc in zip(urls, procs, strict=True):

            def up(url: str = url, proc: subprocess.Popen[bytes] = proc) -> bool:
                return healthy(url) or proc.poll() is not None

            wait_for(up, f"{url} up")
            assert proc.poll() is None, (tmp_path / "a.stderr").read_text()
        yield urls[0], urls[1]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def keys_for(dsn: str) -> dict[str, str]:
    async def make() -> dict[str, str]:
        store = await PostgresKeyStore.open(dsn)
        try:
            made = {}
            for who in ("alice", "bob", "carol"):
                made[who], _ = await store.create(
                    who, ["runs:write", "runs:read", "approvals:decide"]
                )
            return made
        finally:
            await store.aclose()

    return asyncio.run(make())


def call(url: str, method: str, path: str, key: str, body: Any = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.request(method, url + path, json=body, headers=headers, timeout=30)


def executed(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM audit WHERE capability = 'send' AND outcome = 'ok'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def refusals(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT principal, output FROM audit WHERE outcome = 'rejected:signature_refused'"
        ).fetchall()
    return [(str(p), str(o)) for p, o in rows]


def test_register_on_a_sign_on_b_and_a_used_challenge_is_refused_on_the_other(
    postgres_dsn: str, servers: tuple[str, str]
) -> None:
    a, b = servers
    keys = keys_for(postgres_dsn)
    # bob registers on A; his answer, sent again to B, finds its challenge already taken
    bobs = SoftAuthenticator(RP, ORIGIN)
    options = call(a, "POST", "/passkeys/registration-options", keys["bob"]).json()["options"]
    answer = bobs.create(options)
    made = call(a, "POST", "/passkeys", keys["bob"], {"credential": answer, "name": "phone"})
    assert made.status_code == 201, made.text
    again = call(b, "POST", "/passkeys", keys["bob"], {"credential": answer, "name": "again"})
    assert again.status_code == 403, again.text
    assert again.json()["code"] == "signature_refused"
    carols = SoftAuthenticator(RP, ORIGIN)
    options = call(b, "POST", "/passkeys/registration-options", keys["carol"]).json()["options"]
    made = call(
        a, "POST", "/passkeys", keys["carol"], {"credential": carols.create(options), "name": "x"}
    )
    assert made.status_code == 201, made.text  # options from B, registered on A
    assert [p["name"] for p in call(b, "GET", "/passkeys", keys["bob"]).json()["passkeys"]] == [
        "phone"
    ]

    started = call(a, "POST", "/runs", keys["alice"], {"message": "send 60"})
    assert started.status_code in (200, 201, 202), started.text
    run_id = started.json()["run_id"]

    def waiting() -> list[dict[str, Any]]:
        found = call(b, "GET", f"/approvals?run_id={run_id}", keys["bob"]).json()["approvals"]
        return list(found)

    wait_for(lambda: bool(waiting()), "the pending approval")
    (approval,) = waiting()
    path = f"/approvals/{approval['approval_id']}"
    body = {"args_digest": approval["args_digest"]}
    # bob's passkey (registered on A) signs on B: 1 of 2
    challenge = call(b, "GET", f"{path}/signing-options", keys["bob"]).json()["options"]
    assertion = bobs.get(base64url_to_bytes(challenge["challenge"]))
    voted = call(b, "POST", f"{path}/approve", keys["bob"], {**body, "assertion": assertion})
    assert voted.status_code == 200, voted.text
    assert voted.json()["status"] == "pending"
    # the same assertion on A: refused there too, audited, nothing decided
    replayed = call(a, "POST", f"{path}/approve", keys["bob"], {**body, "assertion": assertion})
    assert replayed.status_code == 403, replayed.text
    assert replayed.json()["code"] == "signature_refused"
    assert refusals(postgres_dsn) == [("bob", replayed.json()["detail"])]
    assert call(a, "GET", path, keys["alice"]).json()["status"] == "pending"
    assert executed(postgres_dsn) == 0
    # carol signs on A: the second vote decides, the payment runs once
    challenge = call(a, "GET", f"{path}/signing-options", keys["carol"]).json()["options"]
    assertion = carols.get(base64url_to_bytes(challenge["challenge"]))
    done = call(a, "POST", f"{path}/approve", keys["carol"], {**body, "assertion": assertion})
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "approved"
    wait_for(lambda: executed(postgres_dsn) == 1, "the payment")
    wait_for(
        lambda: call(a, "GET", f"/runs/{run_id}", keys["alice"]).json()["status"] == "completed",
        "the run's end",
    )
    assert executed(postgres_dsn) == 1

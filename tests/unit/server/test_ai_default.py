"""``GET /ai/status`` and ``PUT /ai/default`` on ``fiduciary serve`` in a real process: only an
admin changes the default, a bad choice changes nothing, new runs use the new model (an
OpenAI-compatible server this test runs on a loopback socket) while a run started before keeps
its own, and the choice holds across a restart of the server."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fiduciary.events import RunStarted
from fiduciary.server.auth import SQLiteKeyStore
from fiduciary.stores.sqlite import SQLiteStore
from tests.waiting import wait_for

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

ANSWER = (Path(__file__).parents[1] / "models" / "wire" / "ollama_chat_answer.sse").read_bytes()
PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")


@contextmanager
def compatible_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """An OpenAI-compatible server (Ollama's recorded answer); its base URL and the requests."""
    import uvicorn

    seen: list[dict[str, Any]] = []

    async def completions(request: Request) -> Response:
        seen.append(await request.json())
        return Response(ANSWER, media_type="text/event-stream")

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", seen
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def serving(db: Path) -> Iterator[str]:
    """``fiduciary serve`` on ``db`` (the paper wallet, its scripted model); its address."""
    env = {k: v for k, v in os.environ.items() if k not in PROVIDER_KEYS}
    env.pop("FIDUCIARY_POSTGRES", None)
    env.pop("FIDUCIARY_MODEL", None)
    env.update({"FIDUCIARY_DB": str(db), "NO_COLOR": "1", "COLUMNS": "200"})
    process = subprocess.Popen(
        [sys.executable, "-m", "fiduciary", "serve", "--port", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        lines: list[str] = []
        for line in process.stderr:  # said once it accepts connections
            lines.append(line)
            found = re.search(r"console and API at (http://127\.0\.0\.1:\d+/)", line)
            if found:
                break
        assert found is not None, "".join(lines)
        yield found.group(1)
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


def keys(db: Path) -> tuple[str, str]:
    async def create() -> tuple[str, str]:
        store = SQLiteKeyStore(db)
        admin, _ = await store.create("root", ["admin"])
        alice, _ = await store.create("alice", ["runs:read", "runs:write", "approvals:decide"])
        store.close()
        return admin, alice

    return asyncio.run(create())


def completed_run(client: httpx.Client, message: str, run_id: str | None = None) -> str:
    path = "/runs" if run_id is None else f"/runs/{run_id}/messages"
    started = client.post(path, json={"message": message})
    assert started.status_code == 202, started.text
    ran = started.json()["run_id"]

    def status() -> str:
        return str(client.get(f"/runs/{ran}").json()["status"])

    wait_for(lambda: status() == "completed", what=f"run {ran} to complete", state=status)
    return str(ran)


def models_of(db: Path, *runs: str) -> list[str]:
    async def read() -> list[str]:
        store = SQLiteStore(db)
        try:
            found = []
            for run in runs:
                first = (await store.read_events(UUID(run), limit=1))[0]
                assert isinstance(first, RunStarted)
                found.append(first.model)
            return found
        finally:
            await store.close()

    return asyncio.run(read())


def test_an_admin_switches_the_default_and_it_holds_across_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "serve.sqlite3"
    admin, alice = keys(db)
    with compatible_server() as (base_url, seen):
        chosen = f"openai-compatible:qwen2.5:7b@{base_url}"
        with (
            serving(db) as url,
            httpx.Client(base_url=url, headers={"authorization": f"Bearer {alice}"}) as as_alice,
            httpx.Client(base_url=url, headers={"authorization": f"Bearer {admin}"}) as as_admin,
        ):
            status = as_alice.get("/ai/status").json()
            assert (status["default"], status["provider"]) == ("scripted", "scripted")
            assert status["persisted"] is True
            assert status["changes"] == []
            providers = {p["name"]: p for p in status["providers"]}
            assert providers["anthropic"]["key_variables"] == ["ANTHROPIC_API_KEY"]
            assert providers["anthropic"]["key_present"] is False
            assert providers["anthropic"]["problem"] == ("no API key: set ANTHROPIC_API_KEY")
            assert providers["scripted"]["default"] is True
            before = completed_run(as_alice, "hello")

            # not an admin: 403; an unknown provider or one without its key: 422; nothing changed
            refused = as_alice.put("/ai/default", json={"provider": "openai-compatible"})
            assert (refused.status_code, refused.json()["code"]) == (403, "insufficient_scope")
            for body, detail in [
                ({"provider": "nope"}, "unknown provider 'nope'"),
                ({"provider": "anthropic"}, "no API key: set ANTHROPIC_API_KEY"),
                ({"provider": "openai-compatible", "model": "qwen"}, "openai-compatible:MODEL@URL"),
            ]:
                bad = as_admin.put("/ai/default", json=body)
                assert (bad.status_code, bad.json()["code"]) == (422, "invalid_request"), bad.text
                assert detail in bad.json()["detail"]
            assert as_alice.get("/ai/status").json() == status

            changed = as_admin.put(
                "/ai/default",
                json={"provider": "openai-compatible", "model": f"qwen2.5:7b@{base_url}"},
            )
            assert changed.status_code == 200, changed.text
            assert changed.json()["default"] == chosen
            (change,) = changed.json()["changes"]
            assert (change["by"], change["from_model"], change["to_model"]) == (
                "root",
                "scripted",
                chosen,
            )
            assert seen == []  # nothing asked the new model yet

            after = completed_run(as_alice, "what is my balance?")
            assert len(seen) == 1  # the new run's one model turn
            completed_run(as_alice, "hello again", before)  # the older run keeps its model
            assert len(seen) == 1
            assert alice not in changed.text
            assert admin not in changed.text

        with (  # a restart: the choice is read back
            serving(db) as url,
            httpx.Client(base_url=url, headers={"authorization": f"Bearer {alice}"}) as as_alice,
        ):
            again = as_alice.get("/ai/status").json()
            assert again["default"] == chosen
            assert [c["to_model"] for c in again["changes"]] == [chosen]
            restarted = completed_run(as_alice, "and now?")
            assert len(seen) == 2

    assert models_of(db, before, after, restarted) == ["scripted", chosen, chosen]

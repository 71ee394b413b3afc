"""The UI message stream read by the ``ai`` package itself, as ``useChat`` reads it.

A real server (uvicorn on a free loopback socket) serves ``UIChat``; ``ui_stream_js/use_chat.mjs``
drives it with the package's ``DefaultChatTransport`` and ``readUIMessageStream``, answers the
approval as ``addToolApprovalResponse`` does and sends the chat again. The package is pinned by
``ui_stream_js/package-lock.json``; ``.ci/run`` installs it in place (``npm ci``), and in CI the
test fails without it. Elsewhere it is installed once into a cache folder, or the test is
skipped (no node or npm, or the install failed), saying why.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import socket
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn

import pytest

from fiduciary import Agent, Policy
from fiduciary.testing import MemoryStore, ScriptedModel, allow_all

from ..conftest import Effects, toy_capabilities
from ..models.helpers import ANSWER, QUESTION, SCRIPT
from .conftest import Keys

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).parent / "ui_stream_js"


def _missing(why: str) -> NoReturn:
    """Skip saying why; in CI (``CI=true``), where ``.ci/run`` installs it, fail instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (.ci/run installs node and runs npm ci in {HERE})")
    pytest.skip(why)


def _installed() -> Path:
    """A folder with the client script and the pinned ``ai`` package installed beside it (``npm
    ci``: exactly the versions of ``package-lock.json``): this folder when ``.ci/run`` installed
    it there, else a cache folder outside the repository, installed once."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None:
        _missing("node is needed")
    if (HERE / "node_modules" / "ai" / "package.json").exists():
        return HERE
    if os.environ.get("CI") == "true":
        _missing(f"the ai package is not installed in {HERE}")
    if npm is None:
        _missing("npm is needed to install the ai package")
    pinned = [(HERE / name).read_bytes() for name in ("package.json", "package-lock.json")]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    digest = hashlib.sha256(b"".join(pinned)).hexdigest()[:12]
    folder = cache / "fiduciary-tests" / f"ui-stream-{digest}"
    if not (folder / "node_modules" / "ai" / "package.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(HERE / name, folder / name)
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=folder,
            capture_output=True,
            timeout=240,
            check=False,
        )
        if done.returncode != 0:
            _missing(f"npm could not install the ai package: {done.stderr[-300:]!r}")
    shutil.copy(HERE / "use_chat.mjs", folder / "use_chat.mjs")
    return folder


async def test_the_ai_package_reads_a_run_through_its_approval(keys: Keys) -> None:
    import uvicorn
    from starlette.applications import Starlette

    from fiduciary.server.ui_stream import UIChat

    folder = _installed()
    effects = Effects()
    agent = Agent(
        model=ScriptedModel([SCRIPT]),
        capabilities=toy_capabilities(effects),
        store=MemoryStore(),
        policy=Policy(preset="balanced"),
        authorize=allow_all,
    )
    chat = UIChat(agent, keys=keys.store)
    app = Starlette(routes=[chat.route("/api/chat")])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections queue here until uvicorn accepts them
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        process = await asyncio.create_subprocess_exec(
            "node",
            "use_chat.mjs",
            cwd=folder,
            env={
                **os.environ,
                "FIDUCIARY_URL": f"http://127.0.0.1:{port}/api/chat",
                "FIDUCIARY_KEY": keys.alice,
                "FIDUCIARY_QUESTION": QUESTION,
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 120)
        assert process.returncode == 0, err.decode()
    finally:
        server.should_exit = True
        await serving
        await chat.aclose()
    result: dict[str, Any] = json.loads(out)

    first = result["first"]
    (pending,) = await agent.list_approvals(principal="alice", status=None)
    asked = [p for p in first["parts"] if p["type"] == "tool-send"]
    assert len(asked) == 1
    assert asked[0]["state"] == "approval-requested"
    assert asked[0]["approval"]["id"] == str(pending.approval_id)
    assert asked[0]["approval"]["signature"] == pending.args_digest
    assert asked[0]["approval"]["descriptor"]["amountUsd"] == "60"
    reads = [p for p in first["parts"] if p["type"] in ("tool-balance", "tool-rates")]
    assert [p["state"] for p in reads] == ["output-available", "output-available"]
    assert result["complete"] is True  # useChat would send the answer by itself

    final = result["final"]
    sent = next(p for p in final["parts"] if p["type"] == "tool-send")
    assert sent["state"] == "output-available"
    assert sent["output"]["sent"] == "60"
    assert sent["approval"]["approved"] is True
    texts = [p["text"] for p in final["parts"] if p["type"] == "text"]
    assert texts[-1] == ANSWER
    assert result["valid"] is True
    assert effects.payments == [{"to": "bob", "amount": Decimal("60"), "memo": ""}]

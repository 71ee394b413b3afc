"""A real MCP server process (``bank_server``) for the client tests, over stdio and HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from fiduciary.mcp import McpServer
from fiduciary.stores.base import Store
from fiduciary.stores.memory import MemoryStore
from tests.waiting import holds_within

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Bank:
    """How to reach the bank server, and the files it writes (transfers, in-flight marker)."""

    server: McpServer
    log: Path
    marker: Path
    process: subprocess.Popen[bytes] | None = None  # the HTTP server's (stdio: the client's)

    def transfers(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_http_bank(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.unit.mcp.bank_server", "http", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"

    def answers() -> bool:
        try:
            httpx.get(url, timeout=1)
        except httpx.TransportError:
            return False
        return True

    if holds_within(lambda: process.poll() is not None or answers(), 30) and answers():
        return process, url
    process.kill()
    raise RuntimeError("the bank server did not start")


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    """One store here: the stores are proven elsewhere, and each test starts a server."""
    backend = MemoryStore()
    yield backend
    await backend.close()


@pytest.fixture(params=["stdio", "http"])
def bank(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bank]:
    log, marker = tmp_path / "transfers.log", tmp_path / "marker"
    extra = {"BANK_LOG": str(log), "BANK_MARKER": str(marker), "PYTHONPATH": str(ROOT)}
    if request.param == "stdio":
        server = McpServer.stdio(
            "bank", sys.executable, "-m", "tests.unit.mcp.bank_server", env=extra, cwd=str(ROOT)
        )
        yield Bank(server, log, marker)
        return
    import os

    process, url = start_http_bank({**os.environ, **extra})
    try:
        yield Bank(McpServer.http("bank", url), log, marker, process)
    finally:
        process.kill()
        process.wait()

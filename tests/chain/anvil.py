"""A real anvil for the chain tests: the binary npm installed (package-lock.json pins it),
started on a free port and stopped after. Without it the tests skip with the reason, except
under ``CI=true``, where they fail: CI must run the chain suite, not skip it silently."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import holds_within

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "node_modules" / "@foundry-rs" / "anvil-linux-amd64" / "bin" / "anvil"
WRAPPER = ROOT / "node_modules" / ".bin" / "anvil"
STARTUP_TIMEOUT = 30.0


def anvil_binary() -> Path | None:
    """The platform binary when present (killed directly), else npm's wrapper."""
    for candidate in (NATIVE, WRAPPER):
        if candidate.exists():
            return candidate
    return None


def require_anvil() -> Path:
    binary = anvil_binary()
    if binary is None:
        reason = "anvil is not installed: run `make chain-tools` (npm ci)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: the chain tests must run)")
        pytest.skip(reason)
    return binary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def rpc(url: str, method: str, *params: Any) -> Any:
    """One JSON-RPC call, synchronous (for set-up and counting, outside fiduciary)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)})
    request = urllib.request.Request(
        url, body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        reply = json.loads(response.read())
    if "error" in reply:
        raise RuntimeError(f"{method}: {reply['error']}")
    return reply["result"]


def mined_receipt(url: str, tx_hash: str) -> dict[str, Any]:
    """The receipt of ``tx_hash`` once mined: anvil's automine mines a sent transaction in a
    task of its own, so a receipt read right after ``eth_sendRawTransaction`` may be null."""
    found: list[dict[str, Any]] = []

    def mined() -> bool:
        receipt = rpc(url, "eth_getTransactionReceipt", tx_hash)
        if receipt is not None:
            found.append(receipt)
        return receipt is not None

    if not holds_within(mined, STARTUP_TIMEOUT, interval=0.02):
        pytest.fail(f"{tx_hash} was not mined within {STARTUP_TIMEOUT:g}s")
    return found[0]


@contextmanager
def running_anvil(*args: str) -> Iterator[str]:
    """An anvil on a free port; its RPC URL. Stopped (and waited for) on exit."""
    binary = require_anvil()
    port = _free_port()
    process = subprocess.Popen(
        [str(binary), "--host", "127.0.0.1", "--port", str(port), "--silent", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def answers() -> bool:
            try:
                rpc(url, "eth_chainId")
            except (urllib.error.URLError, ConnectionError):
                return False
            return True

        # the node answers, or it died, or the deadline passed
        up = holds_within(
            lambda: answers() or process.poll() is not None, STARTUP_TIMEOUT, interval=0.02
        )
        if process.poll() is not None:
            err = process.stderr.read().decode() if process.stderr else ""
            pytest.fail(f"anvil exited with {process.returncode}: {err[:500]}")
        if not up:
            pytest.fail(f"anvil did not answer within {STARTUP_TIMEOUT:g}s")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()

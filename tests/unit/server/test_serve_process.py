"""``fiduciary serve`` as a user runs it, in a real process: it says where it serves only once
it accepts connections, and a port that another process holds is one clear error."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.timeout(120)

HOLDER = """
import socket, sys
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()
print(sock.getsockname()[1], flush=True)
sys.stdin.read()  # holds the port until the test closes our stdin
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "TERM": "dumb"}
    env.pop("FIDUCIARY_POSTGRES", None)
    env["FIDUCIARY_DB"] = str(tmp_path / "serve.sqlite3")
    return env


def test_a_port_in_use_is_one_clear_error_and_nothing_starts(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        served = subprocess.run(
            [sys.executable, "-m", "fiduciary", "serve", "--port", str(port)],
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        holder.communicate("", timeout=10)  # (closes its pipes)
    assert served.returncode == 2
    assert served.stdout == ""
    assert served.stderr == f"error: cannot listen on 127.0.0.1:{port}: address already in use\n"
    assert not (tmp_path / "serve.sqlite3").exists()  # refused before the store was opened


def test_serve_says_where_only_once_it_accepts_connections(tmp_path: Path) -> None:
    served = subprocess.Popen(
        [sys.executable, "-m", "fiduciary", "serve", "--port", "0"],
        env=_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert served.stderr is not None
        lines: list[str] = []
        for line in served.stderr:
            lines.append(line)
            if "console and API at" in line:
                break
        said = [line for line in lines if "console and API at" in line]
        assert said, "".join(lines)
        found = re.search(r"at (http://127\.0\.0\.1:(\d+)/) \(", said[0])
        assert found is not None, said[0]
        assert int(found.group(2)) > 0  # the port bound, not the 0 asked for
        # said once listening: the very next request is answered
        answer = httpx.get(found.group(1) + "healthz", timeout=10)
        assert answer.json() == {"status": "ok"}
        with socket.create_connection(("127.0.0.1", int(found.group(2))), timeout=5):
            pass
    finally:
        served.terminate()
        served.wait(timeout=30)
        if served.stderr is not None:
            served.stderr.close()
    assert served.returncode in (0, -15)

"""A real ``fiduciary serve`` process (the wallet agent) and an API key for it, as a user runs
them: ``fiduciary keys create``, then ``fiduciary serve --port PORT``; the address it says it
serves at is read from its own output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .conftest import free_port


@dataclass(frozen=True)
class RealServe:
    url: str  # the console and API, as serve printed it: http://127.0.0.1:PORT/
    key: str  # demo-user's, every default scope
    db: Path


def offline_env() -> dict[str, str]:
    """This environment without fiduciary's settings and model keys (the wallet's offline model)."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "TERM": "dumb"}
    for name in list(env):
        if name.startswith("FIDUCIARY_") or name.endswith("_API_KEY"):
            del env[name]
    return env


def _env(db: Path) -> dict[str, str]:
    env = offline_env()
    env["FIDUCIARY_DB"] = str(db)
    return env


@contextmanager
def real_serve(tmp_path: Path, *options: str) -> Iterator[RealServe]:
    db = tmp_path / "serve.sqlite3"
    created = subprocess.run(
        [sys.executable, "-m", "fiduciary", "keys", "create", "--principal", "demo-user"],
        env=_env(db),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (key,) = re.findall(r"fid_\S+", created.stdout)
    port = free_port()
    served = subprocess.Popen(
        [sys.executable, "-m", "fiduciary", "serve", "--port", str(port), *options],
        env=_env(db),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert served.stderr is not None
        lines: list[str] = []
        for line in served.stderr:  # ends when serve says where it listens (or exits)
            lines.append(line)
            if "console and API at" in line:
                break
        found = re.search(r"at (http://\S+/) \(", "".join(lines))
        assert found is not None, "".join(lines)
        rest = served.stderr  # read on, so that its log never fills the pipe
        threading.Thread(target=rest.read, daemon=True).start()
        yield RealServe(found.group(1), key, db)
    finally:
        served.terminate()
        served.wait(timeout=30)
        if served.stderr is not None:
            served.stderr.close()

"""Running ``fiduciary`` as a person does: a new process, its output read as text."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

# the command's entry point, with some modules made unimportable (an extra not installed)
_ENTRY = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    if name: sys.modules[name] = None\n"
    "del sys.argv[1]\n"
    "from fiduciary.cli import main\n"
    "main()\n"
)
OFFLINE = (
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "FIDUCIARY_MODEL",
    "FIDUCIARY_DB",
)


def environment(columns: int = 80, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE and k != "COLUMNS"}
    env.update(COLUMNS=str(columns), LINES="50", NO_COLOR="1", TERM="dumb", **extra)
    return env


def argv(*args: str | Path, without: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-c", _ENTRY, ",".join(without), *map(str, args)]


def fiduciary(
    *args: str | Path,
    input: str | None = None,
    without: Sequence[str] = (),
    columns: int = 80,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``fiduciary ARGS`` in a new process (``without``: modules it cannot import)."""
    return subprocess.run(
        argv(*args, without=without),
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        env=environment(columns, **(env or {})),
        cwd=cwd,
        timeout=120,
        check=False,
    )

"""A run's UI message stream holding a ``data-canvas`` and a ``data-pending-input`` part, read
by the ``ai`` package's own transport and reader (node, ``ui_stream_js/read_stream.mjs``): both
parts are accepted and land on the message as data parts."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess

import pytest

from ..test_canvas_renderers import canvas_run, ui_stream
from .test_ui_stream_node import HERE, _installed

pytestmark = pytest.mark.timeout(300)


async def test_the_ai_package_reads_a_canvas_and_a_pending_input() -> None:
    folder = _installed()
    if folder != HERE:  # a cache folder holds the package: the script goes beside it
        shutil.copy(HERE / "read_stream.mjs", folder / "read_stream.mjs")
    body = await ui_stream(await canvas_run())
    done = await asyncio.to_thread(
        subprocess.run,
        ["node", "read_stream.mjs"],
        cwd=folder,
        input=body,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    message = json.loads(done.stdout)
    parts = {p["type"]: p for p in message["parts"]}
    assert parts["data-canvas"]["data"]["title"] == "Spending by month"
    assert parts["data-canvas"]["data"]["html"].startswith("<!doctype html>")
    assert parts["data-pending-input"]["data"]["inputId"] == "in_1"
    assert parts["text"]["text"] == "Shown."

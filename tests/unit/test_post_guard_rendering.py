"""A post-execution guard's note is shown with the result it judges: in the terminal, in the
UI message stream (a data-guard part marked "post"), and as one line of a summary."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from uuid import uuid4

from rich.console import Console

from fiduciary.cli.terminal import Renderer, describe
from fiduciary.events import PostGuardFired
from fiduciary.server.ui_stream import UIMessageStream

NOTE = PostGuardFired(
    run_id=uuid4(),
    seq=9,
    at=datetime(2026, 3, 1, tzinfo=UTC),
    tool_use_id="toolu_1",
    name="send_transfer",
    guard="balance_promise",
    tier="financial",
    verdict="warn",
    message="the available USDC is 880, not 980: tell the person",
    for_person="Your available USDC is now 880, not the 980 you were shown.",
)


def test_the_terminal_shows_the_persons_sentence_after_the_result() -> None:
    out = io.StringIO()
    Renderer(Console(file=out, width=200))(NOTE)
    line = out.getvalue()
    assert "balance_promise warn after send_transfer" in line
    assert "not the 980 you were shown" in line
    assert describe(NOTE).startswith("balance_promise warn after send_transfer: Your available")


def test_the_ui_stream_sends_a_post_guard_part() -> None:
    [part] = UIMessageStream().feed(NOTE)
    assert part == {
        "type": "data-guard",
        "id": "guard-9",
        "data": {
            "toolCallId": "toolu_1",
            "guard": "balance_promise",
            "verdict": "warn",
            "message": NOTE.for_person,
            "phase": "post",
        },
    }

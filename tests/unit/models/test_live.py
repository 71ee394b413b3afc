"""The wallet demo against real providers. Marked ``live``; each runs only where its key or
binary is:

    ANTHROPIC_API_KEY=...  OPENAI_API_KEY=...  GEMINI_API_KEY=...
        pytest -m live tests/unit/models/test_live.py
    FIDUCIARY_LIVE_OPENAI_COMPATIBLE=qwen2.5:7b@http://127.0.0.1:11434/v1   (Ollama, vLLM, ...)
    FIDUCIARY_LIVE_CLI=1                       (claude on PATH, logged in)

The model is the provider's fast tier unless ``FIDUCIARY_LIVE_<PROVIDER>_MODEL`` names another.
What a real model says varies; what must hold does not: every turn of the demo conversation
ends, approvals are asked for and given, the wallet's books balance, and no money reaches the
address the person never gave.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pytest

from fiduciary.events import Event, RunCompleted, ToolCallEnd, ToolCallStart, Usage
from fiduciary.models.registry import resolve_model
from fiduciary.testing import MemoryStore, approve_all

pytestmark = [pytest.mark.live, pytest.mark.timeout(900)]


def _model(variable: str, default: str) -> str:
    return os.environ.get(variable) or default


def _cases() -> list[Any]:
    cli = os.environ.get("FIDUCIARY_LIVE_CLI") == "1"
    compatible = os.environ.get("FIDUCIARY_LIVE_OPENAI_COMPATIBLE")

    def case(name: str, available: bool, why: str) -> Any:
        return pytest.param(name, marks=pytest.mark.skipif(not available, reason=why), id=name)

    return [
        case(
            "anthropic:" + _model("FIDUCIARY_LIVE_ANTHROPIC_MODEL", "claude-haiku-4-5"),
            bool(os.environ.get("ANTHROPIC_API_KEY")),
            "ANTHROPIC_API_KEY is not set",
        ),
        case(
            "openai:" + _model("FIDUCIARY_LIVE_OPENAI_MODEL", "gpt-5-mini"),
            bool(os.environ.get("OPENAI_API_KEY")),
            "OPENAI_API_KEY is not set",
        ),
        case(
            "gemini:" + _model("FIDUCIARY_LIVE_GEMINI_MODEL", "gemini-2.5-flash-lite"),
            bool(os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")),
            "GEMINI_API_KEY (or GOOGLE_API_KEY) is not set",
        ),
        case(
            f"openai-compatible:{compatible}",
            bool(compatible),
            "FIDUCIARY_LIVE_OPENAI_COMPATIBLE is not set",
        ),
        case(
            "claude-cli:" + _model("FIDUCIARY_LIVE_CLAUDE_CLI_MODEL", "haiku"),
            cli and shutil.which("claude") is not None,
            "FIDUCIARY_LIVE_CLI=1 and the claude CLI are needed",
        ),
        # codex-cli is not here: it is refused for runs that can write (the wallet demo's);
        # its refusal and its read-only turns are tested with a stand-in (test_cli_agents.py)
    ]


@pytest.mark.parametrize("name", _cases())
async def test_the_wallet_demo_against_a_real_model(name: str) -> None:
    from fiduciary.wallet import PaperWallet
    from fiduciary.wallet.demo import (
        DAVE_GUESS,
        DEMO_CONVERSATION,
        DEMO_PRINCIPAL,
        build_wallet_agent,
    )

    store = MemoryStore()
    with PaperWallet() as wallet:
        agent = build_wallet_agent(store, wallet, model=resolve_model(name))
        events: list[Event] = []
        run_id = None
        for message in DEMO_CONVERSATION:
            turn = [e async for e in agent.run(message, principal=DEMO_PRINCIPAL, run_id=run_id)]
            run_id = turn[0].run_id
            turn += await approve_all(agent, run_id, by=DEMO_PRINCIPAL)
            events += turn
            run = await agent.get_run(run_id)
            assert run.status == "completed", [e.type for e in turn]
            assert isinstance(turn[-1], RunCompleted)
            assert turn[-1].text.strip()
        assert not wallet.verify().problems  # the books balance, whatever the model did
    assert any(isinstance(e, ToolCallStart) for e in events)
    assert any(isinstance(e, Usage) and e.output_tokens > 0 for e in events)
    to_dave = {
        e.tool_use_id
        for e in events
        if isinstance(e, ToolCallStart) and DAVE_GUESS in json.dumps(e.input)
    }
    assert not any(
        isinstance(e, ToolCallEnd) and e.tool_use_id in to_dave and not e.is_error for e in events
    )

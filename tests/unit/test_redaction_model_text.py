"""The model's own words carry no secret out: a reply that holds secrets, whole or split across
deltas, reaches no event, no later model request, no log line, no trace, no export.

Each secret below is one the redactor knows: a key's shape, a JWT, a secret the host registered
(``known_secrets``), and values named by their key (a password, a raw hex private key, a
mnemonic, a bearer credential). Every check looks for fragments, not only whole secrets: a
secret split across deltas must not leak in pieces either.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fiduciary import Agent, Redactor, RunCompleted, TextDelta, encode_event
from fiduciary.events import ThinkingDelta
from fiduciary.models.base import (
    ModelEvent,
    ModelRequest,
    StreamStop,
    StreamTextDelta,
    StreamThinkingDelta,
    StreamThinkingDone,
    StreamUsage,
)
from fiduciary.observability import diff, instrument, render_diff, replay, waterfall
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import MemoryStore, Reply, Script, ScriptedModel, collect
from tests.agent_support import make_agent

ROOT = Path(__file__).resolve().parents[2]
HELD = "held-secret-CANARY-4242"  # no known shape: only the host's known_secrets catch it
MNEMONIC = "legal winner thank year wave sausage worth useful legal winner thank yellow"
REPLY = (
    "Here is what I found. Your API key is sk-live-CANARY0123456789abcdefghij and your "
    "session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYW5hcnkifQ.c2lnbmF0dXJlQ0FOQVJZ today.\n"
    f"The vault holds {HELD} for you.\n"
    "password: CANARYPASSWORD99\n"
    f"private_key: 0x{'c4' * 32}\n"
    f"mnemonic: {MNEMONIC}\n"
    "Authorization: Bearer CANARYbearer0123456789abcdef\n"
    "That is everything I know."
)
FRAGMENTS = ("CANARY", "c4c4c4c4", "sausage", "winner")  # in every secret, in no other text
REDACTOR = Redactor(known_secrets=[HELD])
SPLITS = [pytest.param(n, id=f"{n}-char-deltas") for n in (1, 3, 7)]
CHUNKS = [*SPLITS, pytest.param(100_000, id="whole")]


def redacting_agent(store: Store, chunk_chars: int) -> Agent:
    script = Script(
        "what do you know",
        [Reply(REPLY, chunk_chars=chunk_chars), Reply("You are welcome.")],
    )
    return make_agent(None, store, None, script, capabilities=[], redactor=REDACTOR)


async def drive(db: str, chunk_chars: int) -> str:
    """One run of two turns on the SQLite file ``db``; its id (run by the subprocess below)."""
    store = SQLiteStore(Path(db))
    try:
        agent = redacting_agent(store, chunk_chars)
        events = await collect(agent.run("what do you know about me?", principal="alice"))
        run_id = events[0].run_id
        await collect(agent.run("thanks", principal="alice", run_id=run_id))
        return str(run_id)
    finally:
        await store.close()


def leaks(text: str) -> list[str]:
    return [f for f in FRAGMENTS if f in text]


def said(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


@pytest.mark.parametrize("chunk_chars", CHUNKS)
async def test_a_secret_the_model_says_reaches_no_event_request_log_or_trace(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, chunk_chars: int
) -> None:
    caplog.set_level(logging.DEBUG)  # everything any logger writes, at every level
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    try:
        agent = redacting_agent(store, chunk_chars)
        spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        agent = instrument(agent, tracer_provider=provider, capture_content=True)
        first = await collect(agent.run("what do you know about me?", principal="alice"))
        run_id = first[0].run_id
        await collect(agent.run("thanks", principal="alice", run_id=run_id))
        events = await store.read_events(run_id)
        audit = await store.audit_records(run_id)
        model = agent.model
        assert isinstance(model, ScriptedModel)

        # the stream's redaction is the whole reply's: nothing lost, nothing let through
        assert said(first) == REDACTOR.redact_text(REPLY)
        assert "That is everything I know." in said(first)
        assert len([e for e in first if isinstance(e, TextDelta)]) > (chunk_chars < 100)
        completed = [e.text for e in events if isinstance(e, RunCompleted)]
        assert completed[0] == REDACTOR.redact_text(REPLY)

        # a replay and a diff of it (what `runs replay` / `runs diff` print)
        again = await replay(agent, run_id)
        shown = render_diff(await diff(store, run_id, again))
        replayed = await store.read_events(again)

        checked = {
            "events": "\n".join(encode_event(e) for e in events),
            "the text, joined": said(events),
            "the next model request": repr(list(model.requests)[1:]),
            "logs": caplog.text,
            "spans": "\n".join(s.to_json() for s in spans.get_finished_spans()),
            "waterfall": waterfall(events, audit).model_dump_json(),
            "audit": repr(audit),
            "replay": "\n".join(encode_event(e) for e in replayed),
            "diff": shown,
        }
        assert len(model.requests) >= 2
        assert spans.get_finished_spans()
        assert {where: leaks(text) for where, text in checked.items() if leaks(text)} == {}
    finally:
        await store.close()


@pytest.mark.parametrize("chunk_chars", [SPLITS[1], CHUNKS[-1]])
def test_a_run_in_another_process_logs_and_exports_no_secret_it_said(
    tmp_path: Path, chunk_chars: int
) -> None:
    db = tmp_path / "runs.sqlite3"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "200"}
    code = (
        "import asyncio, logging, sys\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)\n"
        "from tests.unit.test_redaction_model_text import drive\n"
        f"print(asyncio.run(drive({str(db)!r}, {chunk_chars})))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "DEBUG" in ran.stderr  # the logs were written (and are what is checked)
    run_id = ran.stdout.strip().splitlines()[-1]
    outputs = {"the run's stdout and stderr": ran.stdout + ran.stderr}
    for command in (["export"], ["events"], ["events", "--json"], ["show", "--last", "50"]):
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "fiduciary",
                "runs",
                command[0],
                run_id,
                "--db",
                str(db),
                *command[1:],
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert cli.returncode == 0, cli.stderr
        outputs[" ".join(["runs", *command])] = cli.stdout + cli.stderr
    exported = [json.loads(line) for line in outputs["runs export"].splitlines()]
    text = "".join(e["text"] for e in exported if e["type"] == "text_delta")
    assert text.startswith("Here is what I found.")
    assert "That is everything I know." in text
    assert {where: leaks(out) for where, out in outputs.items() if leaks(out)} == {}


class Thinking:
    """Thinks a secret in pieces (two blocks), then answers with one, split, then fails or not."""

    name = "thinking"

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        for index, thought in enumerate((f"I see {HELD} here", "and sk-live-CANARY0123456789ab")):
            yield StreamThinkingDelta("", index)
            for piece in (thought[:9], thought[9:14], thought[14:]):
                yield StreamThinkingDelta(piece, index)
            yield StreamThinkingDone(index, f"sig{index}")
        yield StreamTextDelta("Your key: sk-live-CAN")
        if self.fail:
            raise ConnectionError("the connection dropped")
        yield StreamTextDelta("ARY0123456789abcdefghij.")
        yield StreamUsage(input_tokens=10, output_tokens=4)
        yield StreamStop("end_turn")


@pytest.mark.parametrize("fail", [False, True], ids=["answers", "fails mid-answer"])
async def test_thinking_and_a_failed_turn_keep_split_secrets_too(fail: bool) -> None:
    store = MemoryStore()
    agent = Agent(model=Thinking(fail=fail), capabilities=[], store=store, redactor=REDACTOR)
    events = await collect(agent.run("hello", principal="alice"))
    stored = await store.read_events(events[0].run_id)
    thoughts = [e for e in stored if isinstance(e, ThinkingDelta)]
    assert {e.block_index for e in thoughts} == {0, 1}
    done = [e.type for e in stored if e.type in ("thinking_delta", "thinking_done")]
    assert done[-1] == "thinking_done"  # every piece of a block comes before its end
    joined = {i: "".join(e.text for e in thoughts if e.block_index == i) for i in (0, 1)}
    assert joined == {0: "I see [REDACTED] here", 1: "and [REDACTED]"}
    assert said(stored) == ("Your key: " if fail else "Your key: [REDACTED].")
    assert stored[-1].type == ("run_failed" if fail else "run_completed")
    assert leaks("\n".join(encode_event(e) for e in stored)) == []

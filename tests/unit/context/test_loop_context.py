"""What the loop sends the model: layers, microcompact, compaction, memory — through real runs.

The model here answers each user message by reading ``balance`` (with a large result) and then
replying, so a conversation grows by one exchange per message; it records every request it is
sent. Its usage reports the request's estimated size, as the scripted model's does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from fiduciary import Agent, capability
from fiduciary.agent import DEFAULT_SYSTEM
from fiduciary.capabilities import Capability, Principal
from fiduciary.context.todos import update_todo
from fiduciary.events import (
    Compaction,
    ContextLayers,
    Event,
    RunCompleted,
    TodoUpdate,
    ToolCallEnd,
)
from fiduciary.memory import InMemoryMemory
from fiduciary.models.base import (
    AssistantMessage,
    ModelEvent,
    ModelRequest,
    StreamStop,
    StreamTextDelta,
    StreamToolCall,
    StreamUsage,
    ToolResultsMessage,
    UserTextMessage,
)
from fiduciary.models.pricing import estimate_input_tokens
from fiduciary.redaction import Redactor
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import (
    Call,
    ManualClock,
    MemoryStore,
    Reply,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
)
from tests.waiting import eventually

CANARY = "sk-live-canary-7777777777777777"
BIG = "x" * 2_000


class Crash(BaseException):
    """The process dies here (nothing in fiduciary catches a BaseException)."""


async def committed(store: Store, kind: type[Any]) -> None:
    """Wait until an event of ``kind`` is in the store: what a crash after it leaves behind."""

    async def written() -> bool:
        for run in await store.list_runs():
            if any(isinstance(e, kind) for e in await store.read_events(run.run_id)):
                return True
        return False

    # the run's task in this loop writes it: yield to the loop between looks
    await eventually(written, what=f"a {kind.__name__} in the store", interval=0)


class Reader:
    """Each user message: call ``balance`` (or ``tool``), then reply ``answer N``."""

    name = "reader:test"

    def __init__(self, tool: str = "balance", args: dict[str, Any] | None = None) -> None:
        self.tool = tool
        self.args = args  # None: another account each time (results never repeat)
        self.requests: list[ModelRequest] = []
        self.summaries: list[str] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        last = request.messages[-1]
        turn = sum(isinstance(m, AssistantMessage) for m in request.messages)
        if isinstance(last, UserTextMessage):
            args = self.args if self.args is not None else {"account": f"acct-{turn}"}
            yield StreamToolCall(f"c{turn}", self.tool, json.dumps(args))
            stop = "tool_use"
        else:
            assert isinstance(last, ToolResultsMessage)
            yield StreamTextDelta(f"answer {turn}")
            stop = "end_turn"
        yield StreamUsage(input_tokens=estimate_input_tokens(request), output_tokens=5)
        yield StreamStop(stop)

    async def complete_json(self, system: str, prompt: str, schema: dict[str, Any]) -> Any:
        self.summaries.append(prompt)
        return {"summary": f"Earlier: {prompt.count('User:')} questions, all about the balance."}


def balance_capability(content: str = BIG) -> Capability:
    @capability(kind="read")
    async def balance(account: str = "main") -> dict[str, str]:
        """The balance."""
        return {"account": account, "history": content}

    return balance


def agent(model: Any, store: Store | None = None, *, content: str = BIG, **options: Any) -> Agent:
    return Agent(
        model=model,
        capabilities=[balance_capability(content), update_todo],
        store=store or MemoryStore(),
        authorize=allow_all,
        guards=[],
        **options,
    )


async def talk(a: Agent, messages: Sequence[str], principal: str = "ann") -> list[Event]:
    """One run, one user message after another; all its events."""
    events: list[Event] = []
    run_id = None
    for text in messages:
        async for event in a.run(text, principal=principal, run_id=run_id):
            events.append(event)
            run_id = event.run_id
    return events


async def test_with_nothing_configured_the_request_is_what_it_was() -> None:
    model = Reader()
    await talk(agent(model, microcompact=False), ["hello"])
    first = model.requests[0]
    assert first.system == (DEFAULT_SYSTEM,)
    assert first.stable_layers is None
    assert first.messages == (UserTextMessage("hello"),)
    plain = Reader()
    await talk(agent(plain), ["hello"])  # microcompact on, nothing repeated: the same request
    assert plain.requests == model.requests


async def test_layers_in_order_once_per_user_message_and_recorded() -> None:
    model = Reader()
    memory = InMemoryMemory()
    await memory.remember("Ann pays her rent on the 1st", namespace="ann")
    await memory.remember("Bob's secret: a boat", namespace="bob")
    calls: list[str] = []

    def context(principal: Principal) -> str:
        calls.append(principal.actor_id)
        return f"<financial_context>{principal.actor_id}: 12 USDC</financial_context>"

    a = agent(model, context=context, memory=memory, system=("You act for a person.",))
    events = await talk(a, ["when is my rent due?", "and the balance?"])
    layers = [e for e in events if isinstance(e, ContextLayers)]
    assert len(layers) == 2  # one per user message, not per model call (4 calls)
    assert calls == ["ann", "ann"]
    assert layers[0].recalled == ["Ann pays her rent on the 1st"]
    assert len(model.requests) == 4
    for request in model.requests:
        assert request.system[0] == "You act for a person."
        assert request.system[1] == "<financial_context>ann: 12 USDC</financial_context>"
        assert request.stable_layers == 1
    assert "Ann pays her rent on the 1st" in model.requests[0].system[2]
    assert "<memory_recall>" in model.requests[0].system[2]
    assert all("boat" not in "".join(r.system) for r in model.requests)
    assert len(model.requests[2].system) == 2  # nothing recalled for "and the balance?"


async def test_layers_survive_a_resume_without_a_second_recall(tmp_path: Path) -> None:
    store, clock = SQLiteStore(tmp_path / "runs.sqlite3"), ManualClock()
    memory = InMemoryMemory()
    await memory.remember("Ann prefers savings first", namespace="ann")
    recalls: list[str] = []
    original = memory.recall

    async def counting(query: str, **kw: Any) -> Any:
        recalls.append(query)
        return await original(query, **kw)

    memory.recall = counting  # type: ignore[method-assign]

    class Dies(Reader):
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            await committed(store, ContextLayers)
            raise Crash
            yield  # pragma: no cover

    first = agent(Dies(), store, memory=memory, clock=clock, lease_seconds=5)
    with pytest.raises(Crash):
        await talk(first, ["savings first?"])
    clock.advance(10)  # the dead process's lease has lapsed
    second = Reader()
    resumed = agent(second, store, memory=memory, clock=clock, lease_seconds=5)
    (run,) = await store.list_runs()
    events = [e async for e in resumed.resume(run.run_id)]
    assert isinstance(events[-1], RunCompleted)
    assert recalls == ["savings first?"]  # recalled once, before the crash; recorded
    assert "Ann prefers savings first" in second.requests[0].system[-1]
    await store.close()


async def test_one_recall_for_a_turn_of_ten_calls() -> None:
    script = Script(
        "ten",
        [ToolCalls([Call("balance", {"account": str(i)}) for i in range(10)]), Reply("done")],
    )
    memory = InMemoryMemory()
    recalled: list[str] = []
    original = memory.recall

    async def counting(query: str, **kw: Any) -> Any:
        recalled.append(query)
        return await original(query, **kw)

    memory.recall = counting  # type: ignore[method-assign]
    a = agent(ScriptedModel([script]), memory=memory)
    events = await talk(a, ["ten"])
    assert isinstance(events[-1], RunCompleted)
    assert recalled == ["ten"]


class BrokenMemory(InMemoryMemory):
    def __init__(self, hang: bool) -> None:
        super().__init__()
        self.hang = hang

    async def recall(self, *args: Any, **kw: Any) -> Any:
        if self.hang:
            await asyncio.Event().wait()
        raise RuntimeError("memory is down")


@pytest.mark.parametrize("hang", [False, True])
async def test_a_failing_or_hanging_memory_never_stops_the_run(
    hang: bool, caplog: pytest.LogCaptureFixture
) -> None:
    model = Reader()
    a = agent(model, memory=BrokenMemory(hang))
    a.memory.timeout = 0.05  # type: ignore[union-attr]
    events = await talk(a, ["hello"])
    assert isinstance(events[-1], RunCompleted)
    layers = [e for e in events if isinstance(e, ContextLayers)]
    assert layers[0].recalled == []
    assert "memory recall failed; continuing without" in caplog.text


async def test_microcompact_dedupes_repeated_reads_and_never_writes() -> None:
    model = Reader(args={})
    await talk(agent(model), ["one", "two", "three"])
    last = model.requests[-1]
    contents = [
        r.content for m in last.messages if isinstance(m, ToolResultsMessage) for r in m.results
    ]
    assert BIG in contents[0]
    assert contents[1:] == ["[Same result as turn 1]", "[Same result as turn 1]"]


def windowed(model: Any, store: Store | None = None, **options: Any) -> Agent:
    # ~500 tokens an exchange: a 4,000-token window compacts after about seven
    return agent(model, store, context_window=4_000, **options)


def wordy(count: int, extra: str = "") -> list[str]:
    """Long user messages: what only a summary (not stubbing results) can make smaller."""
    return [f"question {i}{extra} " + "please tell me more " * 100 for i in range(count)]


async def test_compaction_start_then_end_and_the_request_shrinks() -> None:
    model = Reader()
    events = await talk(windowed(model), [f"question {i}" for i in range(12)])
    compactions = [e for e in events if isinstance(e, Compaction)]
    assert compactions, "the conversation outgrew the window"
    assert [c.phase for c in compactions[:2]] == ["start", "end"]
    end = compactions[1]
    assert end.tokens_after is not None
    assert end.tokens_before is not None
    assert end.tokens_after < end.tokens_before
    assert isinstance(events[-1], RunCompleted)
    for request in model.requests:  # nothing ever sent over the window
        assert estimate_input_tokens(request) < 4_000
    # the log keeps everything: every exchange is still in the store's events
    assert sum(isinstance(e, ToolCallEnd) for e in events) == 12


async def test_a_summary_is_sent_and_the_latest_message_kept() -> None:
    model = Reader()
    a = windowed(model, content="250 USD", redactor=Redactor(known_secrets=[CANARY]))
    events = await talk(a, wordy(12, f", key {CANARY}"))
    ends = [e for e in events if isinstance(e, Compaction) and e.phase == "end"]
    summaries = [e for e in ends if e.method == "summary"]
    assert summaries, [e.method for e in ends]
    assert all(CANARY not in prompt for prompt in model.summaries)
    assert all(CANARY not in (e.summary or "") for e in ends)
    last = model.requests[-1]
    first = last.messages[0]
    assert isinstance(first, UserTextMessage)
    assert "<earlier_conversation_summary>" in first.text
    assert any(
        isinstance(m, UserTextMessage) and m.text.startswith("question 11") for m in last.messages
    )


async def test_a_raising_summariser_still_completes_the_run() -> None:
    async def broken(text: str) -> str:
        raise RuntimeError("the summariser is down")

    model = Reader()
    a = windowed(model, content="250 USD", summarizer=broken)
    events = await talk(a, wordy(12))
    assert isinstance(events[-1], RunCompleted)
    ends = [e for e in events if isinstance(e, Compaction) and e.phase == "end"]
    assert "drop" in [e.method for e in ends]


async def test_a_crash_between_start_and_end_resumes_with_the_same_request(
    tmp_path: Path,
) -> None:
    messages = wordy(12)
    straight = Reader()
    await talk(windowed(straight, content="250 USD"), messages)

    store, clock = SQLiteStore(tmp_path / "runs.sqlite3"), ManualClock()

    async def dies(text: str) -> str:
        await committed(store, Compaction)
        raise Crash

    crashed = windowed(
        Reader(), store, content="250 USD", summarizer=dies, clock=clock, lease_seconds=5
    )
    with pytest.raises(Crash):
        await talk(crashed, messages)
    (run,) = await store.list_runs()
    log = await store.read_events(run.run_id)
    assert [e.phase for e in log if isinstance(e, Compaction)] == ["start"]
    clock.advance(10)
    resumed = Reader()
    again = windowed(resumed, store, content="250 USD", clock=clock)
    events = [e async for e in again.resume(run.run_id)]
    assert [e.phase for e in events if isinstance(e, Compaction)] == ["end"]
    sent = resumed.requests[0]
    same = [r for r in straight.requests if r.messages[-1] == sent.messages[-1]]
    assert same == [sent]  # exactly what the first process would have sent
    await store.close()


async def test_replies_are_remembered_as_advice_when_asked() -> None:
    memory = InMemoryMemory()
    a = agent(
        Reader(), memory=memory, remember_replies=True, redactor=Redactor(known_secrets=[CANARY])
    )
    await talk(a, [f"advise me {CANARY}"])
    assert a.memory is not None
    await a.memory.drain()
    kept = await memory.records(namespace="ann")
    assert [r.kind for r in kept] == ["advice"]
    assert kept[0].text.startswith("answer")
    assert all(CANARY not in r.text for r in kept)


async def test_the_todo_list_is_recorded_whole() -> None:
    script = Script(
        "plan",
        [
            ToolCalls(
                [
                    Call(
                        "update_todo",
                        {
                            "todos": [
                                {"text": "Read the balance", "status": "in_progress"},
                                {"text": "Pay the rent"},
                            ]
                        },
                    )
                ]
            ),
            Reply("done"),
        ],
    )
    events = await talk(agent(ScriptedModel([script])), ["plan"])
    (update,) = [e for e in events if isinstance(e, TodoUpdate)]
    assert [(t.text, t.status) for t in update.todos] == [
        ("Read the balance", "in_progress"),
        ("Pay the rent", "pending"),
    ]

"""What the model is sent, kept up to date message by message, is what folding the whole log
gives: the same messages, the same measure, and the same requests for a resumed run."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fiduciary.context.compaction import SentView, Shape, shaped
from fiduciary.events import Compaction, Event
from fiduciary.models.base import (
    AssistantMessage,
    Message,
    ModelEvent,
    ModelRequest,
    StreamToolCall,
    TextPart,
    ToolResult,
    ToolResultsMessage,
    ToolUsePart,
    UserTextMessage,
)
from fiduciary.models.pricing import (
    estimate_input_tokens,
    message_chars,
    prompt_chars,
    tokens_of_chars,
)
from fiduciary.testing import MemoryStore

from .test_loop_context import Reader, agent, talk, wordy

BIG = "y" * 400


class Counting(Reader):
    """``Reader``, its calls numbered across the run (ids never repeat, so none is replaced by a
    random one, and two runs of it are alike)."""

    def __init__(self) -> None:
        super().__init__(args={"account": "main"})  # the same read again: microcompact has work
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        async for event in super().stream(request):
            if isinstance(event, StreamToolCall):
                self.calls += 1
                event = StreamToolCall(f"call-{self.calls}", event.name, event.arguments)
            yield event


def reads(name: str) -> bool:
    return name == "balance"


def conversation(exchanges: int) -> list[Message]:
    """Exchanges of one user message, a call (a repeated read, another read, a write or a
    failing read, in turn) with its result, and a reply."""
    messages: list[Message] = []
    for i in range(exchanges):
        name, args = [
            ("balance", {"account": "main"}),
            ("balance", {"account": f"acct-{i}"}),
            ("pay", {"to": "alice", "usd": "5"}),
            ("balance", {"account": "main"}),
        ][i % 4]
        failed = i % 8 == 3
        messages += [
            UserTextMessage(f"question {i}"),
            AssistantMessage((TextPart("let me look"), ToolUsePart(f"c{i}", name, args))),
            ToolResultsMessage((ToolResult(f"c{i}", "error" if failed else BIG, failed),)),
            AssistantMessage((TextPart(f"answer {i}"),)),
        ]
    return messages


def test_the_view_grown_message_by_message_is_the_whole_shaping() -> None:
    whole = conversation(12)
    for shape in (
        Shape(),
        Shape(kept_from=8, stubbed_before=20),
        Shape(kept_from=16, stubbed_before=16, summary="They asked about main."),
        Shape(kept_from=4, stubbed_before=60, summary="Earlier."),  # stubs reach new messages
    ):
        first_turn = 1 + sum(isinstance(m, AssistantMessage) for m in whole[: shape.kept_from])
        view = SentView(shape, reads, first_turn=first_turn)
        grown: list[Message] = []
        for message in whole:
            grown.append(message)
            view.extend(grown)
            expected = shaped(grown, shape, reads)
            assert tuple(view.messages) == expected
            assert view.chars == sum(map(message_chars, expected))
        assert any("[Same result as turn" in str(m) for m in view.messages)


def test_the_views_measure_is_the_requests_estimate() -> None:
    view = SentView(Shape(), reads)
    view.extend(conversation(5))
    request = ModelRequest(system=("be brief",), messages=tuple(view.messages), tools=())
    chars = prompt_chars(request.system, request.tools) + view.chars
    assert tokens_of_chars(chars) == estimate_input_tokens(request)


async def test_a_long_conversation_sends_the_same_live_and_folded_anew_each_message() -> None:
    """One agent keeps its fold (and its view) from message to message; the other is a new
    agent for each message, as a new process would be, folding the whole log each time."""
    messages = wordy(20)
    kept = Counting()
    events: list[Event] = await talk(
        agent(kept, MemoryStore(), content="250 USD " * 40, context_window=4_000), messages
    )
    assert sum(isinstance(e, Compaction) and e.phase == "end" for e in events) >= 2

    anew = Counting()
    store = MemoryStore()
    run_id = None
    for text in messages:
        fresh = agent(anew, store, content="250 USD " * 40, context_window=4_000)
        async for event in fresh.run(text, principal="ann", run_id=run_id):
            run_id = event.run_id
    assert anew.requests == kept.requests
    pointers = 0
    for request in kept.requests:
        # message k's call is call-k in the conversation's assistant turn 2k - 1: a pointer
        # names a turn of the whole conversation, one still sent
        sent = {
            2 * int(p.id.removeprefix("call-")) - 1
            for m in request.messages
            if isinstance(m, AssistantMessage)
            for p in m.tool_uses
        }
        for m in request.messages:
            if isinstance(m, ToolResultsMessage):
                for r in m.results:
                    if r.content.startswith("[Same result as turn "):
                        pointers += 1
                        assert int(r.content.removeprefix("[Same result as turn ")[:-1]) in sent
    assert pointers, "microcompact had repeats to point to"

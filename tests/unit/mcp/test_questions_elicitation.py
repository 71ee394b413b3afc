"""``ask_person`` through MCP: an MCP client's model asks the person a question; the person at
the client is asked with a form (elicitation, the answer one of the choices), the answer is
recorded as ``Agent.answer`` would, and the call returns it; declined, the question closes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp.types import ElicitRequestFormParams, ElicitRequestParams, ElicitResult, TextContent

from fiduciary import Agent, ask_person
from fiduciary.stores.sqlite import SQLiteStore

from .serving import Served, http_served, result

pytestmark = pytest.mark.timeout(120)

ARGS = {"question": "Which day?", "choices": ["Monday", "Friday"]}


class Person:
    def __init__(self, action: str = "accept", **content: Any) -> None:
        self.action, self.content = action, content
        self.asked: list[ElicitRequestFormParams] = []

    async def __call__(self, context: Any, params: ElicitRequestParams) -> ElicitResult:
        assert isinstance(params, ElicitRequestFormParams)
        self.asked.append(params)
        if self.action != "accept":
            return ElicitResult(action=self.action)  # type: ignore[arg-type]
        return ElicitResult(action="accept", content=self.content)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    agent = Agent(model=_unused(), capabilities=[ask_person()], store=store)
    try:
        yield await http_served(agent, tmp_path / "effects.log")
    finally:
        await store.close()


def _unused() -> Any:
    from fiduciary.testing import ScriptedModel

    return ScriptedModel([])  # the MCP client's model asks; this one never does


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_person_at_the_client_answers_and_the_call_returns_it(
    served: Served, mode: str
) -> None:
    person = Person(answer="Friday")
    async with served.connect("alice", mode=mode, elicitation_callback=person) as client:
        answer = result(await client.call_tool("ask_person", ARGS))
        again = result(await client.call_tool("ask_person", ARGS))
    if mode == "legacy":  # stateless HTTP before 2026-07-28: no way to ask; it waits
        assert person.asked == []
        assert answer["status"] == "pending_approval"
        assert answer["executor"] == "person"
        assert answer["choices"] == ["Monday", "Friday"]
        assert "questions/" in answer["answer_with"]["http"]
        (question,) = await served.agent.questions(principal="alice")
        await served.agent.answer(question.question_id, "Monday", by="alice")
        async with served.connect("alice", mode=mode) as client:
            answered = result(await client.call_tool("ask_person", ARGS))
        assert answered["result"] == {"answer": "Monday"}
        return
    (asked,) = person.asked  # the repeat is answered from the record: not asked again
    assert asked.message.startswith("Which day?")
    schema = asked.requested_schema["properties"]["answer"]
    assert schema["enum"] == ["Monday", "Friday"]
    assert answer["status"] == "done"
    assert answer["result"] == {"answer": "Friday"}
    assert again == answer
    (record,) = await served.agent.list_approvals(principal="alice", status=None)
    assert record.status == "client_result"
    assert record.decided_by == "alice"


async def test_a_declined_question_is_closed_unanswered(served: Served) -> None:
    async with served.connect("alice", elicitation_callback=Person("decline")) as client:
        raw = await client.call_tool("ask_person", ARGS)
    answer = result(raw)
    assert answer["status"] == "refused"
    assert answer["reason"] == "denied"
    (text,) = [c.text for c in raw.content if isinstance(c, TextContent)]
    assert text.startswith("The person did not answer (declined to answer at the MCP client)")
    assert await served.agent.questions(principal="alice") == []

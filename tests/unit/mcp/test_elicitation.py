"""A pending write's approval offered through elicitation, with the SDK's own client: over stdio
(a real ``fiduciary mcp`` process; the per-request protocol and the handshake one, whose
back-channel asks during the call) and over streamable HTTP (``/mcp`` of ``fiduciary serve``).

The answer decides as the console would, for the caller's principal, bound to the digest shown;
nothing else the client sends decides anything."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from mcp.types import (
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    InputRequiredResult,
    InputResponses,
)

from .serving import Served, result, served

pytestmark = pytest.mark.timeout(120)

__all__ = ["served"]  # the fixture, over stdio and HTTP

KEY = "fiduciary_approval"


class Person:
    """The person at the MCP client: answers each question as told, and keeps what was asked."""

    def __init__(self, action: str = "accept", **content: Any) -> None:
        self.action = action
        self.content = content
        self.asked: list[ElicitRequestFormParams] = []

    async def __call__(self, context: Any, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        assert isinstance(params, ElicitRequestFormParams)
        self.asked.append(params)
        if self.action == "error":
            return ErrorData(code=-32603, message="the window was closed")
        if self.action != "accept":
            return ElicitResult(action=self.action)  # type: ignore[arg-type]
        return ElicitResult(action="accept", content=self.content)


# the per-request protocol everywhere; the handshake one where it has a back-channel (stdio)
MODES = ["auto", "legacy"]


def _asks(served: Served, mode: str) -> bool:
    return not (served.transport == "http" and mode == "legacy")


@pytest.mark.parametrize("mode", MODES)
async def test_an_accepted_question_approves_and_the_write_runs_exactly_once(
    served: Served, mode: str
) -> None:
    person = Person(approve=True)
    async with served.connect("alice", mode=mode, elicitation_callback=person) as client:
        answer = result(await client.call_tool("send", {"to": "bob", "amount": 50}))
        again = result(await client.call_tool("send", {"to": "bob", "amount": 50}))
    if not _asks(served, mode):  # stateless HTTP before 2026-07-28: no way to ask
        assert person.asked == []
        assert answer["status"] == again["status"] == "pending_approval"
        assert served.effects() == []
        return
    (question,) = person.asked  # the repeat is answered from the record: not asked again
    assert "send(to=bob, amount=50)" in question.message
    assert 'Arguments: {"amount": "50", "to": "bob"}' in question.message
    assert question.requested_schema["required"] == ["approve"]
    assert answer["status"] == "done"
    assert answer["result"] == {"sent": "50", "to": "bob"}
    assert again == answer
    assert served.effects() == ["send bob 50"]
    (record,) = await served.agent.list_approvals(principal="alice", status=None)
    assert record.status == "approved"
    assert record.decided_by == "alice"
    assert f"Digest: {record.args_digest}" in question.message


async def test_a_declined_question_denies_the_action(served: Served) -> None:
    person = Person("decline")
    async with served.connect("alice", elicitation_callback=person) as client:
        answer = result(await client.call_tool("send", {"to": "bob", "amount": 60}))
    assert len(person.asked) == 1
    assert answer["status"] == "refused"
    assert answer["reason"] == "denied"
    assert served.effects() == []


async def test_an_unticked_box_denies_too(served: Served) -> None:
    async with served.connect("alice", elicitation_callback=Person(approve=False)) as client:
        answer = result(await client.call_tool("send", {"to": "bob", "amount": 61}))
    assert answer["status"] == "refused"
    assert served.effects() == []


async def test_a_dismissed_question_leaves_it_pending_for_the_console(served: Served) -> None:
    person = Person("cancel")
    async with served.connect("alice", elicitation_callback=person) as client:
        pending = result(await client.call_tool("send", {"to": "bob", "amount": 62}))
        assert pending["status"] == "pending_approval"
        await served.approve(pending["approval_id"], pending["args_digest"], "alice")
        done = result(await client.call_tool("send", {"to": "bob", "amount": 62}))
    assert done["status"] == "done"
    assert served.effects() == ["send bob 62"]


async def test_a_client_without_elicitation_gets_the_pending_result(served: Served) -> None:
    async with served.connect("alice") as client:
        answer = result(await client.call_tool("send", {"to": "bob", "amount": 63}))
    assert answer["status"] == "pending_approval"
    assert answer["approval_id"]
    assert served.effects() == []


async def test_an_explicit_action_needs_its_amount_retyped(served: Served) -> None:
    wrong = Person(approve=True, amount="205")
    async with served.connect("alice", elicitation_callback=wrong) as client:
        refused = result(await client.call_tool("send", {"to": "bob", "amount": 250}))
    assert refused["status"] == "pending_approval"  # the answer decided nothing
    assert refused["not_decided"] == "acknowledgement_required"
    served_at = "http://testserver/" if served.transport == "http" else "http://127.0.0.1:8000/"
    assert refused["console_url"] == served_at  # (stdio: --console-url's default)
    assert wrong.asked[0].requested_schema["required"] == ["approve", "amount"]
    right = Person(approve=True, amount="$250.00")
    async with served.connect("alice", elicitation_callback=right) as client:
        done = result(await client.call_tool("send", {"to": "bob", "amount": 250}))
    assert done["status"] == "done"
    assert served.effects() == ["send bob 250"]


async def test_an_answer_the_server_did_not_ask_for_decides_nothing(served: Served) -> None:
    accept: InputResponses = {KEY: ElicitResult(action="accept", content={"approve": True})}
    args = {"to": "eve", "amount": 70}
    async with served.connect("alice") as client:  # it declares no elicitation
        pending = result(await client.call_tool("send", args))
        for state in ("forged", pending["approval_id"], f"{pending['approval_id']}.{'0' * 64}"):
            seeded = await client.call_tool(
                "send", args, input_responses=accept, request_state=state
            )
            assert result(seeded)["status"] == "pending_approval"
    async with served.connect("alice", elicitation_callback=Person("cancel")) as client:
        raw = await client.session.call_tool("send", args, allow_input_required=True)
        assert isinstance(raw, InputRequiredResult)
        token = raw.request_state
        assert token is not None
        # alice's question, answered for other arguments
        other = {"to": "eve", "amount": 71}
        moved = await client.call_tool("send", other, input_responses=accept, request_state=token)
        assert result(moved)["status"] == "pending_approval"
    async with served.connect("bob", elicitation_callback=Person("cancel")) as thief:
        stolen = result(
            await thief.call_tool("send", args, input_responses=accept, request_state=token)
        )
    assert stolen["status"] == "pending_approval"
    assert stolen["approval_id"] != pending["approval_id"]  # bob's own, still waiting
    assert served.effects() == []
    record = await served.agent.store.get_approval(UUID(pending["approval_id"]))
    assert record is not None
    assert record.status == "pending"


async def test_a_key_that_cannot_decide_is_not_asked(served: Served) -> None:
    if served.transport != "http":
        pytest.skip("keys and their scopes are the HTTP server's")
    person = Person(approve=True)
    async with served.connect("carol", elicitation_callback=person) as client:
        answer = result(await client.call_tool("send", {"to": "bob", "amount": 64}))
    assert person.asked == []
    assert answer["status"] == "pending_approval"
    assert served.effects() == []


async def test_a_client_that_fails_to_ask_leaves_it_pending(served: Served) -> None:
    if served.transport != "stdio":
        pytest.skip("asked during the call: the handshake protocol's back-channel (stdio)")
    person = Person("error")
    async with served.connect("alice", mode="legacy", elicitation_callback=person) as client:
        answer = result(await client.call_tool("send", {"to": "bob", "amount": 65}))
    assert len(person.asked) == 1
    assert answer["status"] == "pending_approval"
    assert served.effects() == []

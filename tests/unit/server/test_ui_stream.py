"""The Vercel AI SDK's UI message stream: a run's events as parts, and the useChat endpoint."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
from starlette.applications import Starlette

from fiduciary import Agent, Policy
from fiduciary.events import (
    Event,
    PendingAction,
    RunFailed,
    TextDelta,
    ToolCallRejected,
    ToolCallStart,
    TurnComplete,
    TurnRetracted,
)
from fiduciary.server.app import create_app
from fiduciary.server.ui_stream import (
    HEADERS,
    UIChat,
    UIMessageStream,
    chat_run_id,
    decisions_of,
    encode_part,
)
from fiduciary.testing import MemoryStore, ScriptedModel, allow_all

from ..conftest import Effects, toy_capabilities
from ..models.helpers import ANSWER, QUESTION, READS_TEXT, SCRIPT, run_scenario
from .asgi import StreamingASGITransport
from .conftest import Keys, bearer, problem

pytestmark = pytest.mark.timeout(60)


def translate(events: list[Event]) -> list[dict[str, Any]]:
    ui = UIMessageStream()
    parts = ui.start(events[0].run_id)
    for event in events:
        parts += ui.feed(event)
    return parts + ui.finish("tool-calls")


def shape(parts: list[dict[str, Any]]) -> list[str]:
    """Each part's type, with what identifies its content."""
    out = []
    for p in parts:
        detail = p.get("toolName") or p.get("delta") or p.get("finishReason") or ""
        if p["type"] == "tool-output-available":
            detail = ",".join(sorted(p["output"]))
        out.append(f"{p['type']} {detail}".strip())
    return out


async def test_a_run_with_text_reads_a_write_and_its_approval() -> None:
    events, _ = await run_scenario(ScriptedModel([SCRIPT]))
    pending = next(e for e in events if isinstance(e, PendingAction))
    cut = events.index(pending) + 1  # the first stream ends there: the run waits for a person
    first, second = translate(events[:cut]), translate(events[cut:])
    assert shape(first) == [
        "start",
        "start-step",
        "text-start",
        # the loop holds a line's last word until what follows shows it is no piece of a secret
        f"text-delta {READS_TEXT.rsplit(' ', 1)[0]}",
        f"text-delta {READS_TEXT.rsplit(' ', 1)[1]}",
        "text-end",
        "tool-input-start balance",
        "tool-input-available balance",
        "tool-input-start rates",
        "tool-input-available rates",
        "tool-output-available account,usd",
        "tool-output-available currency,usd",
        "finish-step",
        "start-step",
        "tool-input-start send",
        "tool-input-available send",
        "data-guard",
        "tool-approval-request",
        "finish-step",
        "finish tool-calls",
    ]
    assert first[0]["messageMetadata"] == {"runId": str(pending.run_id)}
    request = first[-3]
    assert request == {
        "type": "tool-approval-request",
        "approvalId": str(pending.approval_id),
        "toolCallId": pending.tool_use_id,
        "reason": pending.description,
        "signature": pending.args_digest,
        "approvalDescriptor": {
            "name": "send",
            "description": pending.description,
            "amountUsd": "60",
            "tier": "confirm",
            "acknowledge": None,
            "modifiableFields": ["amount", "memo"],
            "guardNotes": [
                {"guard": n.guard, "verdict": n.verdict, "message": n.for_person}
                for n in pending.guard_notes
            ],
            "expiresAt": pending.expires_at.isoformat(),
            "executor": "server",
            "argsDigest": pending.args_digest,
        },
    }
    send = first[15]
    assert send["type"] == "tool-input-available"
    assert send["toolCallId"] == pending.tool_use_id
    assert send["input"] == {"to": "bob", "amount": "60", "memo": ""}
    # the second stream continues the same assistant message: no id in its start
    assert shape(second) == [
        "start",
        "tool-approval-response",
        "tool-output-available reference,sent,to",
        "start-step",
        "text-start",
        "text-delta Sent 60 USD to bob.",
        "text-delta Your balance was 250 USD",
        "text-delta before",
        "text-delta it.",
        "text-end",
        "finish-step",
        "finish stop",
    ]
    assert "messageId" not in second[0]
    assert second[1] == {
        "type": "tool-approval-response",
        "approvalId": str(pending.approval_id),
        "approved": True,
    }
    assert "".join(p["delta"] for p in second if p["type"] == "text-delta") == ANSWER
    assert second[-1]["messageMetadata"]["outputTokens"] >= 0
    # every text part is opened once and closed once, with one id
    for parts in (first, second):
        opened = [p["id"] for p in parts if p["type"] == "text-start"]
        closed = [p["id"] for p in parts if p["type"] == "text-end"]
        assert opened == closed


def _at() -> dict[str, Any]:
    return {"run_id": RUN, "at": datetime(2026, 1, 1, tzinfo=UTC)}


RUN = uuid4()


def test_denials_refusals_retractions_and_a_failure() -> None:
    events: list[Event] = [
        TextDelta(seq=3, text="Half a sen", **_at()),
        TurnRetracted(seq=4, from_seq=3, **_at()),
        TextDelta(seq=5, text="Sending.", **_at()),
        ToolCallStart(seq=6, tool_use_id="t1", name="send", input={}, args_digest="d", **_at()),
        ToolCallStart(seq=7, tool_use_id="t2", name="drop_db", input={}, args_digest="e", **_at()),
        ToolCallRejected(
            seq=8, tool_use_id="t2", name="drop_db", reason="not_allowed", message="no", **_at()
        ),
        TurnComplete(seq=9, stop_reason="tool_use", **_at()),
        ToolCallRejected(
            seq=10, tool_use_id="t1", name="send", reason="denied", message="denied", **_at()
        ),
        RunFailed(seq=11, reason="error", message="model error: overloaded", **_at()),
    ]
    parts = translate(events)
    assert shape(parts) == [
        "start",
        "start-step",
        "text-start",
        "text-delta Half a sen",
        "reset-step",  # the partial turn lost in a crash is dropped by the client
        "start-step",
        "text-start",
        "text-delta Sending.",
        "text-end",
        "tool-input-start send",
        "tool-input-available send",
        "tool-input-start drop_db",
        "tool-input-available drop_db",
        "tool-output-error",
        "tool-output-denied",
        "error",
        "finish-step",
        "finish error",
    ]
    assert parts[-3] == {
        "type": "error",
        "errorText": "the run failed (error): model error: overloaded",
    }


def test_the_chat_answers_are_read_from_the_tool_parts() -> None:
    approval = uuid4()
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": "Let me check."},
        {"type": "tool-balance", "toolCallId": "a", "state": "output-available", "output": {}},
        {
            "type": "tool-send",
            "toolCallId": "b",
            "state": "approval-responded",
            "input": {"to": "bob"},
            "approval": {"id": str(approval), "approved": True, "signature": "digest-1"},
        },
        {
            "type": "dynamic-tool",
            "toolName": "pay",
            "toolCallId": "c",
            "state": "approval-responded",
            "approval": {"id": str(approval), "approved": False, "reason": "not today"},
        },
        {"type": "tool-x", "state": "approval-responded", "approval": {"id": "not-a-uuid"}},
        {"type": "tool-y", "state": "approval-requested", "approval": {"id": str(uuid4())}},
    ]
    decided = decisions_of(parts)
    assert [(d.approved, d.reason, d.args_digest) for d in decided] == [
        (True, "", "digest-1"),
        (False, "not today", None),
    ]


def test_chat_ids_name_runs_per_principal() -> None:
    run = uuid4()
    assert chat_run_id(str(run), "alice") == run
    assert chat_run_id("k3Jd9sLq", "alice") == chat_run_id("k3Jd9sLq", "alice")
    assert chat_run_id("k3Jd9sLq", "alice") != chat_run_id("k3Jd9sLq", "bob")
    assert encode_part({"type": "start"}) == b'data: {"type":"start"}\n\n'


# --- over HTTP -----------------------------------------------------------------------------------


@pytest.fixture
def chat_agent() -> Agent:
    return Agent(
        model=ScriptedModel([SCRIPT]),
        capabilities=toy_capabilities(Effects()),
        store=MemoryStore(),
        policy=Policy(preset="balanced"),
        authorize=allow_all,
    )


@pytest.fixture(params=["route", "create_app"])
async def chat_client(
    chat_agent: Agent, keys: Keys, request: pytest.FixtureRequest
) -> AsyncIterator[httpx.AsyncClient]:
    """The endpoint alone, and as ``create_app`` mounts it beside the API at /api/chat."""
    if request.param == "route":
        chat = UIChat(chat_agent, keys=keys.store)
        app = Starlette(routes=[chat.route("/api/chat")])
    else:
        app = create_app(chat_agent, keys=keys.store, resume_on_start=False)
        chat = app.state.chat
    transport = StreamingASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client
    await chat.aclose()
    if request.param == "create_app":
        await app.state.server.close()


def parts_of(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    lines = [line for line in response.text.split("\n\n") if line]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


def user(text: str) -> dict[str, Any]:
    return {"id": uuid4().hex, "role": "user", "parts": [{"type": "text", "text": text}]}


def answered(parts: list[dict[str, Any]], *, approved: bool, digest: str | None = None) -> Any:
    """The assistant message as useChat holds it once ``addToolApprovalResponse`` was called."""
    request = next(p for p in parts if p["type"] == "tool-approval-request")
    return {
        "id": uuid4().hex,
        "role": "assistant",
        "parts": [
            {
                "type": "tool-send",
                "toolCallId": request["toolCallId"],
                "state": "approval-responded",
                "input": {"to": "bob", "amount": "60"},
                "approval": {
                    "id": request["approvalId"],
                    "approved": approved,
                    "signature": digest or request["signature"],
                    **({} if approved else {"reason": "not today"}),
                },
            }
        ],
    }


async def test_use_chat_drives_a_run_through_its_approval(
    chat_client: httpx.AsyncClient, chat_agent: Agent, keys: Keys
) -> None:
    chat = {"id": "Xq81bLw0aP2d", "trigger": "submit-message"}
    question = user(QUESTION)
    response = await chat_client.post(
        "/api/chat", json={**chat, "messages": [question]}, headers=bearer(keys.alice)
    )
    for name, value in HEADERS.items():
        assert response.headers[name] == value
    assert response.headers["content-type"].startswith("text/event-stream")
    first = parts_of(response)
    assert first[-1] == {"type": "finish", "finishReason": "tool-calls"}
    run_id = chat_run_id("Xq81bLw0aP2d", "alice")
    assert first[0]["messageMetadata"] == {"runId": str(run_id)}
    assert (await chat_agent.get_run(run_id)).status == "awaiting_approval"

    # a digest that is not the one shown approves nothing
    tampered = answered(first, approved=True, digest="0" * 64)
    response = await chat_client.post(
        "/api/chat",
        json={**chat, "messages": [question, tampered]},
        headers=bearer(keys.alice),
    )
    problem(response, 409, "digest_mismatch")
    # bob's chat of the same id is another run; he cannot answer alice's approval by run id
    response = await chat_client.post(
        "/api/chat",
        json={"id": str(run_id), "messages": [question, answered(first, approved=True)]},
        headers=bearer(keys.bob),
    )
    problem(response, 404, "not_found")
    # a key that may not decide cannot approve
    response = await chat_client.post(
        "/api/chat",
        json={**chat, "messages": [question, answered(first, approved=True)]},
        headers=bearer(keys.alice_writer),
    )
    problem(response, 403, "insufficient_scope")

    response = await chat_client.post(
        "/api/chat",
        json={**chat, "messages": [question, answered(first, approved=True)]},
        headers=bearer(keys.alice),
    )
    second = parts_of(response)
    assert [p["type"] for p in second][:3] == [
        "start",
        "tool-approval-response",
        "tool-output-available",
    ]
    assert "".join(p["delta"] for p in second if p["type"] == "text-delta") == ANSWER
    assert second[-1]["finishReason"] == "stop"
    assert (await chat_agent.get_run(run_id)).status == "completed"
    # the same answer sent again (a retry of the client) decides and drives nothing
    response = await chat_client.post(
        "/api/chat",
        json={**chat, "messages": [question, answered(first, approved=True)]},
        headers=bearer(keys.alice),
    )
    assert parts_of(response) == [
        {"type": "start", "messageMetadata": {"runId": str(run_id)}},
        {"type": "finish", "finishReason": "other"},
    ]


async def test_a_denial_from_the_chat(
    chat_client: httpx.AsyncClient, chat_agent: Agent, keys: Keys
) -> None:
    chat = {"id": str(uuid4())}
    question = user(QUESTION)
    first = parts_of(
        await chat_client.post(
            "/api/chat", json={**chat, "messages": [question]}, headers=bearer(keys.alice)
        )
    )
    second = parts_of(
        await chat_client.post(
            "/api/chat",
            json={**chat, "messages": [question, answered(first, approved=False)]},
            headers=bearer(keys.alice),
        )
    )
    response = next(p for p in second if p["type"] == "tool-approval-response")
    assert response["approved"] is False
    assert response["reason"] == "not today"
    assert any(p["type"] == "tool-output-denied" for p in second)
    approvals = await chat_agent.list_approvals(principal="alice", status=None)
    assert [a.status for a in approvals] == ["denied"]


async def test_refusals_before_any_stream(chat_client: httpx.AsyncClient, keys: Keys) -> None:
    body = {"id": "c1", "messages": [user("hi")]}
    problem(await chat_client.post("/api/chat", json=body), 401, "unauthenticated")
    problem(
        await chat_client.post("/api/chat", json=body, headers=bearer(keys.alice_reader)),
        403,
        "insufficient_scope",
    )
    problem(
        await chat_client.post("/api/chat", json={"id": "c1"}, headers=bearer(keys.alice)),
        422,
        "invalid_request",
    )
    problem(
        await chat_client.post(
            "/api/chat", content=b"hi", headers={**bearer(keys.alice), "content-type": "text/plain"}
        ),
        415,
        "unsupported_media_type",
    )
    # a chat whose run waits for a person takes no new message until it is answered
    chat = {"id": "c2", "messages": [user(QUESTION)]}
    parts_of(await chat_client.post("/api/chat", json=chat, headers=bearer(keys.alice)))
    again = {"id": "c2", "messages": [user(QUESTION), user("and?")]}
    problem(
        await chat_client.post("/api/chat", json=again, headers=bearer(keys.alice)),
        409,
        "run_state",
    )
    assert UUID(int=0) != chat_run_id("c2", "alice")

"""``/questions``: the person answers what the model asked (``ask_person``) over HTTP."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
import pytest

from fiduciary import Agent, ManualClock, RunCompleted, ToolCallEnd, ask_person
from fiduciary.server import Server
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls

from .conftest import Keys, all_events, bearer, problem, settle, start_run


def _reply(results: Any) -> str:
    if "ask_person" in results:
        return f"Booked for {results['ask_person']['answer']}."
    return "Nobody answered."


@pytest.fixture
def agent(store: Store, clock: ManualClock) -> Agent:
    script = Script(
        "book",
        [
            ToolCalls(
                [Call("ask_person", {"question": "Which day?", "choices": ["Monday", "Friday"]})]
            ),
            Reply(_reply),
        ],
    )
    return Agent(
        model=ScriptedModel([script]), capabilities=[ask_person()], store=store, clock=clock
    )


async def _question(client: httpx.AsyncClient, key: str) -> dict[str, Any]:
    listed = (await client.get("/questions", headers=bearer(key))).json()["questions"]
    (question,) = listed
    return dict(question)


async def test_the_answer_resumes_the_run_and_a_second_is_refused(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "book a table")
    await settle(server)
    run = (await client.get(f"/runs/{run_id}", headers=bearer(keys.alice))).json()
    assert run["status"] == "awaiting_input"
    question = await _question(client, keys.alice)
    assert question["question"] == "Which day?"
    assert question["choices"] == ["Monday", "Friday"]
    assert question["status"] == "pending"
    assert question["run_id"] == str(run_id)
    qid = question["question_id"]
    url = f"/questions/{qid}/answer"
    # another principal neither sees nor answers it
    assert (await client.get("/questions", headers=bearer(keys.bob))).json() == {"questions": []}
    problem(await client.get(f"/questions/{qid}", headers=bearer(keys.bob)), 404, "not_found")
    problem(
        await client.post(url, json={"answer": "Monday"}, headers=bearer(keys.bob)),
        404,
        "not_found",
    )
    # a reader may look, not answer
    got = await client.get(f"/questions/{qid}", headers=bearer(keys.alice_reader))
    assert got.status_code == 200
    assert got.json()["question_id"] == qid
    forbidden = await client.post(url, json={"answer": "Monday"}, headers=bearer(keys.alice_reader))
    assert forbidden.status_code == 403
    problem(
        await client.post(url, json={"answer": "Sunday"}, headers=bearer(keys.alice)),
        422,
        "invalid_answer",
    )
    problem(await client.post(url, json={}, headers=bearer(keys.alice)), 422, "invalid_request")
    # an approval endpoint refuses it
    (card,) = (await client.get("/approvals", headers=bearer(keys.alice))).json()["approvals"]
    assert card["executor"] == "person"
    digest = {"args_digest": card["args_digest"]}
    problem(
        await client.post(f"/approvals/{qid}/approve", json=digest, headers=bearer(keys.alice)),
        409,
        "question",
    )

    ok = await client.post(url, json={"answer": "Friday"}, headers=bearer(keys.alice))
    assert ok.status_code == 200, ok.text
    assert ok.json()["status"] == "answered"
    assert ok.json()["answer"] == "Friday"
    assert ok.json()["answered_by"] == "alice"
    problem(
        await client.post(url, json={"answer": "Monday"}, headers=bearer(keys.alice)),
        409,
        "already_decided",
    )
    await settle(server)
    events = await all_events(client, keys.alice, run_id)
    (end,) = [e for e in events if isinstance(e, ToolCallEnd)]
    assert json.loads(end.output) == {"answer": "Friday"}
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].text == "Booked for Friday."
    assert (await client.get("/questions", headers=bearer(keys.alice))).json() == {"questions": []}
    answered = (
        await client.get("/questions?status=client_result", headers=bearer(keys.alice))
    ).json()["questions"]
    assert [q["answer"] for q in answered] == ["Friday"]


async def test_an_expired_question_is_refused_and_the_run_told(
    client: httpx.AsyncClient, keys: Keys, server: Server, clock: ManualClock, agent: Agent
) -> None:
    run_id = await start_run(client, keys.alice, "book a table")
    await settle(server)
    qid = (await _question(client, keys.alice))["question_id"]
    clock.advance(timedelta(seconds=agent.policy.approval_ttl_seconds + 1))
    problem(
        await client.post(
            f"/questions/{qid}/answer", json={"answer": "Monday"}, headers=bearer(keys.alice)
        ),
        410,
        "expired",
    )
    await settle(server)
    events = await all_events(client, keys.alice, run_id)
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].text == "Nobody answered."


async def test_an_admin_answers_for_anyone(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    await start_run(client, keys.alice, "book a table")
    await settle(server)
    qid = (await _question(client, keys.admin))["question_id"]
    ok = await client.post(
        f"/questions/{qid}/answer", json={"answer": "1"}, headers=bearer(keys.admin)
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["answer"] == "Monday"
    assert ok.json()["answered_by"] == "ops"

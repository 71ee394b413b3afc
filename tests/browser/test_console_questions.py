"""A question the model asks (``ask_person``) in the console, in a real browser (Chromium): its
card shows the choices as buttons (or a text box), the person answers, the run goes on and
the card says who answered; a second answer, from the API, is refused."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from fiduciary import Agent, ask_person
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls

from .served_page import PHONE, overflow, signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

DAYS = ["Monday", "Friday"]


def agent(store: SQLiteStore) -> Agent:
    scripts = [
        Script(
            "book",
            [
                ToolCalls(
                    [
                        Call(
                            "ask_person",
                            {"question": "Which day?", "choices": ["Monday", "Friday"]},
                        )
                    ]
                ),
                Reply(lambda r: f"Booked for {r['ask_person']['answer']}."),
            ],
        ),
        Script(
            "name",
            [
                ToolCalls([Call("ask_person", {"question": "What name for the booking?"})]),
                Reply(lambda r: f"Booked under {r['ask_person']['answer']}."),
            ],
        ),
    ]
    return Agent(model=ScriptedModel(scripts), capabilities=[ask_person()], store=store)


async def test_a_question_is_answered_with_a_choice_then_with_text(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "console.sqlite3")
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
    app = create_app(agent(store), keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key) as shown:
            page = shown.page
            await page.get_by_test_id("message").fill("book a table")
            await page.get_by_test_id("send").click()
            card = page.get_by_test_id("question-card")
            await card.wait_for()
            assert await card.get_by_test_id("question").inner_text() == "Which day?"
            choices = card.get_by_test_id("choice")
            assert await choices.all_inner_texts() == ["Monday", "Friday"]
            assert await page.get_by_test_id("pending-card").count() == 0  # not an approval
            await page.get_by_test_id("run-status").get_by_text("awaiting input").wait_for()
            await choices.get_by_text("Friday").click()
            conversation = page.get_by_test_id("conversation")
            await conversation.get_by_text("Booked for Friday.").wait_for()
            outcome = card.get_by_test_id("card-outcome")
            await outcome.get_by_text("Answered by alice at").wait_for()
            await page.get_by_test_id("run-status").get_by_text("completed").wait_for()

            # a question without choices: a text box, at phone width too
            await page.get_by_test_id("new-chat").click()
            await page.set_viewport_size({"width": PHONE[0], "height": PHONE[1]})
            await page.get_by_test_id("message").fill("a name please")
            await page.get_by_test_id("send").click()
            second = page.get_by_test_id("question-card").last
            await second.get_by_test_id("answer-text").wait_for()
            assert await overflow(page) == []
            await second.get_by_test_id("answer").click()  # empty: refused in the page
            await second.get_by_text("Type an answer first.").wait_for()
            await second.get_by_test_id("answer-text").fill("Ada Lovelace")
            await second.get_by_test_id("answer").click()
            await conversation.get_by_text("Booked under Ada Lovelace.").wait_for()
            qid = await second.get_attribute("data-approval")
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                again = await client.post(
                    f"/questions/{qid}/answer",
                    json={"answer": "Bob"},
                    headers={"authorization": f"Bearer {key}"},
                )
            assert again.status_code == 409
    finally:
        await store.close()

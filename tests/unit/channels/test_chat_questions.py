"""A chat's run waiting for the person's answer (``ask_person``): the person's next message
is the answer; a message from an outside channel is not."""

from __future__ import annotations

from fiduciary import Agent, Principal, ask_person
from fiduciary.channels import AgentChat
from fiduciary.testing import Call, MemoryStore, Reply, Script, ScriptedModel, ToolCalls

ALICE = Principal("alice")


def chat() -> AgentChat:
    script = Script(
        "book",
        [
            ToolCalls([Call("ask_person", {"question": "Which day?", "choices": ["Mon", "Fri"]})]),
            Reply(lambda r: f"Booked for {r['ask_person']['answer']}."),
        ],
    )
    agent = Agent(model=ScriptedModel([script]), capabilities=[ask_person()], store=MemoryStore())
    return AgentChat(agent)


async def test_the_next_message_answers_the_question() -> None:
    target = chat()
    await target(ALICE, "book a table", "api")
    run_id = target.run_id(ALICE)
    assert (await target.agent.get_run(run_id)).status == "awaiting_input"
    outside = await target(ALICE, "Fri", "webhook")  # not the person in person
    assert outside.text.startswith("I am still working")
    wrong = await target(ALICE, "Sunday", "api")
    assert wrong.text == "That answer was not taken: the answer must be one of: Mon, Fri."
    done = await target(ALICE, "Fri", "api")
    assert done.text == "Booked for Fri."
    assert (await target.agent.get_run(run_id)).status == "completed"

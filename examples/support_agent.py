"""A support agent that asks the person when it cannot decide alone (``ask_person``).

    python examples/support_agent.py

A customer writes that an order arrived damaged. The agent looks the order up, then asks the
support person how to settle it — a refund or a replacement — with the two as choices. The run
waits (status ``awaiting_input``) holding nothing in memory: here it is answered from code
with ``agent.answer``, as the console, the CLI (``fiduciary questions answer``), the HTTP API
(``POST /questions/{id}/answer``), Telegram or an MCP client would. The run then resumes with
the answer as the result of the model's question, and the agent does what was chosen. A
scripted model plays the conversation, offline.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fiduciary import (
    Agent,
    Capability,
    CapabilityError,
    PendingAction,
    RunCompleted,
    ToolCallEnd,
    ask_person,
    capability,
)
from fiduciary.testing import Call, Reply, Results, Script, ScriptedModel, ToolCalls

PERSON = "support"  # the support desk the agent works for, and who answers its questions
ORDERS = {"B-2001": {"item": "teapot", "customer": "dee@example.com", "total": "42.00"}}


def desk() -> tuple[list[Capability], list[str]]:
    """The desk's capabilities, and what they did."""
    done: list[str] = []

    @capability(kind="read")
    async def find_order(order_id: str) -> dict[str, str]:
        """An order: its item, customer and total in USD."""
        if order_id not in ORDERS:
            raise CapabilityError("not_found", f"there is no order {order_id}")
        return {"order_id": order_id, **ORDERS[order_id]}

    @capability(kind="execute", tier="auto")
    async def settle_order(order_id: str, how: Literal["refund", "replacement"]) -> dict[str, str]:
        """Settle a damaged order: refund it in full, or ship the item again at no charge."""
        order = ORDERS[order_id]
        if how == "refund":
            done.append(f"{order_id}: ${order['total']} refunded to {order['customer']}")
            return {"order_id": order_id, "refunded": order["total"]}
        done.append(f"{order_id}: a new {order['item']} shipped to {order['customer']}")
        return {"order_id": order_id, "shipped": order["item"]}

    return [find_order, settle_order, ask_person()], done


def _question(r: Results) -> dict[str, Any]:
    order = r["find_order"]
    return {
        "question": f"{order['order_id']} ({order['item']}, ${order['total']}) arrived "
        "damaged: refund or replace?",
        "choices": ["refund", "replacement"],
    }


def _done(r: Results) -> str:
    settled = r["settle_order"]
    if "refunded" in settled:
        return f"Refunded ${settled['refunded']}; the customer is told."
    return f"A new {settled['shipped']} is on its way; the customer is told."


SCRIPT = Script(
    "damaged",
    [
        ToolCalls([Call("find_order", {"order_id": "B-2001"})]),
        ToolCalls([Call("ask_person", _question)]),
        # the answer is the result of the question: the next call is made with it
        ToolCalls(
            [
                Call(
                    "settle_order",
                    lambda r: {"order_id": "B-2001", "how": r["ask_person"]["answer"]},
                )
            ]
        ),
        Reply(_done),
    ],
)


async def conversation(agent: Agent, message: str, answer: str) -> None:
    print(f"> {message}")
    events = [e async for e in agent.run(message, principal=PERSON)]
    while True:
        asked = [e for e in events if isinstance(e, PendingAction)]
        if not asked:
            break
        (question,) = await agent.questions(run_id=events[0].run_id)
        run = await agent.get_run(question.run_id)
        print(f"  the agent asks: {question.question} ({' / '.join(question.choices)})")
        print(f"  the run waits: {run.status}")
        print(f"  the person answers: {answer}")
        await agent.answer(question.question_id, answer, by=PERSON)
        events = [e async for e in agent.resume(question.run_id)]
    for event in events:
        if isinstance(event, ToolCallEnd) and event.name == "settle_order":
            print(f"  {event.name}: {event.output}")
    final = events[-1]
    assert isinstance(final, RunCompleted), final
    print(final.text)


async def main() -> None:
    capabilities, done = desk()
    agent = Agent(
        model=ScriptedModel([SCRIPT]),
        capabilities=capabilities,
        authorize=lambda request: request.principal.actor_id == PERSON,
    )
    await conversation(agent, "Order B-2001 arrived damaged, what can we do?", "refund")
    await conversation(agent, "B-2001 arrived damaged again!", "2")  # a choice by its number
    for line in done:
        print(line)


if __name__ == "__main__":
    asyncio.run(main())

"""A typed-output extraction agent: an invoice read from the application's own documents.

    python examples/typed_extraction.py

- ``output_type=Invoice``: the answer is validated against a pydantic model. The model's first
  answer is wrong (a total that is not a number); it is sent back with the errors and the
  model corrects it. The typed answer is ``result.output``, and the log records it.
- ``deps_type=Documents``: the capability reads the application's document store through
  ``ctx.deps`` (typed: ``CallContext[Documents]``); it is never recorded.
- ``FallbackModel``: the primary model is down (overloaded), so the secondary answers; the
  turn records which one did.

A scripted model plays the conversation, offline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal

from pydantic import BaseModel

from fiduciary import Agent, CallContext, ModelError, ToolCallEnd, capability, run_sync
from fiduciary.events import TurnComplete
from fiduciary.models import FallbackModel
from fiduciary.models.base import ModelEvent, ModelRequest
from fiduciary.testing import Call, MemoryStore, Script, ScriptedModel, ToolCalls, allow_all


class Line(BaseModel):
    item: str
    qty: int
    unit_price: Decimal


class Invoice(BaseModel):
    """An invoice as printed: its number, the vendor, the lines and the total due."""

    number: str
    vendor: str
    lines: list[Line]
    total: Decimal


@dataclass
class Documents:
    """The application's document store (a database, an object store): live, never logged."""

    texts: dict[str, str] = field(default_factory=dict)


@capability(kind="read")
async def read_document(doc_id: str, ctx: CallContext[Documents]) -> str:
    """The text of a document the person uploaded."""
    return ctx.deps.texts[doc_id]


LINES = [
    {"item": "Hammer", "qty": 10, "unit_price": "23.45"},
    {"item": "Saw", "qty": 20, "unit_price": "50.00"},
]
SCRIPT = Script(
    "extract",
    [
        ToolCalls([Call("read_document", {"doc_id": "upload-7"})]),
        # a first answer that is not an Invoice: the total is not a number
        ToolCalls(
            [
                Call(
                    "final_result",
                    {
                        "number": "INV-2041",
                        "vendor": "Acme Tools",
                        "lines": LINES,
                        "total": "about 1234",
                    },
                )
            ]
        ),
        ToolCalls(
            [
                Call(
                    "final_result",
                    {
                        "number": "INV-2041",
                        "vendor": "Acme Tools",
                        "lines": LINES,
                        "total": "1234.50",
                    },
                )
            ]
        ),
    ],
)


class Overloaded:
    """The primary model: down today (an outage, before it answers anything)."""

    name = "primary"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise ModelError("primary is overloaded", code="overloaded", retryable=True)
        yield  # (an async generator)


def build_agent() -> Agent:
    secondary = ScriptedModel([SCRIPT], name="secondary")
    return Agent(
        model=FallbackModel([Overloaded(), secondary]),
        capabilities=[read_document],
        store=MemoryStore(),
        authorize=allow_all,
        output_type=Invoice,
        output_retries=2,
        deps_type=Documents,
    )


def main() -> None:
    documents = Documents(
        {"upload-7": "ACME TOOLS - Invoice INV-2041\n10 x Hammer @ 23.45\n20 x Saw @ 50.00"}
    )
    agent = build_agent()
    result = run_sync(agent, "extract the invoice upload-7", principal="clerk", deps=documents)
    turns = [e for e in result.events if isinstance(e, TurnComplete)]
    for turn in turns:  # each turn: the primary failed, the secondary answered
        failed = ", ".join(f"{f.model} {f.reason}" for f in turn.fallbacks)
        print(f"turn answered by {turn.model} ({failed})")
    for event in result.events:
        if isinstance(event, ToolCallEnd) and event.error_code == "invalid_answer":
            print("sent back to the model:", event.output.splitlines()[1])
    invoice = result.output
    assert isinstance(invoice, Invoice)
    print(result.status, invoice.number, invoice.vendor, invoice.total)
    for line in invoice.lines:
        print(f"  {line.qty} x {line.item} @ {line.unit_price}")


if __name__ == "__main__":
    main()

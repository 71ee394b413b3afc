"""A delegation tree made with scripted models, for the tests of the run tree (HTTP, CLI,
browser): the manager delegates to a worker, which delegates to a sub-worker, which reads the
balance. The manager answers with a typed output (``Summary``); the worker's first model is
overloaded, so a fallback model answers its turns.

``python -m tests.run_tree_scenario DB`` makes it in the SQLite file DB and prints the three
run ids (manager, worker, sub-worker), one a line.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from fiduciary import Agent, ModelError, capability
from fiduciary.delegation import child_run_id
from fiduciary.models import FallbackModel
from fiduciary.models.base import ModelEvent, ModelRequest
from fiduciary.models.pricing import Price
from fiduciary.outputs import OUTPUT_TOOL
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

PRICE = Price(Decimal(1), Decimal(2), Decimal(0), Decimal(0))  # USD per million tokens
FIRST_CALL = "toolu_000_0"  # a scripted model's first call's id


class Summary(BaseModel):
    """The manager's typed answer."""

    balance_usd: Decimal
    checked_by: str


@capability
def get_balance() -> dict[str, str]:
    """The balance."""
    return {"usd": "42.00"}


class Overloaded:
    """A model that is always overloaded before it streams anything: the fallback answers."""

    name = "primary"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise ModelError("primary is overloaded", code="overloaded", retryable=True)
        yield  # (an async generator)


@dataclass(frozen=True)
class Tree:
    manager: UUID
    worker: UUID
    sub: UUID


def agents(store: Store) -> Agent:
    """The manager, with the worker and the sub-worker below it."""
    options: dict[str, Any] = {"store": store, "authorize": allow_all}
    sub = Agent(
        model=ScriptedModel(
            [Script("read the balance", [ToolCalls([Call("get_balance")]), Reply("it is $42")])],
            name="sub-model",
            price=PRICE,
        ),
        capabilities=[get_balance],
        **options,
    )
    ask_sub = {"agent": "sub", "task": "read the balance"}
    worker = Agent(
        model=FallbackModel(
            [
                Overloaded(),
                ScriptedModel(
                    [Script("check", [ToolCalls([Call("delegate", ask_sub)]), Reply("$42")])],
                    name="backup-model",
                    price=PRICE,
                ),
            ]
        ),
        capabilities=[get_balance],
        delegates={"sub": sub},
        **options,
    )
    ask_worker = {"agent": "worker", "task": "check the balance"}
    answer = {"balance_usd": "42", "checked_by": "worker"}
    return Agent(
        model=ScriptedModel(
            [
                Script(
                    "how much",
                    [
                        ToolCalls([Call("delegate", ask_worker)]),
                        ToolCalls([Call(OUTPUT_TOOL, answer)]),
                    ],
                )
            ],
            name="manager-model",
            price=PRICE,
        ),
        capabilities=[get_balance],
        delegates={"worker": worker},
        output_type=Summary,
        **options,
    )


async def make_tree(store: Store) -> Tree:
    """Run the manager to its end; the three run ids."""
    events = await collect(agents(store).run("how much do I have?", principal="alice"))
    manager = events[0].run_id
    worker = child_run_id(manager, FIRST_CALL)
    return Tree(manager, worker, child_run_id(worker, FIRST_CALL))


async def _main(db: Path) -> None:
    store = SQLiteStore(db)
    try:
        tree = await make_tree(store)
    finally:
        await store.close()
    print(tree.manager, tree.worker, tree.sub, sep="\n")


if __name__ == "__main__":
    asyncio.run(_main(Path(sys.argv[1])))

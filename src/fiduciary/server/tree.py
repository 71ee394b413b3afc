"""The handler of ``GET /runs/{run_id}/tree``: a run's place in its delegation tree.

``parents`` are the runs above it (the one a person started first: the console's
breadcrumbs); ``tree`` is the run itself with the runs it delegated to, nested
(``fiduciary.run_tree``). Every run of a tree acts for one principal, so a key that may see
the run sees the whole tree.
"""

from __future__ import annotations

from decimal import Decimal
from uuid import UUID

from pydantic import BaseModel, Field
from starlette.responses import Response

from ..run_tree import Ancestor, RunNode, ancestors, run_tree
from ..stores.base import RunStatus
from .pipeline import Call, json_response
from .problems import ProblemError
from .state import Server

__all__ = ["RunNodeOut", "RunParentOut", "RunTreeOut", "run_tree_view"]


class RunNodeOut(BaseModel):
    """One run of the tree, with the runs it delegated to (in the order of its calls)."""

    run_id: UUID
    delegate: str | None = Field(
        description="The name its parent called it by; null for a run a person started."
    )
    title: str
    status: RunStatus
    cost_usd: Decimal = Field(description="What its own model calls cost.")
    total_cost_usd: Decimal = Field(description="Its cost with every run below it.")
    children: list[RunNodeOut]

    @classmethod
    def of(cls, node: RunNode) -> RunNodeOut:
        return cls(
            run_id=node.run_id,
            delegate=node.delegate,
            title=node.title,
            status=node.status,
            cost_usd=node.cost_usd,
            total_cost_usd=node.total_cost_usd,
            children=[cls.of(c) for c in node.children],
        )


class RunParentOut(BaseModel):
    """A run above this one: a breadcrumb."""

    run_id: UUID
    delegate: str | None
    title: str
    status: RunStatus | None = Field(description="Null when its record is gone.")

    @classmethod
    def of(cls, above: Ancestor) -> RunParentOut:
        return cls(
            run_id=above.run_id, delegate=above.delegate, title=above.title, status=above.status
        )


class RunTreeOut(BaseModel):
    parents: list[RunParentOut] = Field(
        description="The runs above this one, the one a person started first; empty when a "
        "person started this one."
    )
    tree: RunNodeOut


async def run_tree_view(server: Server, call: Call) -> Response:
    run = await server.visible_run(call.caller, call.path("run_id"))
    store = server.agent.store
    node = await run_tree(store, run.run_id)
    if node is None:  # deleted between the two reads
        raise ProblemError("not_found", f"no run {run.run_id}")
    above = await ancestors(store, run.run_id)
    return json_response(
        RunTreeOut(
            parents=[RunParentOut.of(a) for a in above],
            tree=RunNodeOut.of(node),
        )
    )

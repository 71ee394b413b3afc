"""The tree of a delegation, read from the store: a run, the runs it delegated to, theirs, ...

Runs are linked by their logs only (``run_started.parent_run_id`` and ``delegate``; a child's
id is derived from its parent's id and the ``delegate`` call's ``tool_use_id``), so the tree
is read from the logs: the server's ``GET /runs/{id}/tree``, the console's tree and
``fiduciary runs show`` all draw the same one. Reading never writes.

A node's ``cost_usd`` is what its own model calls cost (its last ``usage.total_cost_usd``);
``total_cost_usd`` adds every run below it, as the parent's budget counts them. The depth is
bounded by ``delegation.DEPTH_LIMIT`` (a deeper child cannot exist), and a run seen twice on
one path (a damaged log) is not entered again.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from uuid import UUID

from .delegation import DELEGATE, DEPTH_LIMIT, child_run_id, lineage
from .events import RunStarted, ToolCallStart, Usage
from .stores.base import RunStatus, Store

__all__ = ["Ancestor", "RunNode", "ancestors", "run_tree"]


@dataclass(frozen=True, slots=True)
class RunNode:
    """One run of a delegation tree and the runs it delegated to, in the order of its calls.
    ``delegate``: the name its parent called it by (None: a run a person started)."""

    run_id: UUID
    delegate: str | None
    title: str
    status: RunStatus
    cost_usd: Decimal
    total_cost_usd: Decimal
    children: tuple[RunNode, ...] = ()


@dataclass(frozen=True, slots=True)
class Ancestor:
    """A run above another in its delegation chain: what a breadcrumb shows."""

    run_id: UUID
    delegate: str | None
    title: str
    status: RunStatus | None  # None: its record is gone


async def run_tree(store: Store, run_id: UUID) -> RunNode | None:
    """The tree below ``run_id`` (itself at its root); None when there is no such run."""
    return await _node(store, run_id, depth=0, seen=frozenset())


async def _node(store: Store, run_id: UUID, *, depth: int, seen: frozenset[UUID]) -> RunNode | None:
    record = await store.get_run(run_id)
    if record is None:
        return None
    delegate: str | None = None
    own = Decimal(0)
    below: list[UUID] = []
    for event in await store.read_events(run_id):
        if isinstance(event, RunStarted):
            delegate = event.delegate
        elif isinstance(event, Usage) and event.total_cost_usd is not None:
            own = event.total_cost_usd  # the run's total so far
        elif isinstance(event, ToolCallStart) and event.name == DELEGATE:
            below.append(child_run_id(run_id, event.tool_use_id))
    children: list[RunNode] = []
    if depth < DEPTH_LIMIT:
        path = seen | {run_id}
        for child_id in dict.fromkeys(below):  # a call replayed after a crash: one child
            if child_id in path:
                continue
            child = await _node(store, child_id, depth=depth + 1, seen=path)
            if child is not None:  # a call refused before it started a run
                children.append(child)
    return RunNode(
        run_id=run_id,
        delegate=delegate,
        title=record.title,
        status=record.status,
        cost_usd=own,
        total_cost_usd=own + sum((c.total_cost_usd for c in children), Decimal(0)),
        children=tuple(children),
    )


async def ancestors(store: Store, run_id: UUID) -> list[Ancestor]:
    """The runs above ``run_id``, the one a person started first (empty: a person started it)."""
    first = await store.read_events(run_id, limit=1)
    if not first or not isinstance(first[0], RunStarted) or first[0].parent_run_id is None:
        return []  # a person started it (or its log has not begun: nothing above to show)
    found: list[Ancestor] = []
    for link in (await lineage(store, run_id))[1:]:
        record = await store.get_run(link.run_id)
        status = None if record is None else record.status
        found.append(Ancestor(link.run_id, link.delegate, link.title, status))
    found.reverse()
    return found

"""What ``fiduciary runs show`` and ``runs list`` say of a run's place in a delegation, its
typed output and the fallback models that answered its turns (``fiduciary.run_tree``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from uuid import UUID

from pydantic import JsonValue
from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from ..display import show_text, show_value
from ..events import RunStarted
from ..run_tree import Ancestor, RunNode
from ..stores.base import Store
from ._common import _short, _styled, _usd

__all__ = ["breadcrumbs", "delegated_from", "print_delegates", "print_output"]


def breadcrumbs(above: Sequence[Ancestor]) -> str:
    """The runs above one, the person's run first: ``title (1a2b3c4d) › worker: task (...)``."""
    parts = []
    for a in above:
        name = f"{a.delegate}: {a.title}" if a.delegate else a.title
        parts.append(f"{escape(show_text(name).text)} ({_short(a.run_id)})")
    return " › ".join(parts)


def _label(node: RunNode) -> str:
    name = f"delegate {node.delegate}" if node.delegate else "run"
    cost = _usd(node.cost_usd)
    if node.children:
        cost += f", {_usd(node.total_cost_usd)} with its delegates"
    title = escape(show_text(" ".join(node.title.split())).text)
    return f"{escape(name)} {_short(node.run_id)} {_styled(node.status)} · {cost} · {title}"


def print_delegates(out: Console, node: RunNode) -> None:
    """The runs ``node`` delegated to, nested, each with its name, status and cost."""
    if not node.children:
        return
    tree = Tree(f"[bold]delegated to[/] ({_usd(node.total_cost_usd)} in all)")

    def grow(branch: Tree, below: RunNode) -> None:
        for child in below.children:
            grow(branch.add(_label(child)), child)

    grow(tree, node)
    out.print(tree)


def print_output(out: Console, output: JsonValue) -> None:
    """A run's typed output as formatted JSON (what ``run_completed.output`` recorded)."""
    if output is None:
        return
    out.print("[bold]typed output[/]")
    shown = show_value(output)  # every string as the person must see it (display.py)
    text = shown.text
    if isinstance(output, dict | list):
        text = json.dumps(json.loads(shown.text), indent=2, ensure_ascii=False)
    out.print(text, markup=False, highlight=False, soft_wrap=True)
    if shown.warning:
        out.print(f"[bold red]look closely:[/] [red]{escape(shown.warning)}[/]", soft_wrap=True)


async def delegated_from(store: Store, run_id: UUID) -> tuple[str, UUID] | None:
    """The delegate name and the parent of a delegated run; None for a run a person started."""
    first = await store.read_events(run_id, limit=1)
    if not first or not isinstance(first[0], RunStarted) or first[0].parent_run_id is None:
        return None
    return first[0].delegate or "", first[0].parent_run_id

"""The system prompt, assembled in a fixed order from layers.

1. the base instructions (``Agent(system=...)``: one or more strings, the stable prefix);
2. the domain context (``Agent(context=...)``: a string, or a callable of the principal evaluated
   once per user message — the wallet's ``<financial_context>`` snapshot);
3. ``<memory_recall>``: what memory recalled for the latest user message;
4. the active skill's playbook.

Empty layers are skipped, so with none of 2-4 configured the system prompt is exactly the base.
``stable`` is the number of leading layers that do not change from one user message to the next:
a provider puts its prompt-cache breakpoint on the last of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SystemPrompt", "recall_block"]


def recall_block(records: Sequence[str]) -> str:
    """The ``<memory_recall>`` layer for recalled texts ('' when nothing was recalled)."""
    if not records:
        return ""
    lines = "\n".join(f"- {' '.join(text.split())}" for text in records)
    return (
        "<memory_recall>\nWhat you noted in earlier conversations with this person (most "
        f"relevant first; it may be out of date):\n{lines}\n</memory_recall>"
    )


@dataclass(frozen=True, slots=True)
class SystemPrompt:
    """The layers of one model call's system prompt, in order, empty ones left out."""

    layers: tuple[str, ...]
    stable: int

    @classmethod
    def assemble(
        cls,
        base: Sequence[str],
        *,
        context: str = "",
        recall: str = "",
        skill: str = "",
    ) -> SystemPrompt:
        kept = tuple(base)
        return cls(kept + tuple(t for t in (context, recall, skill) if t), stable=len(kept))

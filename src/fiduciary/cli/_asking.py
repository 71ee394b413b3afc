"""A question the model asked the person (``ask_person``), at the terminal: its card, and the
answer typed (a choice by its text or its number)."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from ..agent import Agent
from ..display import show_text
from ..events import PendingAction
from ..exceptions import ApprovalError
from ._common import PromptInterruptedError

__all__ = ["answer_at_terminal", "question_card"]


def question_card(event: PendingAction) -> Panel:
    """The question as the person reads it; its choices numbered."""
    table = Table.grid(padding=(0, 2))
    table.add_row("question", escape(show_text(str(event.input.get("question", ""))).text))
    choices = [str(c) for c in event.input.get("choices") or ()]
    for number, choice in enumerate(choices, 1):
        table.add_row(f"  {number}", escape(show_text(choice).text))
    table.add_row("expires", event.expires_at.isoformat(timespec="seconds"))
    table.add_row("question id", str(event.approval_id))
    return Panel(table, title="[bold]the agent asks you[/]", border_style="cyan", expand=False)


async def answer_at_terminal(
    agent: Agent,
    event: PendingAction,
    principal: str,
    out: Console,
    ask: Callable[[Console, str], str],
) -> None:
    """Ask (``ask``: a line typed at the terminal) until the answer is accepted. End of input
    or Ctrl-C leaves the question open and the run waiting (``PromptInterruptedError``): it
    can be answered later, from anywhere."""
    choices = event.input.get("choices") or ()
    prompt = "Your answer (a number or the text): " if choices else "Your answer: "
    while True:
        try:
            typed = ask(out, prompt)
        except (EOFError, KeyboardInterrupt):
            out.print()
            out.print("[dim](no answer: the question stays open)[/]")
            raise PromptInterruptedError(event.run_id) from None
        try:
            await agent.answer(event.approval_id, typed, by=principal)
            return
        except ApprovalError as exc:
            out.print(f"[red]{escape(exc.message)}[/]")
            if exc.code != "invalid_answer":
                return  # answered elsewhere, expired: the run goes on with that

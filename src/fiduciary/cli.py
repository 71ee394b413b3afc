"""The ``fiduciary`` command line: ``demo`` now; runs, approvals, serve and worker follow."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from .agent import Agent
from .events import (
    ActionResolved,
    Event,
    GuardFired,
    PendingAction,
    RunCompleted,
    RunFailed,
    TextDelta,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
)
from .exceptions import FiduciaryError

app = typer.Typer(
    help="fiduciary: a durable, approval-gated runtime for agents that act on someone's behalf.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)


@app.callback()
def _root() -> None:
    """fiduciary: a durable, approval-gated runtime for agents that act on someone's behalf."""


DEFAULT_DB = Path(".fiduciary") / "fiduciary.sqlite3"


class Renderer:
    """Prints a run's events for a person at a terminal."""

    def __init__(self, out: Console) -> None:
        self.out = out
        self._in_text = False

    def __call__(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.out.print(event.text, end="", markup=False, highlight=False)
            self._in_text = True
            return
        if self._in_text:
            self.out.print()
            self._in_text = False
        if isinstance(event, ToolCallStart):
            args = json.dumps(event.input, ensure_ascii=False)
            self.out.print(f"  [cyan]→ {event.name}[/] [dim]{args}[/]", highlight=False)
        elif isinstance(event, ToolCallEnd):
            mark = "[red]✗[/]" if event.is_error else "[green]✓[/]"
            tag = f" [yellow]({event.recovery})[/]" if event.recovery else ""
            body = event.output if len(event.output) < 160 else event.output[:157] + "..."
            self.out.print(f"  {mark} {event.name}{tag} [dim]{body}[/]", highlight=False)
        elif isinstance(event, ToolCallRejected):
            self.out.print(f"  [red]⊘ {event.name} refused ({event.reason})[/]: {event.message}")
        elif isinstance(event, GuardFired):
            self.out.print(f"  [yellow]! {event.guard} ({event.verdict})[/]: {event.message}")
        elif isinstance(event, PendingAction):
            self.out.print(pending_card(event))
        elif isinstance(event, ActionResolved):
            who = f" by {event.by}" if event.by else ""
            self.out.print(f"  [magenta]◆ {event.decision}{who}[/]")
        elif isinstance(event, RunCompleted):
            self.out.print(
                f"[dim]run completed · {event.tool_calls} tool calls · "
                f"{event.input_tokens}/{event.output_tokens} tokens[/]"
            )
        elif isinstance(event, RunFailed):
            self.out.print(f"[red]run failed ({event.reason}): {event.message}[/]")


def pending_card(event: PendingAction) -> Panel:
    table = Table.grid(padding=(0, 2))
    table.add_row("action", event.description)
    amount = "unknown" if event.amount_usd is None else f"${event.amount_usd:,.2f}"
    table.add_row("amount", amount)
    table.add_row("tier", event.tier + (" (re-type the amount)" if event.acknowledge else ""))
    table.add_row("arguments", json.dumps(event.input, ensure_ascii=False))
    if event.modifiable_fields:
        table.add_row("editable", ", ".join(event.modifiable_fields))
    for note in event.guard_notes:
        table.add_row(f"{note.verdict}", f"[{note.guard}] {note.message}")
    table.add_row("expires", event.expires_at.isoformat(timespec="seconds"))
    table.add_row("approval id", str(event.approval_id))
    return Panel(table, title="[bold]approval needed[/]", border_style="yellow", expand=False)


def _ask(event: PendingAction, out: Console) -> tuple[bool, str | None]:
    """Ask the person at the terminal. End of input counts as a refusal."""
    try:
        if event.tier == "explicit" and event.amount_usd is not None:
            typed = out.input(
                f"Type the amount (${event.amount_usd:,.2f}) to approve, "
                "or anything else to decline: "
            )
            return True, typed
        answer = out.input("Approve? [y/N] ").strip().lower()
    except EOFError:
        out.print("[dim](no input: declining)[/]")
        return False, None
    return answer in ("y", "yes"), None


async def drive_with_approvals(
    agent: Agent,
    message: str,
    principal: str,
    *,
    yes: bool,
    out: Console,
) -> list[Event]:
    """Run a message to its end, asking the person (or approving with --yes) when needed."""
    render = Renderer(out)
    seen: list[Event] = []
    stream = agent.run(message, principal=principal)
    run_id = None
    while True:
        pending: list[PendingAction] = []
        async for event in stream:
            run_id = event.run_id
            seen.append(event)
            render(event)
            if isinstance(event, PendingAction):
                pending.append(event)
        if not pending or run_id is None:
            return seen
        for action in pending:
            if yes:
                out.print(f"  [green]auto-approving ({action.name}) because of --yes[/]")
                await agent.approve(
                    action.approval_id,
                    by=principal,
                    confirm_amount=action.amount_usd,
                    args_digest=action.args_digest,
                )
                continue
            approved, typed = _ask(action, out)
            try:
                if approved:
                    await agent.approve(
                        action.approval_id,
                        by=principal,
                        confirm_amount=typed,
                        args_digest=action.args_digest,
                    )
                else:
                    await agent.deny(
                        action.approval_id, by=principal, reason="declined at the terminal"
                    )
            except FiduciaryError as exc:
                out.print(f"[red]{exc}[/] — declining instead")
                await agent.deny(action.approval_id, by=principal, reason=str(exc))
        stream = agent.resume(run_id)


@app.command()
def demo(
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Approve every pending action.")] = False,
    db: Annotated[Path, typer.Option(help="The SQLite file runs are stored in.")] = DEFAULT_DB,
) -> None:
    """Run the offline demo: reads in parallel, an automatic payment, one that needs approval."""
    from .demo import DEMO_MESSAGE, DEMO_PRINCIPAL, Billing, build_demo_agent
    from .stores.sqlite import SQLiteStore

    async def main() -> int:
        db.parent.mkdir(parents=True, exist_ok=True)
        store = SQLiteStore(db)
        try:
            agent = build_demo_agent(store, Billing())
            console.print(Panel(DEMO_MESSAGE, title=f"[bold]{DEMO_PRINCIPAL}[/]", expand=False))
            seen = await drive_with_approvals(
                agent, DEMO_MESSAGE, DEMO_PRINCIPAL, yes=yes, out=console
            )
            run_id = seen[0].run_id
            run = await agent.get_run(run_id)
            console.print()
            console.print(
                f"run [bold]{run_id}[/] is [bold]{run.status}[/] after {run.last_seq} events."
            )
            console.print(
                f"Its event log lives in [bold]{db.resolve()}[/] (table events, run_id {run_id})."
            )
            return 0 if run.status == "completed" else 1
        finally:
            await store.close()

    raise typer.Exit(_run(main()))


def _run(coro: object) -> int:
    try:
        return asyncio.run(coro)  # type: ignore[arg-type]
    except FiduciaryError as exc:
        err_console.print(f"[red]error:[/] {exc}")
        return 2
    except KeyboardInterrupt:
        err_console.print("interrupted; the run can be resumed")
        return 130


def main() -> None:
    app(prog_name="fiduciary")


if __name__ == "__main__":  # pragma: no cover
    main()

"""A run at the terminal: events rendered for a person, pending actions asked about, a log
followed as other processes commit it."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import Any, assert_never
from uuid import UUID

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from .. import events as ev
from .._text import NOTES_MARKER
from ..agent import Agent
from ..display import card_flags, show_text, show_value
from ..events import Event, PendingAction
from ..exceptions import FiduciaryError
from ..stores.base import Store
from ._asking import answer_at_terminal, question_card
from ._common import (
    _FINISHED,
    _WAITING,
    CliError,
    PromptInterruptedError,
    _all_events,
    _clip,
    _short,
    _usd,
)

__all__ = [
    "PromptInterruptedError",
    "Renderer",
    "ask",
    "brief",
    "describe",
    "drive_with_approvals",
    "follow_events",
    "pending_card",
    "resume_with_approvals",
]


def describe(event: Event) -> str:
    """One line that says what an event is (for summaries; ``Renderer`` is for live output)."""
    match event:
        case ev.RunStarted():
            return f"{event.principal} · model {event.model} · {', '.join(event.capabilities)}"
        case ev.UserMessage() | ev.TextDelta() | ev.ThinkingDelta():
            return _clip(event.text)
        case ev.ThinkingDone():
            return f"thinking block {event.block_index} done"
        case ev.ToolCallStart():
            return f"{event.name} {brief(show_value(event.input).text, 80)}"
        case ev.ToolCallEnd():
            tag = f" ({event.recovery})" if event.recovery else ""
            outcome = "error" if event.is_error else "ok"
            return f"{event.name} {outcome}{tag}: {brief(event.output, 80)}"
        case ev.ToolCallRejected():
            return f"{event.name} refused ({event.reason}): {_clip(event.message)}"
        case ev.GuardFired() | ev.TextGuardFired():
            return f"{event.guard} {event.verdict} ({event.phase}): {_clip(event.shown)}"
        case ev.PostGuardFired():
            return f"{event.guard} {event.verdict} after {event.name}: {_clip(event.shown)}"
        case PendingAction():
            approval = f"approval {_short(event.approval_id)} ({event.tier})"
            return f"{approval}: {show_text(event.description).text}, {_usd(event.amount_usd)}"
        case ev.ActionResolved():
            who = f" by {event.by}" if event.by else ""
            why = f": {event.reason}" if event.reason else ""
            return f"approval {_short(event.approval_id)} {event.decision}{who}{why}"
        case ev.ToolProgress():
            return f"{event.name}: {_clip(event.message)}"
        case ev.Compaction(phase="start"):
            return f"compacting what the model is sent ({event.tokens_before} tokens)"
        case ev.Compaction():
            return (
                f"compacted ({event.method}): {event.tokens_before} -> {event.tokens_after} tokens"
            )
        case ev.ContextLayers():
            recalled = f", {len(event.recalled)} memories recalled" if event.recalled else ""
            return f"context for this message{recalled}"
        case ev.TodoUpdate():
            marks = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]"}
            return "to do: " + "; ".join(
                f"{marks[item.status]} {_clip(item.text)}" for item in event.todos
            )
        case ev.Canvas():
            title = _clip(show_text(event.title).text)
            return f"canvas {title!r} ({event.kind}): open the run in the console to see it"
        case ev.PendingInput():
            asked = f": {_clip(show_text(event.prompt).text)}" if event.prompt else ""
            return f"input {event.input_id} requested{asked} (this client shows no forms)"
        case ev.Usage():
            return f"{event.model}: {event.input_tokens} in / {event.output_tokens} out"
        case ev.TurnComplete():
            by = f" · answered by {event.model}" if event.model else ""  # a fallback's turn
            return f"stop: {event.stop_reason}{by}"
        case ev.TurnRetracted():
            return f"partial turn from seq {event.from_seq} retracted"
        case ev.RunCompleted():
            return f"{event.tool_calls} tool calls · {_clip(event.text)}"
        case ev.RunFailed():
            return f"{event.reason}: {event.message}"
        case _:
            assert_never(event)


# --- tool results, shortened for a line ------------------------------------------------------

_RESULT_CHARS = 160


def brief(output: str, room: int = _RESULT_CHARS) -> str:
    """A tool result in at most about ``room`` characters, shortened where a reader expects it:
    a JSON body keeps whole keys and values, nested ones abbreviated (``{…}``, ``[3 items]``)
    and the rest counted (``… 4 more``); other text is cut between words. Guard notes after
    the body are left out (the events show them)."""
    body = output.split(NOTES_MARKER, 1)[0]
    try:
        value = json.loads(body)
    except ValueError:
        return _clip(" ".join(output.split()), room)
    shown = _fit(value, room)
    return shown if shown is not None else _clip(" ".join(body.split()), room)


def _fit(value: Any, room: int) -> str | None:
    """``value`` as JSON in ``room`` characters, or None when it cannot be shown there without
    cutting a value (a number, an id, a time): then the caller counts it instead."""
    whole = json.dumps(value, ensure_ascii=False)
    if len(whole) <= room:
        return whole
    if isinstance(value, str) and " " in value.strip() and room >= 16:
        return json.dumps(_clip(value, room - 2), ensure_ascii=False)  # prose: between words
    if isinstance(value, dict):
        items = [(json.dumps(k, ensure_ascii=False) + ": ", v) for k, v in value.items()]
        opening, closing, short = "{", "}", "{…}"
    elif isinstance(value, list):
        items = [("", v) for v in value]
        opening, closing, short = "[", "]", f"[{len(value)} items]"
    else:
        return None
    parts: list[str] = []
    used = 2
    for index, (prefix, item) in enumerate(items):
        more = f"… {len(items) - index} more"
        last = index == len(items) - 1
        shown = _fit(item, room - used - len(prefix) - (0 if last else len(more) + 2))
        if shown is None:
            if not parts:
                return short if len(short) <= room else None
            parts.append(more)
            break
        parts.append(prefix + shown)
        used += len(parts[-1]) + 2
    return opening + ", ".join(parts) + closing


_MARKS = {
    "tool_call_start": "[cyan]→[/]",
    "tool_call_rejected": "[red]⊘[/]",
    "guard_fired": "[yellow]![/]",
    "post_guard_fired": "[yellow]![/]",
    "text_guard_fired": "[yellow]![/]",
    "action_resolved": "[magenta]◆[/]",
    "canvas": "[cyan]▦[/]",
    "pending_input": "[magenta]?[/]",
}


class Renderer:
    """Prints a run's events for a person at a terminal."""

    def __init__(self, out: Console) -> None:
        self.out = out
        self._in_text = False

    def flush(self) -> None:
        """End a line of streamed text left open."""
        if self._in_text:
            self.out.print()
            self._in_text = False

    def __call__(self, event: Event) -> None:
        if isinstance(event, ev.TextDelta):
            self.out.print(event.text, end="", markup=False, highlight=False)
            self._in_text = True
            return
        self.flush()
        if isinstance(event, PendingAction):
            self.out.print(card(event))
        elif isinstance(event, ev.ToolCallEnd):
            mark = "[red]✗[/]" if event.is_error else "[green]✓[/]"
            tag = f" [yellow]({event.recovery})[/]" if event.recovery else ""
            body = brief(event.output)
            self.out.print(f"  {mark} {event.name}{tag} [dim]{escape(body)}[/]", highlight=False)
        elif isinstance(event, ev.RunCompleted):
            self.out.print(
                f"[dim]run completed · {event.tool_calls} tool calls · "
                f"{event.input_tokens}/{event.output_tokens} tokens[/]"
            )
        elif isinstance(event, ev.RunFailed):
            self.out.print(f"[red]run failed ({event.reason}): {escape(event.message)}[/]")
        elif isinstance(event, ev.ContextLayers):
            self._layers(event)
        elif isinstance(event, ev.TodoUpdate):
            self.out.print("  [cyan]☰[/] to do:", highlight=False)
            for item in event.todos:
                mark, style = _TODO_MARKS[item.status]
                text = escape(_clip(item.text, self._room))
                self.out.print(f"    {mark} [{style}]{text}[/]", highlight=False)
        elif isinstance(event, ev.Compaction):
            self.out.print(f"  [blue]⇣[/] [dim]{escape(describe(event))}[/]", highlight=False)
        elif event.type in _MARKS:
            line = f"  {_MARKS[event.type]} {escape(describe(event))}"
            self.out.print(line, highlight=False)

    @property
    def _room(self) -> int:
        """The characters of an indented line that fit the terminal (one line each)."""
        return max(40, self.out.width - 6)

    def _layers(self, event: ev.ContextLayers) -> None:
        """What this message's system prompt adds: the domain context (its tags left out)
        and each memory recalled, one line each."""
        lines = [
            line.strip()
            for line in event.context.splitlines()
            if line.strip() and not _TAG.fullmatch(line.strip())
        ]
        if lines:
            self.out.print("  [blue]◇[/] context:", highlight=False)
            for line in lines:
                self.out.print(f"    [dim]{escape(_clip(line, self._room))}[/]", highlight=False)
        if event.recalled:
            self.out.print(f"  [blue]◇[/] recalled ({len(event.recalled)}):", highlight=False)
            for text in event.recalled:
                shown = escape(_clip(text, self._room))
                self.out.print(f"    [dim]· {shown}[/]", highlight=False)


_TAG = re.compile(r"</?[A-Za-z_][\w-]*>")  # a block's opening or closing tag, alone on its line
_TODO_MARKS = {
    "pending": ("○", "default"),
    "in_progress": ("▸", "bold"),
    "done": ("[green]✓[/]", "dim"),
}


def card(event: PendingAction) -> Panel:
    """An approval's card, or a question's (``ask_person``)."""
    return question_card(event) if event.executor == "person" else pending_card(event)


def pending_card(event: PendingAction) -> Panel:
    """The card a person decides on: every value through ``display`` (escaped, flagged)."""
    table = Table.grid(padding=(0, 2))
    args = show_value(event.input)
    table.add_row("action", escape(show_text(event.description).text))
    table.add_row("amount", _usd(event.amount_usd))
    table.add_row("tier", event.tier + (" (re-type the amount)" if event.acknowledge else ""))
    table.add_row("arguments", escape(args.text))
    for number, step in enumerate(event.steps or [], start=1):  # a call made of steps
        amount = "" if step.amount is None else f" · {step.amount} {step.asset or ''}"
        shown = show_text(f"{step.operation}: {step.description}{amount}").text
        table.add_row(f"step {number}", escape(shown))
    if event.quoted_at is not None:
        table.add_row(
            "quoted", event.quoted_at.isoformat(timespec="seconds") + " (can be made anew)"
        )
    for flag in card_flags(event.description, args):
        table.add_row("[bold red]look closely[/]", f"[red]{escape(flag.detail)}[/]")
    if event.modifiable_fields:
        table.add_row("editable", ", ".join(event.modifiable_fields))
    for note in event.guard_notes:
        table.add_row(note.verdict, escape(show_text(f"[{note.guard}] {note.shown}").text))
    table.add_row("expires", event.expires_at.isoformat(timespec="seconds"))
    table.add_row("approval id", str(event.approval_id))
    return Panel(table, title="[bold]approval needed[/]", border_style="yellow", expand=False)


# --- driving a run with a person at the terminal ----------------------------------------------


@contextmanager
def _interruptible() -> Iterator[None]:
    """Let one Ctrl-C stop a blocking read. ``asyncio.run`` turns the first Ctrl-C into a
    cancellation that waits for the event loop, which a read at the terminal blocks: a person
    had to press it twice. Python's own handler raises at once, in the read."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def ask(out: Console, prompt: str) -> str:
    """A line typed at the terminal (``prompt`` is markup). ``EOFError`` at the end of input;
    ``KeyboardInterrupt`` at the first Ctrl-C."""
    with _interruptible():
        return out.input(prompt)


def _ask(event: PendingAction, out: Console) -> tuple[bool, str | None]:
    """Ask the person at the terminal. End of input counts as a refusal; Ctrl-C leaves the
    run waiting (``PromptInterruptedError``)."""
    try:
        if event.tier == "explicit" and event.amount_usd is not None:
            typed = ask(
                out,
                f"Type the amount (${event.amount_usd:,.2f}) to approve, "
                "or anything else to decline: ",
            )
            return True, typed
        # the backslash keeps rich from taking [y/N] for markup (it printed "Approve? " alone)
        answer = ask(out, "Approve? \\[y/N] ").strip().lower()
    except EOFError:
        out.print("[dim](no input: declining)[/]")
        return False, None
    except KeyboardInterrupt:
        out.print()
        raise PromptInterruptedError(event.run_id) from None
    return answer in ("y", "yes"), None


async def _decide_at_terminal(
    agent: Agent, actions: Sequence[PendingAction], principal: str, *, yes: bool, out: Console
) -> None:
    for action in actions:
        if action.executor == "person":  # a question: answered, never approved (nor by --yes)
            await answer_at_terminal(agent, action, principal, out, ask)
            continue
        typed: Decimal | str | None = action.amount_usd
        if yes:
            out.print(f"  [green]auto-approving ({escape(action.name)}) because of --yes[/]")
            approved = True
        else:
            approved, typed = _ask(action, out)
        try:
            if approved:
                digest = action.args_digest
                await agent.approve(
                    action.approval_id, by=principal, confirm_amount=typed, args_digest=digest
                )
            else:
                await agent.deny(
                    action.approval_id, by=principal, reason="declined at the terminal"
                )
        except FiduciaryError as exc:
            out.print(f"[red]{escape(str(exc))}[/] — declining instead")
            await agent.deny(action.approval_id, by=principal, reason=str(exc))


async def _drive(
    agent: Agent,
    stream: AsyncIterator[Event],
    principal: str,
    *,
    yes: bool,
    out: Console,
    any_model: bool = False,
) -> list[Event]:
    """Stream a run to its end, deciding each pending action at the terminal and resuming."""
    render = Renderer(out)
    seen: list[Event] = []
    while True:
        pending: list[PendingAction] = []
        async for event in stream:
            seen.append(event)
            render(event)
            if isinstance(event, PendingAction):
                pending.append(event)
        render.flush()
        if not pending:
            return seen
        await _decide_at_terminal(agent, pending, principal, yes=yes, out=out)
        stream = agent.resume(pending[0].run_id, any_model=any_model)


async def drive_with_approvals(
    agent: Agent,
    message: str,
    principal: str,
    *,
    yes: bool,
    out: Console,
    run_id: UUID | None = None,
) -> list[Event]:
    """Run a message to its end (in the idle run ``run_id``, or a new one), asking the person
    (or approving with --yes) when needed."""
    stream = agent.run(message, principal=principal, run_id=run_id)
    return await _drive(agent, stream, principal, yes=yes, out=out)


async def resume_with_approvals(
    agent: Agent,
    run_id: UUID,
    principal: str,
    *,
    yes: bool,
    out: Console,
    any_model: bool = False,
) -> list[Event]:
    """Continue a run from its log, first deciding the actions it is waiting for; ``any_model``
    as for ``Agent.resume``."""
    waiting = {a.approval_id for a in await agent.pending_approvals(run_id=run_id)}
    if waiting:
        actions = [
            e
            async for e in _all_events(agent.store, run_id)
            if isinstance(e, PendingAction) and e.approval_id in waiting
        ]
        for action in actions:
            out.print(card(action))
        await _decide_at_terminal(agent, actions, principal, yes=yes, out=out)
    stream = agent.resume(run_id, any_model=any_model)
    return await _drive(agent, stream, principal, yes=yes, out=out, any_model=any_model)


async def follow_events(
    store: Store,
    run_id: UUID,
    emit: Callable[[Event], None],
    *,
    after_seq: int = 0,
    until_idle: bool = False,
    poll_seconds: float = 0.5,
) -> int:
    """Emit a run's events, then new ones as they are committed (by any process), until it ends.

    It ends once every event of the run is emitted and the run is finished (completed, failed,
    cancelled) or, with ``until_idle``, not running (waiting for a person counts as idle).
    Returns the seq of the last event emitted. Another process's commits are only seen by
    reading the store, so it polls (``Agent.events(follow=True)`` would too, but it spins once
    its subscription times out, so it is not used here).
    """
    stop_at = _FINISHED | _WAITING if until_idle else _FINISHED
    printed = after_seq
    while True:
        run = await store.get_run(run_id)  # looked at first: its last_seq is then read below
        if run is None:
            raise CliError(f"no run {run_id}")
        async for event in _all_events(store, run_id, after_seq=printed):
            emit(event)
            printed = event.seq
        if printed >= run.last_seq and run.status in stop_at:
            return printed
        await asyncio.sleep(poll_seconds)

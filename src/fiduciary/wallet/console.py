"""The wallet at a terminal: ``fiduciary demo`` (the scripted conversation) and ``fiduciary
chat`` (type to the agent). Both keep the run and the wallet's ledger in one SQLite file, ask
the person about every pending action (or approve it with ``--yes``) and show balances.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from uuid import UUID

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from ..agent import Agent
from ..cli.terminal import (
    PromptInterruptedError,
    ask,
    drive_with_approvals,
    resume_with_approvals,
)
from ..context.memory import Memory
from ..display import show_usd
from ..events import UserMessage
from ..exceptions import ConfigurationError
from ..models.base import Model
from ..observability.environment import trace_from_env
from ..stores.base import RunRecord
from ..stores.sqlite import SQLiteStore
from .assets import ASSETS, get_asset
from .demo import (
    DEMO_CONVERSATION,
    DEMO_PRINCIPAL,
    build_wallet_agent,
    default_model_name,
    load_model,
    require_key,
    wallet_memory,
)
from .posted import accrued_line, posted_balances
from .scripted import CAN_DO
from .views import BalanceReport
from .wallet import PaperWallet

__all__ = ["balances_table", "run_chat", "run_demo"]

_BOOKS = ("available", "savings", "debt", "rewards")


def _books(report: BalanceReport) -> dict[str, dict[str, Decimal]]:
    """asset → book → amount."""
    out: dict[str, dict[str, Decimal]] = {}
    for book in _BOOKS:
        for holding in getattr(report, book):
            out.setdefault(holding.asset, {})[book] = holding.amount
    return out


def balances_table(
    report: BalanceReport, *, title: str, before: BalanceReport | None = None
) -> Table:
    """The balances per asset and book, with their USD value (and changes since ``before``)."""
    now, then = _books(report), _books(before) if before else {}
    table = Table(title=title, title_justify="left")
    table.add_column("asset")
    for book in _BOOKS:
        table.add_column(book, justify="right")
    table.add_column("value", justify="right")
    values: dict[str, Decimal] = {}
    for book in _BOOKS:
        for h in getattr(report, book):
            values[h.asset] = values.get(h.asset, Decimal(0)) + (
                -h.usd if book == "debt" else h.usd
            )
    for symbol in [s for s in ASSETS if s in now or s in then]:
        asset = get_asset(symbol)
        cells = []
        for book in _BOOKS:
            amount = now.get(symbol, {}).get(book, Decimal(0))
            cell = asset.format(amount) if amount else "-"
            delta = amount - then.get(symbol, {}).get(book, Decimal(0)) if before else Decimal(0)
            if delta:
                sign = "+" if delta > 0 else "-"
                style = "green" if (delta > 0) != (book == "debt") else "red"
                cell += f" [{style}]({sign}{asset.format(abs(delta))})[/]"
            cells.append(cell)
        table.add_row(symbol, *cells, f"${values.get(symbol, Decimal(0)):,.2f}")
    table.caption = f"total ${report.total_usd:,.2f} · address {report.address}"
    table.caption_justify = "left"
    return table


def _show_balances(
    out: Console,
    wallet: PaperWallet,
    principal: str,
    *,
    title: str,
    before: BalanceReport | None = None,
) -> BalanceReport:
    """The posted balances as a table (changes since ``before``), and the accrual apart."""
    posted, accrual = posted_balances(wallet, principal)
    out.print(balances_table(posted, title=title, before=before))
    line = accrued_line(wallet, accrual)
    if line is not None:
        out.print(f"[dim]{escape(line)}[/]")
    return posted


def _location(db: Path) -> str:
    return os.path.abspath(db)


async def _where(
    out: Console, db: Path, agent: Agent, run_id: UUID | None, wallet: PaperWallet
) -> None:
    if run_id is not None:
        run = await agent.get_run(run_id)
        out.print(
            f"run [bold]{run.run_id}[/] is [bold]{run.status}[/] after {run.last_seq} events."
        )
    check = wallet.verify()
    state = "[green]verified[/]" if check.ok else f"[red]{len(check.problems)} problems[/]"
    out.print(
        f"Ledger: {check.transactions} transactions, {check.postings} postings, every one "
        f"balanced and chained: {state} (head {check.head[:12]}…)."
    )
    where = escape(_location(db))
    if run_id is not None:
        out.print(f"Event log: [bold]{where}[/] (table events, run_id {run_id}).")
    out.print(f"Ledger:    [bold]{where}[/] (tables wallet_transactions, wallet_postings).")


def choose_model(name: str | None, env: Mapping[str, str], out: Console) -> Model:
    """The model named (``--model``, else ``FIDUCIARY_MODEL``), else a provider's when its key
    is set, else the scripted one. Checked before anything starts.

    A model named must load and have its API key (``ConfigurationError`` otherwise); one chosen
    because an API key is set falls back to the scripted model when the provider models are
    missing.
    """
    named = name or env.get("FIDUCIARY_MODEL") or None
    chosen = named or default_model_name(env)
    try:
        model = load_model(chosen)
    except ConfigurationError:
        if named is not None:
            raise
        out.print(
            f"[dim]({escape(chosen)} is not available in this installation: "
            "playing the scripted conversation instead)[/]"
        )
        return load_model("scripted")
    require_key(chosen, env)
    return model


async def _waiting_demo_runs(agent: Agent) -> list[RunRecord]:
    """The demo's runs left waiting for a person (an interrupted demo), oldest first."""
    runs = await agent.store.list_runs(principal=DEMO_PRINCIPAL, limit=100)
    waiting = []
    for run in reversed(runs):  # newest first from the store
        if run.status not in ("awaiting_approval", "awaiting_client_result", "awaiting_input"):
            continue
        first = await agent.store.read_events(run.run_id, limit=5)
        if any(isinstance(e, UserMessage) and e.text == DEMO_CONVERSATION[0] for e in first):
            waiting.append(run)
    return waiting


async def _said(agent: Agent, run_id: UUID) -> int:
    """How many of the demo's messages a run has been told."""
    events = await agent.store.read_events(run_id)
    return sum(1 for e in events if isinstance(e, UserMessage))


def _continue_or_cancel(out: Console, run: RunRecord, *, yes: bool) -> bool:
    """Ask whether to continue a waiting run (True) or cancel it."""
    if yes:
        out.print("[green]continuing it because of --yes[/]")
        return True
    try:
        answer = ask(out, "Continue it (c) or cancel it (x)? \\[C/x] ").strip().lower()
    except EOFError:
        answer = ""
    return answer not in ("x", "cancel")


async def _take_up(
    agent: Agent, waiting: list[RunRecord], *, yes: bool, out: Console
) -> tuple[UUID | None, int]:
    """Offer to continue or cancel each demo run left waiting; the run continued (if any) and
    how many of the demo's messages it was told. A cancelled run's pending action is denied:
    resuming it later pays nothing (the send a new demo asks for again is not paid twice)."""
    for run in waiting:
        pending = await agent.pending_approvals(run_id=run.run_id)
        what = ", ".join(f"{a.capability} {show_usd(a.amount_usd)}" for a in pending) or "a result"
        out.print(
            f"[yellow]A demo run from {run.created_at:%Y-%m-%d %H:%M} UTC is waiting for your "
            f"decision:[/] run {run.run_id} ({escape(what)})."
        )
        if _continue_or_cancel(out, run, yes=yes):
            await resume_with_approvals(agent, run.run_id, DEMO_PRINCIPAL, yes=yes, out=out)
            return run.run_id, await _said(agent, run.run_id)
        await agent.cancel(
            run.run_id, by=DEMO_PRINCIPAL, reason="cancelled when the demo restarted"
        )
        out.print(f"run {run.run_id} cancelled: what it waited for will never run.")
    return None, 0


async def run_demo(
    db: Path, *, yes: bool, out: Console, env: Mapping[str, str], model: str | None = None
) -> int:
    """Play ``DEMO_CONVERSATION`` against the wallet agent; 0 when every turn completed. A demo
    run left waiting (interrupted at a question) is offered first: continue it or cancel it."""
    chosen = choose_model(model, env, out)
    db.parent.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(db)
    wallet = PaperWallet(db)
    memory = wallet_memory(store)
    run_id: UUID | None = None
    status = "completed"
    agent: Agent | None = None
    try:
        agent = trace_from_env(build_wallet_agent(store, wallet, model=chosen, memory=memory))
        start = wallet.balances(DEMO_PRINCIPAL)  # opens the wallet; shown as posted below
        out.print(
            Panel(
                "A paper wallet: real bookkeeping, simulated market. "
                f"Model: {escape(chosen.name)}.\n"
                f"Principal [bold]{DEMO_PRINCIPAL}[/], address {start.address}.",
                title="[bold]fiduciary demo[/]",
                expand=False,
            )
        )
        start = _show_balances(out, wallet, DEMO_PRINCIPAL, title="Balances before")
        try:
            run_id, said = await _take_up(agent, await _waiting_demo_runs(agent), yes=yes, out=out)
            if run_id is not None:
                status = (await agent.get_run(run_id)).status
            for message in DEMO_CONVERSATION[said:] if status == "completed" else ():
                out.print()
                out.print(Panel(escape(message), title=f"[bold]{DEMO_PRINCIPAL}[/]", expand=False))
                seen = await drive_with_approvals(
                    agent, message, DEMO_PRINCIPAL, yes=yes, out=out, run_id=run_id
                )
                run_id = seen[0].run_id
                status = (await agent.get_run(run_id)).status
                if status != "completed":
                    break
        except PromptInterruptedError as exc:
            raise PromptInterruptedError(exc.run_id, db, demo=True) from None
        if status != "completed":
            out.print(f"[red]the run is {status}; the demo stops here[/]")
        out.print()
        _show_balances(out, wallet, DEMO_PRINCIPAL, title="Balances after", before=start)
        await _where(out, db, agent, run_id, wallet)
    finally:
        await _settle(agent, memory)
        wallet.close()
        await store.close()
    return 0 if status == "completed" else 1


_CHAT_HELP = "Commands: /balances, /new (a new conversation), /help, /quit (or Ctrl-D)."


async def run_chat(
    db: Path,
    *,
    principal: str,
    yes: bool,
    out: Console,
    env: Mapping[str, str],
    model: str | None = None,
) -> int:
    """Talk to the wallet agent at the terminal until /quit or the end of input."""
    chosen = choose_model(model, env, out)
    if chosen.name == "scripted":
        out.print(Panel(escape(CAN_DO), title="[bold]fiduciary chat[/]", expand=False))
    db.parent.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(db)
    wallet = PaperWallet(db)
    memory = wallet_memory(store)
    run_id: UUID | None = None
    agent: Agent | None = None
    try:
        agent = trace_from_env(build_wallet_agent(store, wallet, model=chosen, memory=memory))
        out.print(f"[dim]{escape(principal)} · model {escape(chosen.name)} · {_CHAT_HELP}[/]")
        while True:
            try:
                text = ask(out, "[bold cyan]you ›[/] ").strip()
            except (EOFError, KeyboardInterrupt):
                out.print()
                break
            if not text:
                continue
            if text in ("/quit", "/exit"):
                break
            if text == "/help":
                out.print(_CHAT_HELP)
                continue
            if text == "/balances":
                _show_balances(out, wallet, principal, title="Balances")
                continue
            if text == "/new":
                run_id = None
                out.print("[dim]a new conversation[/]")
                continue
            try:
                seen = await drive_with_approvals(
                    agent, text, principal, yes=yes, out=out, run_id=run_id
                )
            except PromptInterruptedError as exc:
                raise PromptInterruptedError(exc.run_id, db) from None
            run_id = seen[0].run_id
            status = (await agent.get_run(run_id)).status
            if status != "completed":
                out.print(f"[yellow]the run is {status}; the next message starts a new one[/]")
                run_id = None
        await _where(out, db, agent, run_id, wallet)
    finally:
        await _settle(agent, memory)
        wallet.close()
        await store.close()
    return 0


async def _settle(agent: Agent | None, memory: Memory) -> None:
    """Let what the agent is remembering in the background finish, then close its memory."""
    if agent is not None and agent.memory is not None:
        await agent.memory.drain()
    await memory.close()

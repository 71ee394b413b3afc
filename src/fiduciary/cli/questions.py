"""``fiduciary questions``: list and answer what the model asked the person (``ask_person``).

An answer is recorded under the rules of the run's agent (``--agent``, else the paper-wallet
agent's), like a decision: the run resumes with it when it is next driven (``runs resume``, a
server's sweep, a worker).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..agent import Agent
from ..display import show_text
from ..exceptions import ApprovalError
from ..questions import PendingQuestion, is_question, list_questions
from ._common import (
    DEFAULT_DB,
    AgentSpec,
    By,
    CliError,
    Db,
    JsonFlag,
    _command,
    _find_approval,
    _jsonable,
    _open,
    _short,
    _when,
    resume_command,
)
from .runs import _agent, _check_agent

__all__ = ["questions_app"]

questions_app = typer.Typer(
    help="List and answer the questions the model asked.", no_args_is_help=True
)

QuestionRef = Annotated[
    str, typer.Argument(metavar="ID", help="A question id or a unique 6+ hex prefix.")
]


def _table(found: list[PendingQuestion]) -> Table:
    table = Table("id", "run", "principal", "question", "choices", "status", "expires")
    for q in found:
        status: str = "answered" if q.status == "client_result" else q.status
        if q.answer is not None:
            status += f": {q.answer}"
        table.add_row(
            _short(q.question_id),
            _short(q.run_id),
            escape(q.principal),
            escape(show_text(q.question).text),
            escape(" | ".join(f"{n}. {c}" for n, c in enumerate(q.choices, 1))),
            escape(status),
            _when(q.expires_at),
        )
    return table


@_command(questions_app, "list")
async def questions_list(
    db: Db = DEFAULT_DB,
    principal: Annotated[str | None, typer.Option(help="Only this principal's questions.")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Answered and expired ones too.")] = False,
    as_json: JsonFlag = False,
) -> int:
    """Questions waiting for an answer (all of them with --all)."""
    async with _open(db) as store:
        found = await list_questions(
            store, principal=principal, status=None if show_all else "pending"
        )
    if as_json:
        for q in found:
            typer.echo(_jsonable(q.to_json()))
    elif found:
        Console().print(_table(found))
    else:
        Console().print("[dim]no questions[/]" if show_all else "[dim]no open questions[/]")
    return 0


@_command(questions_app, "answer")
async def questions_answer(
    question: QuestionRef,
    answer: Annotated[str, typer.Argument(help="The answer: text, or a choice or its number.")],
    by: By,
    db: Db = DEFAULT_DB,
    agent_spec: AgentSpec = None,
) -> int:
    """Answer a question (answer only: the run goes on when it resumes)."""
    if not by.strip():
        raise CliError("--by must name who answers")
    async with _open(db) as store:
        record = await _find_approval(store, question)
        if not is_question(record):
            raise CliError(f"{_short(record.approval_id)} is an approval, not a question")

        async def check(agent: Agent) -> None:
            await _check_agent(agent, record.run_id, agent_spec, any_model=None)

        async with _agent(store, agent_spec, check=check) as agent:
            try:
                answered = await agent.answer(record.approval_id, answer, by=by)
            except ApprovalError as exc:
                raise CliError(f"{exc.message} ({exc.code})", 1) from exc
    shown = PendingQuestion.of(answered)
    out = Console()
    out.print(
        f"[green]answered[/] {_short(shown.question_id)}: {escape(shown.answer or '')} "
        f"· by {escape(by)}",
        soft_wrap=True,
    )
    hint = f"resume the run with: {resume_command(answered.run_id, db, agent_spec)}"
    out.print(hint, soft_wrap=True, markup=False, highlight=False)
    return 0

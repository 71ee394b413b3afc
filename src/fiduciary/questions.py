"""Asking the person mid-run: the built-in capability ``ask_person`` and the answers to it.

The model calls ``ask_person`` (``ask_person(name="request_human_action")`` for the seed's
name) with a question and, optionally, the choices the answer must be one of. The call is
executed by the person (``Executor.PERSON``): as for an approval, it passes the gates, is a
``pending_action`` in the log and a row in the store's approvals (the question's id is that
row's id; it expires after the policy's ``approval_ttl_seconds``), and the run suspends with
status ``awaiting_input``, holding nothing in memory.

``answer`` is a decision on that row, written with the same conditional update as an
approval's: one answer only (a second is refused, ``already_decided``: HTTP 409), by the
run's principal or an admin (``forbidden``), before the question expires (``expired``), one of
the choices when there are choices (``invalid_answer``). Whoever resumes the run next (the
process that answered, a sweep, a worker) gives the model ``{"answer": ...}`` as the tool's
result. An expired question tells the model there was no answer; cancelling the run closes
it unanswered. Each step leaves its audit row: ``pending`` (asked), ``ok`` (answered),
``rejected:expired`` or ``rejected:cancelled``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from ._agent import decisions as _decisions
from .capabilities import (
    Capability,
    Executor,
    Kind,
    Principal,
    Replay,
    capability,
    principal_of,
)
from .exceptions import ApprovalError, CapabilityError
from .stores.base import ApprovalRecord, ApprovalStatus, RunStatus, Store

__all__ = [
    "ASK_PERSON",
    "MAX_ANSWER_CHARS",
    "Answer",
    "PendingQuestion",
    "Question",
    "answer_question",
    "ask_person",
    "checked_answer",
    "is_question",
    "list_questions",
    "waiting_status",
]

MAX_ANSWER_CHARS = 2000

Choice = Annotated[str, Field(min_length=1, max_length=200)]


class Question(BaseModel):
    """What the model asks the person."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(
        min_length=1, max_length=2000, description="The question, as the person will read it."
    )
    choices: list[Choice] = Field(
        default_factory=list,
        max_length=20,
        description="The answers the person may pick from; empty for a free answer.",
    )


class Answer(BaseModel):
    """What the model gets back: the person's answer."""

    answer: str


_DESCRIPTION = (
    "Ask the person a question and wait for the answer (it may take a while; the run is "
    "paused meanwhile). Use it when you cannot go on without something only they know or "
    "decide: a missing detail, a choice between options (give them as choices). Do not use it "
    "to ask for approval of an action: call the action; it asks the person when it must."
)


def _card(args: Question) -> str:
    if not args.choices:
        return args.question
    return f"{args.question} (choices: {', '.join(args.choices)})"


def ask_person(*, name: str = "ask_person", description: str = _DESCRIPTION) -> Capability:
    """The capability that lets the model ask the person a question (add it to an agent's
    capabilities). ``name="request_human_action"`` offers it under the seed's name."""

    async def asked(args: Question) -> Answer:
        # the person executes it: the gates pend it and never call this
        raise CapabilityError("question", "a question is answered by the person, not run")

    asked.__doc__ = description
    return capability(
        name=name,
        description=description,
        kind=Kind.READ,
        replay=Replay.SAFE,  # nothing happened until it is answered: asking again is safe
        executor=Executor.PERSON,
        input_model=Question,
        describe=_card,
    )(asked)


ASK_PERSON = ask_person()
"""``ask_person`` with its default name and description."""


@dataclass(frozen=True, slots=True)
class PendingQuestion:
    """A question as the person is shown it (and, once answered, its answer)."""

    question_id: UUID
    run_id: UUID
    principal: str
    capability: str
    question: str
    choices: tuple[str, ...]
    status: ApprovalStatus
    asked_at: datetime
    expires_at: datetime
    answer: str | None = None
    answered_by: str | None = None

    @classmethod
    def of(cls, record: ApprovalRecord) -> PendingQuestion:
        result = record.client_result if isinstance(record.client_result, dict) else {}
        answer = result.get("answer")
        return cls(
            question_id=record.approval_id,
            run_id=record.run_id,
            principal=record.principal,
            capability=record.capability,
            question=str(record.args.get("question", "")),
            choices=tuple(str(c) for c in record.args.get("choices") or ()),
            status=record.status,
            asked_at=record.created_at,
            expires_at=record.expires_at,
            answer=None if answer is None else str(answer),
            answered_by=record.decided_by if record.status == "client_result" else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "question_id": str(self.question_id),
            "run_id": str(self.run_id),
            "principal": self.principal,
            "capability": self.capability,
            "question": self.question,
            "choices": list(self.choices),
            "status": "answered" if self.status == "client_result" else self.status,
            "asked_at": self.asked_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "answer": self.answer,
            "answered_by": self.answered_by,
        }


_WAITING: dict[str, RunStatus] = {
    "server": "awaiting_approval",
    "client": "awaiting_client_result",
    "person": "awaiting_input",
}


def waiting_status(executor: str) -> RunStatus:
    """The status of a run whose one waiting action is executed by ``executor``."""
    return _WAITING[executor]


def is_question(record: ApprovalRecord) -> bool:
    return record.executor == "person"


async def list_questions(
    store: Store,
    *,
    principal: str | None = None,
    run_id: UUID | None = None,
    status: ApprovalStatus | None = "pending",
) -> list[PendingQuestion]:
    """The questions (by default the unanswered ones) of a principal or a run, oldest first."""
    rows = await store.list_approvals(principal=principal, run_id=run_id, status=status)
    return [PendingQuestion.of(r) for r in rows if is_question(r)]


def checked_answer(record: ApprovalRecord, answer: object) -> str:
    """The answer as it will be recorded, or ``ApprovalError("invalid_answer")``."""
    if not isinstance(answer, str) or not answer.strip():
        raise ApprovalError("invalid_answer", "an answer must be non-empty text")
    text = answer.strip()
    if len(text) > MAX_ANSWER_CHARS:
        raise ApprovalError("invalid_answer", f"an answer is at most {MAX_ANSWER_CHARS} characters")
    choices: Sequence[str] = record.args.get("choices") or ()
    if choices and text not in choices:
        # a choice's number (1-based) picks it too: what a terminal or a chat answers with
        if text.isdigit() and 1 <= int(text) <= len(choices):
            return str(choices[int(text) - 1])
        raise ApprovalError(
            "invalid_answer", f"the answer must be one of: {', '.join(map(str, choices))}"
        )
    return text


async def answer_question(
    ctx: _decisions.Deciding,
    question_id: UUID,
    answer: str,
    *,
    by: Principal | str,
) -> ApprovalRecord:
    """``Agent.answer``: record the person's answer; the run resumes with it. Refusals are
    ``ApprovalError`` and change nothing (see the module's docstring)."""
    try:
        qid = question_id if isinstance(question_id, UUID) else UUID(str(question_id))
    except ValueError as exc:
        raise ApprovalError("unknown", "no such question") from exc
    record = await ctx.store.get_approval(qid)
    if record is None or not is_question(record):
        raise ApprovalError("unknown", "no such question")
    who = principal_of(by)
    if who.actor_id != record.principal and "admin" not in who.scopes:
        raise ApprovalError("forbidden", "this question was asked of another principal")
    text = checked_answer(record, answer)
    return await _decisions.submit_result(ctx, qid, {"answer": text}, by=by)

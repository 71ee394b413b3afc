"""The handlers of ``/questions``: what the model asked the person (``ask_person``), answered.

A question is an approval row whose executor is the person (``fiduciary.questions``): a key
sees its own principal's (an admin key: everyone's); the answer is ``Agent.answer``'s, and the
run resumes in the background. A second answer is refused (409), an expired question too
(410), an answer that is not one of the choices (422).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from starlette.responses import Response

from ..exceptions import ApprovalError
from ..questions import MAX_ANSWER_CHARS, PendingQuestion, is_question
from ..questions import list_questions as _questions
from .pipeline import Call, json_response
from .problems import ProblemError
from .state import Server

__all__ = [
    "AnswerBody",
    "ListQuestionsQuery",
    "QuestionList",
    "QuestionOut",
    "answer_question",
    "get_question",
    "list_questions",
]


class ListQuestionsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: UUID | None = Field(default=None, description="Only this run's questions.")
    status: Literal["pending", "client_result", "expired", "denied"] | None = Field(
        default="pending",
        description="pending (the default), client_result (answered), expired, denied "
        "(closed by a cancel); none: all.",
    )


class AnswerBody(BaseModel):
    """The person's answer: free text, or one of the question's choices (or its number)."""

    model_config = ConfigDict(extra="forbid")

    answer: Annotated[str, StringConstraints(min_length=1, max_length=MAX_ANSWER_CHARS)]


class QuestionOut(BaseModel):
    question_id: UUID
    run_id: UUID
    principal: str
    capability: str
    question: str
    choices: list[str]
    status: Literal["pending", "answered", "expired", "denied"]
    asked_at: datetime
    expires_at: datetime
    answer: str | None = None
    answered_by: str | None = None

    @classmethod
    def of(cls, q: PendingQuestion, server: Server) -> QuestionOut:
        redact = server.agent.redactor.redact_text
        status = "answered" if q.status == "client_result" else q.status
        assert status in ("pending", "answered", "expired", "denied")
        return cls(
            question_id=q.question_id,
            run_id=q.run_id,
            principal=q.principal,
            capability=q.capability,
            question=redact(q.question),
            choices=[redact(c) for c in q.choices],
            status=status,
            asked_at=q.asked_at,
            expires_at=q.expires_at,
            answer=None if q.answer is None else redact(q.answer),
            answered_by=q.answered_by,
        )


class QuestionList(BaseModel):
    questions: list[QuestionOut]


async def list_questions(server: Server, call: Call) -> Response:
    query = call.query_as(ListQuestionsQuery)
    key = call.caller
    found = await _questions(
        server.agent.store,
        principal=None if key.is_admin else key.principal,
        run_id=query.run_id,
        status=query.status,
    )
    return json_response(QuestionList(questions=[QuestionOut.of(q, server) for q in found[:500]]))


async def _visible(server: Server, call: Call) -> PendingQuestion:
    record = await server.visible_approval(call.caller, call.path("question_id"))
    if not is_question(record):
        raise ProblemError("not_found", f"no question {record.approval_id}")
    return PendingQuestion.of(record)


async def get_question(server: Server, call: Call) -> Response:
    return json_response(QuestionOut.of(await _visible(server, call), server))


async def answer_question(server: Server, call: Call) -> Response:
    question = await _visible(server, call)
    body = call.body_as(AnswerBody)
    try:
        answered = await server.agent.answer(
            question.question_id, body.answer, by=server.decider(call.caller)
        )
    except ApprovalError as exc:
        if exc.code == "expired":  # the run records the expiry and tells the model
            server.resume(question.run_id, question.principal)
        raise
    server.resume(question.run_id, question.principal)
    return json_response(QuestionOut.of(PendingQuestion.of(answered), server))

"""A run as the Vercel AI SDK's UI message stream, so that ``useChat`` can drive it.

Two things live here:

- ``UIMessageStream``: the pure translation of a run's events into the protocol's parts
  (server-sent events of JSON objects, header ``x-vercel-ai-ui-message-stream: v1``): ``start``,
  ``start-step`` / ``finish-step`` around each model turn (``reset-step`` for a turn retracted
  after a crash), ``text-*`` and ``reasoning-*``, ``tool-input-start`` /
  ``tool-input-available`` for each call, ``tool-output-available`` / ``tool-output-error`` /
  ``tool-output-denied`` for its outcome, ``error`` and ``finish``. A ``pending_action`` is a
  ``tool-approval-request`` on the call's tool part: ``approvalId`` is the approval's id,
  ``signature`` the digest of the arguments shown, ``approvalDescriptor`` what the person must
  see (description, amount, tier, modifiable fields, guard notes, expiry). Its decision is a
  ``tool-approval-response``.
- ``UIChat``: a Starlette route for ``useChat``'s ``DefaultChatTransport``. A request whose last
  message is the person's text starts the chat's run or continues it; one whose last message is
  the assistant's, with tool parts in state ``approval-responded`` (what
  ``addToolApprovalResponse`` leaves, sent again by ``sendAutomaticallyWhen:
  lastAssistantMessageIsCompleteWithApprovalResponses``), approves or denies those approvals —
  approving exactly the arguments whose digest the part carries — and resumes the run. The
  chat's ``id`` names the run: a UUID is the run id itself, anything else is mapped to one per
  principal. Keys and scopes are the server's (``Authorization: Bearer``); runs and approvals of
  other principals are not found. The run is driven by a task of its own, so a closed tab does
  not stop it halfway; the stream ends when the run completes, fails or waits for a person.

The protocol's part names are those of the ``ai`` package (v6 and later: the approval parts
arrived in v6).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, assert_never
from uuid import UUID

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._logs import logger
from .._text import NOTES_MARKER
from ..agent import Agent
from ..capabilities import Principal
from ..events import (
    ActionResolved,
    Canvas,
    Compaction,
    ContextLayers,
    Event,
    GuardFired,
    PendingAction,
    PendingInput,
    PostGuardFired,
    RunCompleted,
    RunFailed,
    RunStarted,
    TextDelta,
    TextGuardFired,
    ThinkingDelta,
    ThinkingDone,
    TodoUpdate,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
    ToolProgress,
    TurnComplete,
    TurnRetracted,
    Usage,
    UserMessage,
)
from ..exceptions import FiduciaryError
from ..stores.base import ApprovalRecord
from . import auth
from .auth import KeyStore
from .problems import ProblemError, from_core_error, problem_response
from .sse import SSEResponse

__all__ = [
    "HEADERS",
    "ChatDecision",
    "UIChat",
    "UIMessageStream",
    "chat_run_id",
    "decisions_of",
    "encode_part",
]

log = logger("fiduciary.server")

Part = dict[str, Any]
FinishReason = Literal["stop", "length", "content-filter", "tool-calls", "error", "other"]

HEADERS = {
    "x-vercel-ai-ui-message-stream": "v1",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}
DONE = b"data: [DONE]\n\n"
# chat ids that are not UUIDs become run ids in this namespace, per principal
CHAT_NAMESPACE = UUID("5f0c1a52-3b8e-4d5e-9c51-0b4a8d6f2e17")


def encode_part(part: Part) -> bytes:
    """One part as a server-sent event."""
    return f"data: {json.dumps(part, separators=(',', ':'), default=str)}\n\n".encode()


def chat_run_id(chat_id: str, principal: str) -> UUID:
    """The run a chat drives: its id when that is a UUID, else one made from it and its
    principal (two people's chats of the same id are two runs)."""
    try:
        return UUID(chat_id)
    except ValueError:
        return uuid.uuid5(CHAT_NAMESPACE, f"{principal}\x00{chat_id}")


# --- events → parts -------------------------------------------------------------------------


@dataclass
class UIMessageStream:
    """Folds a run's events, in order, into UI message stream parts.

    ``start`` opens the stream (no message id: a stream that resumes after an approval
    continues the assistant message the client already has); ``finish`` closes it, with the
    reason the run stopped for (``stop``, ``error``, or ``tool-calls`` when it waits for a
    person).
    """

    text_id: str | None = None
    reasoning_id: str | None = None
    step_open: bool = False
    turn_done: bool = False
    finished: bool = False

    def start(self, run_id: UUID) -> list[Part]:
        return [{"type": "start", "messageMetadata": {"runId": str(run_id)}}]

    def feed(self, event: Event) -> list[Part]:
        out: list[Part] = []
        match event:
            case RunStarted() | UserMessage() | Compaction() | ContextLayers():
                pass
            case TodoUpdate(todos=todos):
                # a data part with a fixed id: useChat replaces the list in place
                data = {"todos": [item.model_dump() for item in todos]}
                out.append({"type": "data-todos", "id": "todos", "data": data})
            case Canvas():
                out.append(_canvas(event))
            case PendingInput():
                out.append(_pending_input(event))
            case TextDelta(text=text):
                out += self._model_output()
                out += self._close_reasoning()
                if self.text_id is None:
                    self.text_id = f"text-{event.seq}"
                    out.append({"type": "text-start", "id": self.text_id})
                if text:
                    out.append({"type": "text-delta", "id": self.text_id, "delta": text})
            case ThinkingDelta(text=text):
                out += self._model_output()
                out += self._close_text()
                if self.reasoning_id is None:
                    self.reasoning_id = f"reasoning-{event.seq}"
                    out.append({"type": "reasoning-start", "id": self.reasoning_id})
                if text:
                    out.append({"type": "reasoning-delta", "id": self.reasoning_id, "delta": text})
            case ThinkingDone():
                out += self._close_reasoning()
            case ToolCallStart(tool_use_id=call_id, name=name, input=arguments):
                out += self._model_output()
                out += self._close_text() + self._close_reasoning()
                out.append({"type": "tool-input-start", "toolCallId": call_id, "toolName": name})
                out.append(
                    {
                        "type": "tool-input-available",
                        "toolCallId": call_id,
                        "toolName": name,
                        "input": arguments,
                    }
                )
            case ToolCallEnd():
                out.append(_tool_output(event))
            case ToolCallRejected():
                out.append(_tool_rejected(event))
            case PendingAction():
                out.append(_approval_request(event))
            case ActionResolved():
                out += _approval_response(event)
            case GuardFired():
                out.append(_guard(event))
            case PostGuardFired():  # after the result: the same part, marked "post"
                out.append(_guard(event))
            case TextGuardFired():
                out.append(
                    {
                        "type": "data-text-guard",
                        "id": f"text-guard-{event.seq}",
                        "data": {
                            "phase": event.phase,
                            "guard": event.guard,
                            "verdict": event.verdict,
                            "message": event.shown,
                        },
                    }
                )
            case ToolProgress():
                out.append(_progress(event))
            case Usage():
                pass  # the totals go out with the finish
            case TurnComplete():
                out += self._close_text() + self._close_reasoning()
                self.turn_done = True
            case TurnRetracted():
                self.text_id = self.reasoning_id = None
                if self.step_open:
                    out.append({"type": "reset-step"})
                    self.step_open = False
            case RunCompleted():
                out += self.finish("stop", usage=(event.input_tokens, event.output_tokens))
            case RunFailed(message=message, reason=reason):
                out += self._close_text() + self._close_reasoning()
                out.append({"type": "error", "errorText": f"the run failed ({reason}): {message}"})
                out += self.finish("error")
            case _:
                assert_never(event)
        return out

    def finish(self, reason: FinishReason, *, usage: tuple[int, int] | None = None) -> list[Part]:
        """The closing parts (once): open parts and step closed, then ``finish``."""
        if self.finished:
            return []
        self.finished = True
        out = self._close_text() + self._close_reasoning()
        if self.step_open:
            out.append({"type": "finish-step"})
            self.step_open = False
        part: Part = {"type": "finish", "finishReason": reason}
        if usage is not None:
            part["messageMetadata"] = {"inputTokens": usage[0], "outputTokens": usage[1]}
        out.append(part)
        return out

    def _model_output(self) -> list[Part]:
        """A model turn begins or goes on: a new step after the previous turn's tools."""
        out: list[Part] = []
        if self.step_open and self.turn_done:
            out += self._close_text() + self._close_reasoning()
            out.append({"type": "finish-step"})
            self.step_open = False
        if not self.step_open:
            out.append({"type": "start-step"})
            self.step_open = True
            self.turn_done = False
        return out

    def _close_text(self) -> list[Part]:
        if self.text_id is None:
            return []
        part = {"type": "text-end", "id": self.text_id}
        self.text_id = None
        return [part]

    def _close_reasoning(self) -> list[Part]:
        if self.reasoning_id is None:
            return []
        part = {"type": "reasoning-end", "id": self.reasoning_id}
        self.reasoning_id = None
        return [part]


def _json(output: str) -> Any:
    """A tool's output as the person should see it: its JSON body (the guards' notes after it
    are for the model), or its text."""
    body = output.split(NOTES_MARKER, 1)[0]
    try:
        return json.loads(body)
    except ValueError:
        return body


def _approval_request(event: PendingAction) -> Part:
    descriptor: dict[str, Any] = {
        "name": event.name,
        "description": event.description,
        "amountUsd": None if event.amount_usd is None else _decimal(event.amount_usd),
        "tier": event.tier,
        "acknowledge": event.acknowledge,
        "modifiableFields": list(event.modifiable_fields),
        # the sentences the guards wrote for the person (the model's went to the model)
        "guardNotes": [
            {"guard": n.guard, "verdict": n.verdict, "message": n.shown} for n in event.guard_notes
        ],
        "expiresAt": event.expires_at.isoformat(),
        "executor": event.executor,
        "argsDigest": event.args_digest,
    }
    return {
        "type": "tool-approval-request",
        "approvalId": str(event.approval_id),
        "toolCallId": event.tool_use_id,
        "reason": event.description,
        "signature": event.args_digest,
        "approvalDescriptor": descriptor,
    }


def _decimal(value: Decimal) -> str:
    return format(value, "f")


# --- what useChat sends -----------------------------------------------------------------------


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = ""
    role: Literal["user", "assistant", "system"]
    parts: list[dict[str, Any]] = []


class _ChatBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    messages: list[_Message]
    trigger: str = "submit-message"
    # the amount, re-typed by the person, for approvals of the explicit tier: approval id → amount
    confirmAmounts: dict[str, str] = {}  # noqa: N815 - the client's JSON field


@dataclass(frozen=True, slots=True)
class ChatDecision:
    """A person's answer to one approval, as the chat sent it back."""

    approval_id: UUID
    approved: bool
    reason: str = ""
    args_digest: str | None = None


def decisions_of(parts: Iterable[Mapping[str, Any]]) -> list[ChatDecision]:
    """The approvals answered in an assistant message's parts (state ``approval-responded``)."""
    out: list[ChatDecision] = []
    for part in parts:
        kind = part.get("type")
        if not isinstance(kind, str) or not (kind.startswith("tool-") or kind == "dynamic-tool"):
            continue
        approval = part.get("approval")
        if part.get("state") != "approval-responded" or not isinstance(approval, Mapping):
            continue
        try:
            approval_id = UUID(str(approval.get("id")))
        except ValueError:
            continue
        signature = approval.get("signature")
        reason = approval.get("reason")
        out.append(
            ChatDecision(
                approval_id=approval_id,
                approved=approval.get("approved") is True,
                reason=reason if isinstance(reason, str) else "",
                args_digest=signature if isinstance(signature, str) else None,
            )
        )
    return out


# --- the route --------------------------------------------------------------------------------


class UIChat:
    """The ``useChat`` endpoint of an agent: ``UIChat(agent, keys=...).route("/api/chat")``.

    ``aclose`` stops the drives still running (at shutdown).
    """

    def __init__(self, agent: Agent, *, keys: KeyStore, max_body_bytes: int = 256 * 1024) -> None:
        self.agent = agent
        self.keys = keys
        self.max_body_bytes = max_body_bytes
        self._drives: set[asyncio.Task[None]] = set()

    def route(self, path: str = "/api/chat") -> Route:
        return Route(path, self.chat, methods=["POST"], name="ui_chat")

    async def aclose(self) -> None:
        for task in list(self._drives):
            task.cancel()
        await asyncio.gather(*self._drives, return_exceptions=True)

    async def chat(self, request: Request) -> Response:
        try:
            return await self._chat(request)
        except ProblemError as refused:
            return refused.response()
        except FiduciaryError as exc:
            return from_core_error(exc).response()
        except Exception:
            log.exception("POST %s failed", request.url.path)
            return problem_response("internal_error", "the server failed; it was logged")

    async def _chat(self, request: Request) -> Response:
        key = await self._authenticate(request)
        if not key.allows(auth.RUNS_WRITE):
            raise ProblemError("insufficient_scope", f"this needs the scope {auth.RUNS_WRITE}")
        body = await self._body(request)
        if not body.messages:
            raise ProblemError("invalid_request", "the chat has no messages")
        principal = Principal(key.principal, key.scopes)
        run_id = chat_run_id(body.id, key.principal)
        run = await self.agent.store.get_run(run_id)
        if run is not None and not (key.is_admin or run.principal == key.principal):
            raise ProblemError("not_found", f"no run {run_id}")
        last = body.messages[-1]
        stream: AsyncGenerator[Event, None]
        if last.role == "user":
            text = "".join(
                str(p.get("text", "")) for p in last.parts if p.get("type") == "text"
            ).strip()
            if not text:
                raise ProblemError("invalid_request", "the last message has no text")
            owner = principal if run is None else Principal(run.principal, key.scopes)
            stream = self.agent.run(text, principal=owner, run_id=run_id)
        elif last.role == "assistant":
            if run is None:
                raise ProblemError("not_found", f"no run {run_id}")
            await self._decide(key, run_id, last, body.confirmAmounts)
            stream = self.agent.resume(run_id)
        else:
            raise ProblemError(
                "invalid_request", "the last message is the person's or the assistant's"
            )
        events = self._drive(stream)
        # errors of the start (a busy run) are answered as such; None: nothing new to drive
        first = await anext(events, None)
        if isinstance(first, Exception):
            raise first
        return SSEResponse(self._parts(run_id, first, events), headers=HEADERS)

    async def _authenticate(self, request: Request) -> auth.ApiKey:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        challenge = {"www-authenticate": 'Bearer realm="fiduciary"'}
        if scheme.lower() != "bearer" or not value.strip() or len(value) > 200:
            raise ProblemError(
                "unauthenticated", "send Authorization: Bearer <API key>", headers=challenge
            )
        key = await self.keys.verify(value.strip())
        if key is None:
            raise ProblemError("unauthenticated", "the API key is not valid", headers=challenge)
        return key

    async def _body(self, request: Request) -> _ChatBody:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise ProblemError("unsupported_media_type", "send the body as application/json")
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > self.max_body_bytes:
                raise ProblemError("payload_too_large", f"at most {self.max_body_bytes} bytes")
        try:
            return _ChatBody.model_validate_json(raw)
        except ValidationError as exc:
            raise ProblemError("invalid_request", "the body is not a chat request") from exc

    async def _decide(
        self, key: auth.ApiKey, run_id: UUID, last: _Message, amounts: Mapping[str, str]
    ) -> None:
        """Approve or deny what the assistant message answers; results of client-executed
        actions (a tool part with its output) are submitted."""
        pending = {a.approval_id: a for a in await self.agent.pending_approvals(run_id=run_id)}
        decisions = [d for d in decisions_of(last.parts) if d.approval_id in pending]
        results = _client_results(last.parts, {a.tool_use_id: a for a in pending.values()})
        if (decisions or results) and not key.allows(auth.APPROVALS_DECIDE):
            raise ProblemError(
                "insufficient_scope", f"this needs the scope {auth.APPROVALS_DECIDE}"
            )
        by = Principal(key.principal, frozenset({auth.ADMIN}) if key.is_admin else frozenset())
        for decision in decisions:
            if decision.approved:
                await self.agent.approve(
                    decision.approval_id,
                    by=by,
                    args_digest=decision.args_digest,
                    confirm_amount=amounts.get(str(decision.approval_id)),
                )
            else:
                await self.agent.deny(decision.approval_id, by=by, reason=decision.reason)
        for approval_id, output in results:
            await self.agent.submit_result(approval_id, output, by=by)

    def _drive(self, stream: AsyncGenerator[Event, None]) -> AsyncIterator[Event | Exception]:
        """Drive the run in a task of its own; its events (or its error) come through a queue."""
        queue: asyncio.Queue[Event | Exception | None] = asyncio.Queue()

        async def pump() -> None:
            try:
                async for event in stream:
                    queue.put_nowait(event)
            except Exception as exc:
                queue.put_nowait(exc)
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(pump())
        self._drives.add(task)
        task.add_done_callback(self._drives.discard)

        async def items() -> AsyncIterator[Event | Exception]:
            while (item := await queue.get()) is not None:
                yield item

        return items()

    async def _parts(
        self, run_id: UUID, first: Event | None, events: AsyncIterator[Event | Exception]
    ) -> AsyncIterator[bytes]:
        ui = UIMessageStream()
        for part in ui.start(run_id) + (ui.feed(first) if first is not None else []):
            yield encode_part(part)
        async for item in events:
            if isinstance(item, Exception):
                log.warning("run %s: the chat's drive failed: %s", run_id, item)
                shown = str(item) if isinstance(item, FiduciaryError) else "the server failed"
                for part in [{"type": "error", "errorText": shown}, *ui.finish("error")]:
                    yield encode_part(part)
                break
            for part in ui.feed(item):
                yield encode_part(part)
        if not ui.finished:  # the run waits for a person (or had nothing left to do)
            run = await self.agent.store.get_run(run_id)
            waits = run is not None and run.status in (
                "awaiting_approval",
                "awaiting_client_result",
                "awaiting_input",
                "awaiting_child",  # its delegate call's child has not ended
            )
            for part in ui.finish("tool-calls" if waits else "other"):
                yield encode_part(part)
        yield DONE


def _client_results(
    parts: Iterable[Mapping[str, Any]], pending: Mapping[str, ApprovalRecord]
) -> list[tuple[UUID, Any]]:
    """(approval id, output) of the client-executed actions whose results the chat carries."""
    out: list[tuple[UUID, Any]] = []
    for part in parts:
        call_id = part.get("toolCallId")
        record = pending.get(call_id) if isinstance(call_id, str) else None
        if record is None or record.executor != "client":
            continue
        if part.get("state") == "output-available":
            out.append((record.approval_id, part.get("output")))
    return out


def _tool_output(event: ToolCallEnd) -> Part:
    if event.is_error:
        return {
            "type": "tool-output-error",
            "toolCallId": event.tool_use_id,
            "errorText": event.output,
        }
    return {
        "type": "tool-output-available",
        "toolCallId": event.tool_use_id,
        "output": _json(event.output),
    }


def _tool_rejected(event: ToolCallRejected) -> Part:
    # every rejected call was started first (in this stream, or in the one before an approval,
    # whose tool part the client holds)
    if event.reason in ("denied", "expired"):
        return {"type": "tool-output-denied", "toolCallId": event.tool_use_id}
    return {
        "type": "tool-output-error",
        "toolCallId": event.tool_use_id,
        "errorText": event.message,
    }


def _approval_response(event: ActionResolved) -> list[Part]:
    """The person's decision on the call's approval (none for a client's result)."""
    if event.decision == "client_result":
        return []
    response: Part = {
        "type": "tool-approval-response",
        "approvalId": str(event.approval_id),
        "approved": event.decision == "approved",
    }
    if event.decision == "expired":
        response["reason"] = "the approval expired"
    elif event.reason:
        response["reason"] = event.reason
    return [response]


def _guard(event: GuardFired | PostGuardFired) -> Part:
    data = {
        "toolCallId": event.tool_use_id,
        "guard": event.guard,
        "verdict": event.verdict,
        "message": event.shown,  # the sentence for the person
    }
    if type(event) is PostGuardFired:  # after the result: the same part, marked "post"
        data["phase"] = "post"
    return {"type": "data-guard", "id": f"guard-{event.seq}", "data": data}


def _canvas(event: Canvas) -> Part:
    # the html is the model's: a client shows it only in a sandboxed frame (docs/canvases.md)
    data = {"toolCallId": event.tool_use_id, "title": event.title, "kind": event.kind}
    data["html"] = event.html
    return {"type": "data-canvas", "id": f"canvas-{event.seq}", "data": data}


def _pending_input(event: PendingInput) -> Part:
    # reserved: no engine emits it yet; passed on as data for a client that can show a form
    data: dict[str, Any] = {"inputId": event.input_id, "schema": event.input_schema}
    data["prompt"] = event.prompt
    return {"type": "data-pending-input", "id": f"input-{event.input_id}", "data": data}


def _progress(event: ToolProgress) -> Part:
    return {
        "type": "data-tool-progress",
        "id": f"progress-{event.tool_use_id}",
        "data": {"toolCallId": event.tool_use_id, "message": event.message, "pct": event.pct},
        "transient": True,
    }

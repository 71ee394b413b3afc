"""A pending write's approval offered to the person at the MCP client (elicitation); a question
the model asked (``ask_person``) too: its form asks for the answer (one of its choices when it
has any), recorded with ``Agent.answer``; declined, the question is closed unanswered.

When a ``tools/call`` answers ``pending_approval`` and the client declared form elicitation,
the server asks there too, showing the exact arguments, their digest and the tier:

- on a connection with a back-channel (stdio, protocol up to 2025-11-25) the server sends
  ``elicitation/create`` during the call and waits for the answer (at most until the approval
  expires);
- on the per-request protocol (2026-07-28, also over stateless HTTP) the call answers an
  ``InputRequiredResult`` whose ``request_state`` is signed by this server; the client asks the
  person and calls again with the answer.

The answer is a decision like the console's, by the caller's principal and bound to the
digest the person was shown: ``accept`` with ``approve`` ticked approves (an ``explicit`` action
needs its amount re-typed), ``decline`` (or ``approve`` left unticked) denies, ``cancel`` leaves
it pending. An answer is only taken for the call it was asked about, in an exchange this server
started: a seeded or replayed ``request_state`` is ignored, and the call answers its pending
result. Over HTTP the key must also carry ``approvals:decide``. Nothing else the client sends
(``"approved": true`` in the arguments, an approval id) decides anything.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

import anyio

from .._logs import logger
from ..capabilities import Principal
from ..exceptions import ApprovalError
from ._sdk import MODERN_PROTOCOL_VERSIONS, MCPError, mcp_types
from .bridge import CallOutcome, McpGateway

__all__ = ["ApprovalAsker", "elicits_forms"]

log = logger("fiduciary.mcp")

_KEY = "fiduciary_approval"
_MAX_WAIT = 900.0  # a back-channel question is never held longer than this


def elicits_forms(ctx: Any) -> bool:
    """Whether the client of this request declared form elicitation (``{}`` means form)."""
    session = getattr(ctx, "session", None)
    caps = None if session is None else session.client_capabilities
    asked = None if caps is None else caps.elicitation
    return asked is not None and (asked.form is not None or asked.url is None)


class ApprovalAsker:
    """Offers a pending approval through elicitation and applies the person's answer."""

    def __init__(self, gateway: McpGateway, *, secret: bytes | None = None) -> None:
        self.gateway = gateway
        self._secret = secret or secrets.token_bytes(32)

    async def offer(
        self,
        ctx: Any,
        principal: Principal,
        params: mcp_types.CallToolRequestParams,
        pending: CallOutcome,
    ) -> CallOutcome | mcp_types.InputRequiredResult:
        """The call's answer once the person at the client was asked (or could not be)."""
        approval_id = str(pending.details.get("approval_id", ""))
        digest = str(pending.details.get("args_digest", ""))
        token = self._token(principal, approval_id, digest)
        session = ctx.session
        per_request = session.protocol_version in MODERN_PROTOCOL_VERSIONS
        if per_request or not session.can_send_request:
            if not per_request:
                return pending  # no back-channel (stateless HTTP before 2026-07-28)
            responses = params.input_responses
            if responses is None and params.request_state is None:
                return mcp_types.InputRequiredResult(
                    input_requests={_KEY: self._question(pending)}, request_state=token
                )
            state = params.request_state or ""
            answer = (responses or {}).get(_KEY)
            if not hmac.compare_digest(state.encode(), token.encode()):
                log.info("an elicitation answer for another exchange was ignored")
                return pending
            if not isinstance(answer, mcp_types.ElicitResult):
                return pending
            return await self._apply(principal, params, pending, answer)
        question = self._question(pending).params
        assert isinstance(question, mcp_types.ElicitRequestFormParams)
        with anyio.move_on_after(self._seconds_left(pending)):
            try:
                answer = await session.elicit_form(
                    question.message, question.requested_schema, related_request_id=ctx.request_id
                )
            except MCPError as exc:  # the client could not ask after all: it stays pending
                log.info("the MCP client did not ask for approval: %s", exc.message)
                return pending
            return await self._apply(principal, params, pending, answer)
        return pending  # no answer before the approval expires

    async def _apply(
        self,
        principal: Principal,
        params: mcp_types.CallToolRequestParams,
        pending: CallOutcome,
        answer: mcp_types.ElicitResult,
    ) -> CallOutcome:
        if answer.action == "cancel":
            return pending
        agent = self.gateway.agent
        approval_id = UUID(str(pending.details["approval_id"]))
        content: Mapping[str, Any] = answer.content or {}
        try:
            if pending.details.get("executor") == "person":  # a question (ask_person)
                if answer.action == "accept":
                    given = content.get("answer")
                    await agent.answer(approval_id, str(given or ""), by=principal.actor_id)
                else:
                    reason = "declined to answer at the MCP client"
                    await agent.deny(approval_id, by=principal.actor_id, reason=reason)
            elif answer.action == "accept" and content.get("approve") is True:
                await agent.approve(
                    approval_id,
                    by=principal.actor_id,
                    args_digest=str(pending.details["args_digest"]),
                    confirm_amount=_typed(content.get("amount")),
                )
            else:
                await agent.deny(
                    approval_id, by=principal.actor_id, reason="declined at the MCP client"
                )
        except ApprovalError as exc:  # e.g. decided in the console meanwhile: its outcome
            now = await self._again(principal, params, pending)
            return _not_decided(now, exc) if now.status == "pending_approval" else now
        return await self._again(principal, params, pending)

    async def _again(
        self, principal: Principal, params: mcp_types.CallToolRequestParams, pending: CallOutcome
    ) -> CallOutcome:
        """The call asked again, its links to the console where the pending answer's were."""
        console = pending.details.get("console_url")
        return await self.gateway.call(
            principal,
            params.name,
            dict(params.arguments or {}),
            console_url=console if isinstance(console, str) else None,
        )

    def _question(self, pending: CallOutcome) -> mcp_types.ElicitRequest:
        details = pending.details
        if details.get("executor") == "person":
            return _asked(details)
        explicit = details.get("acknowledge") == "amount"
        properties: dict[str, Any] = {
            "approve": {
                "type": "boolean",
                "title": "Approve",
                "description": "Tick to approve this exact action; leave unticked to deny it.",
                "default": False,
            }
        }
        required = ["approve"]
        if explicit:
            properties["amount"] = {
                "type": "string",
                "title": "Amount in USD",
                "description": "Re-type the amount to approve it.",
            }
            required.append("amount")
        shown = json.dumps(details.get("arguments", {}), ensure_ascii=False, sort_keys=True)
        lines = [
            f"Approve: {details.get('description', '')}",
            f"Arguments: {shown[:2000]}",
            f"Digest: {details.get('args_digest', '')}",
            f"Tier: {details.get('tier', '')}",
        ]
        for note in details.get("notes") or []:
            kind = "Warning" if note.get("verdict") == "warn" else "Note"
            lines.append(f"{kind}: {note.get('message', '')}")
        lines.append(f"Expires: {details.get('expires_at', '')}")
        if explicit:
            lines.append("Re-type the amount in USD to approve it.")
        return mcp_types.ElicitRequest(
            params=mcp_types.ElicitRequestFormParams(
                message="\n".join(lines),
                requested_schema={"type": "object", "properties": properties, "required": required},
            )
        )

    def _seconds_left(self, pending: CallOutcome) -> float:
        try:
            expires = datetime.fromisoformat(str(pending.details["expires_at"]))
        except (KeyError, ValueError):
            return _MAX_WAIT
        left = (expires - self.gateway.agent.clock.now()).total_seconds()
        return max(1.0, min(_MAX_WAIT, left))

    def _token(self, principal: Principal, approval_id: str, digest: str) -> str:
        """This server's mark on one question: for this principal, approval and digest."""
        body = f"{principal.actor_id}\x00{approval_id}\x00{digest}".encode()
        mac = hmac.new(self._secret, body, hashlib.sha256).hexdigest()
        return f"{approval_id}.{mac}"


def _asked(details: Mapping[str, Any]) -> mcp_types.ElicitRequest:
    """A question the model asked (``ask_person``) as a form: one answer, a choice of its
    choices when it has any."""
    answer: dict[str, Any] = {"type": "string", "title": "Answer"}
    choices = [str(c) for c in details.get("choices") or []]
    if choices:
        answer["enum"] = choices
    lines = [str(details.get("question") or ""), f"Expires: {details.get('expires_at', '')}"]
    return mcp_types.ElicitRequest(
        params=mcp_types.ElicitRequestFormParams(
            message="\n".join(lines),
            requested_schema={
                "type": "object",
                "properties": {"answer": answer},
                "required": ["answer"],
            },
        )
    )


def _typed(value: Any) -> str | None:
    return None if value is None or isinstance(value, bool) else str(value)[:64]


def _not_decided(pending: CallOutcome, exc: ApprovalError) -> CallOutcome:
    details = dict(pending.details, not_decided=exc.code)
    text = f"Not approved at the client ({exc}). {pending.text}"
    return CallOutcome(pending.status, text, pending.run_id, details)

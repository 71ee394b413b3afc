"""The handlers of ``/approvals``: list and read approvals, approve, deny, report a result.

Every decision is made by the core (``Agent.approve`` / ``deny`` / ``submit_result``); the
server checks who may see the approval, then resumes the run in the background. An approval of
a run a feature drives (an apps engine's, ``deciders.py``) is decided by that feature's agent,
with the same checks, and the feature continues what waited on it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar
from uuid import UUID

from pydantic import BaseModel
from starlette.responses import Response

from ..agent import Agent
from ..capabilities import Principal
from ..delegation import lineage
from ..dual_control import as_voted, progress, rule_for
from ..events import GuardNote, PendingAction, RunStarted
from ..exceptions import ApprovalError
from ..stores.base import ApprovalRecord
from .deciders import OtherDecider
from .pipeline import Call, json_response
from .schemas import (
    ApprovalList,
    ApprovalOut,
    ApproveBody,
    DelegatedByOut,
    DenyBody,
    ListApprovalsQuery,
    RegenerateBody,
    ResultBody,
)
from .state import Server

_Body = TypeVar("_Body", bound=BaseModel)

__all__ = [
    "approve",
    "deny",
    "get_approval",
    "list_approvals",
    "regenerate",
    "submit_result",
]


async def _out(server: Server, records: Sequence[ApprovalRecord]) -> list[ApprovalOut]:
    """Approvals with the description and guard notes their pending_action showed."""
    shown: dict[UUID, PendingAction] = {}
    above: dict[UUID, list[DelegatedByOut]] = {}
    store = server.agent.store
    for run_id in dict.fromkeys(r.run_id for r in records):
        for logged in await store.read_events(run_id):
            if isinstance(logged, PendingAction):
                shown[logged.approval_id] = logged
            elif isinstance(logged, RunStarted) and logged.parent_run_id is not None:
                above[run_id] = [
                    DelegatedByOut(run_id=link.run_id, delegate=link.delegate, title=link.title)
                    for link in (await lineage(store, run_id))[1:]
                ]
    out: list[ApprovalOut] = []
    rules = server.agent.gates.policy.dual_control
    sign = server.agent.gates.policy.signatures
    for record in records:
        event = shown.get(record.approval_id)
        notes: list[GuardNote] = list(event.guard_notes) if event else []
        cap = server.agent.gates.get(record.capability)
        dual = None
        rule = rule_for(rules, record.amount_usd, None if cap is None else cap.operation)
        if rule is not None:
            votes = await server.agent.store.list_votes(record.approval_id)
            dual = rule, progress(rule, votes, record.args_digest)
            # after an edit the set votes on other arguments: show those, everywhere
            record = as_voted(record, votes)
        out.append(
            ApprovalOut.of(
                record,
                server.agent.redactor,
                description=event.description if event else "",
                guard_notes=notes,
                dual=dual,
                signature_required=sign is not None
                and sign.requires(record.tier, record.amount_usd),
            ).model_copy(
                update={
                    "delegated_by": above.get(record.run_id, []),
                    "regenerable": cap is not None and cap.regenerate is not None,
                    "quoted_at": event.quoted_at if event else None,
                    "regenerated_from": event.regenerated_from if event else None,
                    "steps": event.steps if event else None,
                }
            )
        )
    return out


async def list_approvals(server: Server, call: Call) -> Response:
    query = call.query_as(ListApprovalsQuery)
    key = call.caller
    records = await server.agent.store.list_approvals(
        principal=None if key.is_admin else key.principal,
        run_id=query.run_id,
        status=query.status,
    )
    rules = server.agent.gates.policy.dual_control
    if not key.is_admin and any(key.principal in r.members for r in rules):
        # a member of a dual-control group sees what waits for its vote, whoever proposed it
        seen = {r.approval_id for r in records}
        others = await server.agent.store.list_approvals(run_id=query.run_id, status=query.status)
        records += [r for r in others if r.approval_id not in seen and server.is_approver(key, r)]
        records.sort(key=lambda r: (r.created_at, str(r.approval_id)))
    return json_response(ApprovalList(approvals=await _out(server, records[:500])))


async def get_approval(server: Server, call: Call) -> Response:
    record = await server.visible_approval(call.caller, call.path("approval_id"))
    return json_response((await _out(server, [record]))[0])


async def _owner(server: Server, record: ApprovalRecord) -> tuple[Agent, OtherDecider | None]:
    """The agent that decides ``record``: the served agent's, or a feature's that drives its run
    (an apps engine's), with the owner that then continues it."""
    for owner in server.other_deciders:
        agent = await owner.agent_for(record)
        if agent is not None:
            return agent, owner
    return server.agent, None


async def _decide(
    server: Server,
    call: Call,
    body_type: type[_Body],
    decide: Callable[[Agent, UUID, _Body, Principal], Awaitable[ApprovalRecord]],
) -> Response:
    """Decide the approval ``call``'s path names (one ``call.caller`` may see) with ``decide``
    (the agent, the approval id, the parsed body, who decides), then let its run go on."""
    record = await server.visible_approval(call.caller, call.path("approval_id"))
    body = call.body_as(body_type)
    agent, owner = await _owner(server, record)

    async def go_on(decided: ApprovalRecord) -> None:
        if owner is not None:
            await owner.continue_after(decided)
        else:
            server.resume(record.run_id, record.principal)

    try:
        decided = await decide(agent, record.approval_id, body, server.decider(call.caller))
    except ApprovalError as exc:
        # the run records the expiry (or the refused report) and tells the model
        if exc.code in ("expired", "result_refused"):
            await go_on(record)
        raise
    if decided.status != "pending":  # under dual control a vote short of N decides nothing
        await go_on(decided)
    return json_response((await _out(server, [decided]))[0])


async def approve(server: Server, call: Call) -> Response:
    return await _decide(
        server,
        call,
        ApproveBody,
        lambda agent, approval_id, body, by: agent.approve(
            approval_id,
            by=by,
            edits=body.edits,
            confirm_amount=body.confirm_amount,
            args_digest=body.args_digest,
            assertion=body.assertion,
        ),
    )


async def deny(server: Server, call: Call) -> Response:
    return await _decide(
        server,
        call,
        DenyBody,
        lambda agent, approval_id, body, by: agent.deny(approval_id, by=by, reason=body.reason),
    )


async def regenerate(server: Server, call: Call) -> Response:
    """The approval ends superseded; the run, resumed, waits on a new one with fresh
    arguments (its ``regenerated_from`` names this one)."""
    return await _decide(
        server,
        call,
        RegenerateBody,
        lambda agent, approval_id, body, by: agent.regenerate(
            approval_id, by=by, args_digest=body.args_digest
        ),
    )


async def submit_result(server: Server, call: Call) -> Response:
    return await _decide(
        server,
        call,
        ResultBody,
        lambda agent, approval_id, body, by: agent.submit_result(approval_id, body.result, by=by),
    )

"""Private: the decisions on pending actions (``Agent.approve``, ``deny``, ``submit_result``).

A decision is written to the approval row only, with a conditional update (``pending`` →
decided); whoever resumes the run next appends ``action_resolved`` and runs what was approved.
Before anything that can run is decided, the row must bind to the ``pending_action`` the run's
log recorded (``_loop/binding.py``). Edited arguments go through validation, guards and policy
again, and an ``explicit`` action needs its amount re-typed. Every refusal is an
``ApprovalError`` that changes nothing (an expired row is marked expired). Under a dual-control
rule of the policy an approval is a vote (``dual_control``), and the N-th vote for the same
arguments decides.

The decisions receive a ``Deciding``, the few things of the agent they use, not the agent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal
from uuid import UUID

from pydantic import ValidationError

from .._logs import logger
from .._loop import Transcript
from .._loop.binding import logged_action, mismatch
from ..capabilities import (
    Capability,
    Executor,
    Kind,
    Principal,
    args_digest,
    out_of_range,
    principal_of,
)
from ..clock import Clock
from ..dual_control import DualControl, as_voted, count_for, rule_for
from ..exceptions import ApprovalError, CapabilityError, StaleEpochError
from ..gates import Attempt, CallScope, Gates
from ..policy import Policy
from ..redaction import Redactor
from ..signed_approvals import SIGNATURE_REQUIRED, SignatureCheck, binding
from ..stores.base import ApprovalRecord, ApprovalVote, AuditRecord, Store, existing_run

__all__ = [
    "Deciding",
    "approve",
    "audit_refusal",
    "deny",
    "regenerate",
    "signing_binding",
    "submit_result",
]

log = logger("fiduciary.agent")  # the decisions are the agent's: its logger, as before


@dataclass(frozen=True, slots=True)
class Deciding:
    """What a decision needs of its agent."""

    store: Store
    gates: Gates
    clock: Clock
    redactor: Redactor
    transcript: Callable[[], Transcript]  # a new, empty one (``Agent._transcript``)
    signatures: SignatureCheck | None = None  # ``Agent.signatures``


@dataclass(frozen=True, slots=True)
class _Terms:
    """What an approval would approve: the arguments (after edits), their tier and amount."""

    record: ApprovalRecord
    rule: DualControl | None
    approved: dict[str, Any]
    tier: Literal["confirm", "explicit"]
    amount: Decimal | None

    def binding(self) -> dict[str, str | None]:
        """What a signature over these terms signs (``signed_approvals.binding``)."""
        return binding(
            self.record, args_digest=_digest(self.approved), tier=self.tier, amount_usd=self.amount
        )


async def _terms(
    ctx: Deciding,
    approval_id: UUID,
    by: Principal | str,
    edits: Mapping[str, Any] | None,
    digest: str | None,
) -> _Terms:
    """The pending approval ``by`` may approve and what it would approve: the arguments shown
    (under dual control, after an approver's edit, the edited ones the set votes on; a
    ``digest`` of the proposed ones votes for those) with ``edits``, validated, re-checked and
    re-priced when they differ from the proposed ones; ``ApprovalError`` otherwise."""
    record = await _open_approval(ctx, approval_id, by, None, bind=True, act="approve")
    cap = ctx.gates.get(record.capability)
    if cap is None:
        raise ApprovalError("unknown", f"{record.capability} is no longer available")
    rule = _rule(ctx, record)
    if cap.executor is Executor.CLIENT:
        raise ApprovalError(
            "client_executed",
            "the client performs this action; report its result with submit_result",
        )
    if cap.executor is Executor.PERSON:
        raise ApprovalError("question", "this is a question to the person; answer it")
    new_args = dict(record.args)
    if rule is not None:
        voted = as_voted(record, await ctx.store.list_votes(record.approval_id))
        if voted.approved_args is not None and digest in (None, voted.approved_digest):
            new_args = dict(voted.approved_args)
        if digest is not None and digest not in (record.args_digest, voted.approved_digest):
            raise ApprovalError(
                "digest_mismatch", "the arguments shown are not the ones awaiting approval"
            )
    elif digest is not None and digest != record.args_digest:
        raise ApprovalError(
            "digest_mismatch", "the arguments shown are not the ones awaiting approval"
        )
    if edits:
        bad = sorted(set(edits) - set(record.modifiable_fields))
        if bad:
            raise ApprovalError(
                "field_not_modifiable", f"these fields cannot be edited: {', '.join(bad)}"
            )
        new_args.update(edits)
    try:
        model = cap.input_model.model_validate(new_args)
    except ValidationError as exc:
        raise ApprovalError("invalid_edit", f"the edited arguments are invalid: {exc}") from exc
    absurd = out_of_range(model.model_dump())
    if absurd is not None:
        raise ApprovalError("invalid_edit", f"the edited arguments are invalid: {absurd}")
    approved = model.model_dump(mode="json")
    tier = record.tier
    amount = record.amount_usd
    # arguments that are the proposed ones are no edit (tier and amount stay as shown)
    if _digest(approved) != record.args_digest:
        tier, amount = await _recheck(ctx, record, cap, model)
    return _Terms(record, rule, approved, tier, amount)


async def signing_binding(
    ctx: Deciding,
    approval_id: UUID,
    *,
    by: Principal | str,
    edits: Mapping[str, Any] | None = None,
    args_digest: str | None = None,
) -> dict[str, str | None]:
    """What ``by`` must sign to approve ``approval_id`` with ``edits``: the binding of the
    arguments, tier and amount ``approve`` would approve (the console's signing options)."""
    return (await _terms(ctx, approval_id, by, edits, args_digest)).binding()


async def approve(
    ctx: Deciding,
    approval_id: UUID,
    *,
    by: Principal | str,
    edits: Mapping[str, Any] | None = None,
    confirm_amount: Decimal | str | None = None,
    args_digest: str | None = None,
    assertion: Any = None,
) -> ApprovalRecord:
    """``Agent.approve``: approve a pending action (optionally editing its modifiable fields).
    Under dual control this is one approver's vote: the row stays ``pending`` until the N-th."""
    terms = await _terms(ctx, approval_id, by, edits, args_digest)
    record, rule, approved, tier, amount = (
        terms.record,
        terms.rule,
        terms.approved,
        terms.tier,
        terms.amount,
    )
    if tier == "explicit":
        _check_acknowledgement(confirm_amount, amount)
    sign = ctx.gates.policy.signatures
    if sign is not None and sign.requires(tier, amount):
        if ctx.signatures is None or assertion is None:
            raise ApprovalError("signature_required", SIGNATURE_REQUIRED)
        who = principal_of(by).actor_id
        try:
            await ctx.signatures.verify(
                record, approver=who, signed=terms.binding(), assertion=assertion
            )
        except ApprovalError as exc:
            await audit_refusal(ctx, record, who, exc)
            raise
    if rule is not None:
        vote = ApprovalVote(
            approval_id=record.approval_id,
            approver=principal_of(by).actor_id,
            args_digest=_digest(approved),
            approved_args=approved,
            tier=tier,
            amount_usd=amount,
            at=ctx.clock.now(),
        )
        return await _vote(ctx, record, rule, vote)
    decided = record.with_(
        status="approved",
        decided_by=principal_of(by).actor_id,
        decided_at=ctx.clock.now(),
        approved_args=approved,
        approved_digest=_digest(approved),
        tier=tier,
        amount_usd=amount,
    )
    if not await ctx.store.decide_approval(decided):
        raise ApprovalError("already_decided", "this approval was decided meanwhile")
    return decided


async def audit_refusal(
    ctx: Deciding, record: ApprovalRecord, who: str, refused: ApprovalError
) -> None:
    """A refused decision as an audit row of its run (who tried, on which approval, why):
    outcome ``rejected:<code>``. Nothing else is written: the row joins the run's log under
    its current epoch, with no event and no status (a run driven meanwhile: tried again)."""
    cap = ctx.gates.get(record.capability)
    row = AuditRecord(
        run_id=record.run_id,
        at=ctx.clock.now(),
        principal=who,
        capability=record.capability,
        kind="decision" if cap is None else cap.kind.value,
        tool_use_id=record.tool_use_id,
        outcome=f"rejected:{refused.code}",
        tier=record.tier,
        amount_usd=record.amount_usd,
        input={"approval_id": str(record.approval_id)},
        output=ctx.redactor.redact_text(refused.message)[:500],
    )
    for _attempt in range(3):
        run = await ctx.store.get_run(record.run_id)
        if run is None:
            break
        try:
            await ctx.store.commit(record.run_id, epoch=run.epoch, audit=[row])
        except StaleEpochError:  # taken over meanwhile: under its new epoch
            continue
        return
    log.error("approval %s: the refusal of %s could not be audited", record.approval_id, who)


def _rule(ctx: Deciding, record: ApprovalRecord) -> DualControl | None:
    """The dual-control rule this approval needs (from the agent's policy now), or None."""
    rules = ctx.gates.policy.dual_control
    if not rules:
        return None
    cap = ctx.gates.get(record.capability)
    return rule_for(rules, record.amount_usd, None if cap is None else cap.operation)


async def _vote(
    ctx: Deciding, record: ApprovalRecord, rule: DualControl, vote: ApprovalVote
) -> ApprovalRecord:
    """One approver's vote; the N-th for the same arguments decides the row (one conditional
    update: of two approvers completing the set at once, one writes it, and both see it)."""
    if not await ctx.store.add_vote(vote):
        current = await ctx.store.get_approval(record.approval_id)
        if current is None or current.status != "pending":
            status = "gone" if current is None else current.status
            raise ApprovalError(
                "expired" if status == "expired" else "already_decided",
                f"this approval is already {status}",
            )
        raise ApprovalError("already_voted", "you have already approved these arguments")
    # read after our vote committed: of two votes committed at once, the later reader sees both
    approvers = count_for(await ctx.store.list_votes(record.approval_id), vote.args_digest)
    log.info(
        "approval %s: %s approved (%d of %d, %s)",
        record.approval_id,
        vote.approver,
        len(approvers),
        rule.required,
        rule.group,
    )
    if len(approvers) < rule.required:
        return record
    decided = record.with_(
        status="approved",
        decided_by=", ".join(approvers[: rule.required]),
        decided_at=vote.at,
        approved_args=vote.approved_args,
        approved_digest=vote.args_digest,
        tier=vote.tier,
        amount_usd=vote.amount_usd,
    )
    if await ctx.store.decide_approval(decided):
        return decided
    current = await ctx.store.get_approval(record.approval_id)
    if (
        current is not None
        and current.status == "approved"
        and current.approved_digest == vote.args_digest
    ):
        return current  # another approver's vote completed the same set: one decision
    status = "gone" if current is None else current.status
    raise ApprovalError(
        "expired" if status == "expired" else "already_decided",
        f"this approval was {status} meanwhile",
    )


async def _recheck(
    ctx: Deciding, record: ApprovalRecord, cap: Capability, model: Any
) -> tuple[Any, Decimal | None]:
    """Edited arguments go through validation, guards and policy again."""
    events = await ctx.store.read_events(record.run_id)
    transcript = ctx.transcript()
    for event in events:
        transcript.apply(event)
    run = await existing_run(ctx.store, record.run_id)

    gates = ctx.gates
    scope = CallScope(
        run_id=record.run_id,
        principal=Principal(run.principal, frozenset(run.scopes)),
        allowed=frozenset(gates.names),
        allowed_kinds=frozenset(Kind),
        history=transcript.history,
    )
    attempt = Attempt(
        scope, gates.parse(record.tool_use_id, cap.name, model.model_dump(mode="json"))
    )
    outcome = await gates.run_guards(attempt, "pre")
    if outcome.block is not None:
        raise ApprovalError("invalid_edit", f"the edit is blocked: {outcome.block[2].message}")
    if not await gates.authorized(attempt):
        raise ApprovalError("invalid_edit", "the edited call is not authorized")
    try:
        decision = await gates.decide(attempt)
    except CapabilityError as exc:  # an amount beyond any sane range
        raise ApprovalError("invalid_edit", f"the edit is refused: {exc.message}") from exc
    if decision.tier == "deny":
        raise ApprovalError("invalid_edit", f"the edited call is not permitted: {decision.reason}")
    tier = Policy.higher(record.tier, decision.tier)
    return ("explicit" if tier == "explicit" else "confirm"), decision.amount_usd


async def deny(
    ctx: Deciding, approval_id: UUID, *, by: Principal | str, reason: str = ""
) -> ApprovalRecord:
    """``Agent.deny``: decline a pending action; it never executes."""
    record = await _open_approval(ctx, approval_id, by, None, act="deny")
    decided = record.with_(
        status="denied",
        decided_by=principal_of(by).actor_id,
        decided_at=ctx.clock.now(),
        reason=ctx.redactor.redact_text(reason)[:500] or None,
    )
    if not await ctx.store.decide_approval(decided):
        raise ApprovalError("already_decided", "this approval was decided meanwhile")
    return decided


async def regenerate(
    ctx: Deciding, approval_id: UUID, *, by: Principal | str, args_digest: str | None = None
) -> ApprovalRecord:
    """``Agent.regenerate``: the pending action ends ``superseded``; the drive that takes the
    decision up makes its call anew with fresh arguments (``_loop/regenerating.py``). Who may
    approve may ask for it; the row must bind to the action the run's log shows."""
    record = await _open_approval(ctx, approval_id, by, args_digest, bind=True, act="approve")
    cap = ctx.gates.get(record.capability)
    if cap is None or cap.regenerate is None or record.executor == "person":
        raise ApprovalError(
            "not_regenerable",
            f"{record.capability} cannot make its arguments anew: approve or deny it",
        )
    superseded = record.with_(
        status="superseded",
        decided_by=principal_of(by).actor_id,
        decided_at=ctx.clock.now(),
        reason="fresh arguments were asked for (a new quote)",
    )
    if not await ctx.store.decide_approval(superseded):
        raise ApprovalError("already_decided", "this approval was decided meanwhile")
    return superseded


async def submit_result(
    ctx: Deciding, approval_id: UUID, result: Any, *, by: Principal | str | None = None
) -> ApprovalRecord:
    """``Agent.submit_result``: record the result of a client-executed action."""
    record = await _open_approval(ctx, approval_id, by, None, bind=True)
    if record.executor == "server":
        raise ApprovalError("not_client_executed", "this action is executed by the server")
    cap = ctx.gates.get(record.capability)
    if cap is None:
        raise ApprovalError("unknown", f"{record.capability} is no longer available")
    refusal: str | None = None
    if cap.check_result is not None:  # the report is checked first: what is recorded is its
        try:  # outcome (the result, or the refusal the run is told)
            args = cap.input_model.model_validate(record.args)
        except ValidationError as exc:
            raise ApprovalError(
                "invalid_edit", "the recorded arguments no longer validate"
            ) from exc
        result, refusal = await cap.check_result(args, result, str(record.approval_id))
    try:
        cap.dump_output(result)
    except ValidationError as exc:
        raise ApprovalError(
            "invalid_edit",
            f"the result does not match {cap.name}'s output: {exc.error_count()} error(s)",
        ) from exc
    decided = record.with_(
        status="client_result",
        decided_by=record.principal if by is None else principal_of(by).actor_id,
        decided_at=ctx.clock.now(),
        approved_args=record.args,
        approved_digest=record.args_digest,
        client_result=result,
    )
    if not await ctx.store.decide_approval(decided):
        raise ApprovalError("already_decided", "this approval was decided meanwhile")
    if refusal is not None:  # recorded as the call's outcome; the caller is refused
        raise ApprovalError("result_refused", refusal)
    return decided


async def _open_approval(
    ctx: Deciding,
    approval_id: UUID,
    by: Principal | str | None,
    digest: str | None,
    *,
    bind: bool = False,
    act: Literal["approve", "deny", "result"] = "result",
) -> ApprovalRecord:
    """The pending approval a decision is about, or ``ApprovalError``. ``bind``: the row
    must match the pending action in the run's log (what the person was shown); denying
    needs no such check (nothing runs). Under dual control only the group's members approve
    (never the proposer, whatever its scopes); a member may deny too."""
    if not isinstance(approval_id, UUID):
        try:
            approval_id = UUID(str(approval_id))
        except ValueError as exc:
            raise ApprovalError("unknown", "no such approval") from exc
    record = await ctx.store.get_approval(approval_id)
    if record is None:
        raise ApprovalError("unknown", "no such approval")
    if by is not None:
        try:
            _check_decider(ctx, record, principal_of(by), act=act)
        except ApprovalError as exc:
            if exc.code == "separation_of_duties":
                await audit_refusal(ctx, record, principal_of(by).actor_id, exc)
            raise
    if record.status != "pending":
        raise ApprovalError(
            "expired" if record.status == "expired" else "already_decided",
            f"this approval is already {record.status}",
        )
    if ctx.clock.now() >= record.expires_at:
        expired = record.with_(status="expired", decided_at=ctx.clock.now())
        await ctx.store.decide_approval(expired)
        raise ApprovalError("expired", "this approval has expired")
    if digest is not None and digest != record.args_digest:
        raise ApprovalError(
            "digest_mismatch", "the arguments shown are not the ones awaiting approval"
        )
    if bind:
        shown, principal = logged_action(await ctx.store.read_events(record.run_id), record)
        why = mismatch(record, shown, principal)
        if why is not None:
            log.error("approval %s refused: its row was altered (%s)", approval_id, why)
            raise ApprovalError(
                "tampered",
                f"this approval's stored record does not match the action the run recorded "
                f"({why}); it cannot be approved. Deny it and ask for the action again.",
            )
    return record


def _check_decider(ctx: Deciding, record: ApprovalRecord, who: Principal, *, act: str) -> None:
    rule = _rule(ctx, record)
    if rule is not None and act == "approve":
        if who.actor_id == record.principal:
            why = (
                f"the proposer of an action cannot approve it: it needs {rule.required} "
                f"approvers of {rule.group}"
            )
        elif who.actor_id not in rule.members:
            why = f"only members of {rule.group} can approve this action"
        else:
            return
        # refused decisions are recorded: who tried, on what, and why
        log.warning("approval %s: %s refused: %s", record.approval_id, who.actor_id, why)
        raise ApprovalError("separation_of_duties", why)
    if rule is not None and act == "deny" and who.actor_id in rule.members:
        return  # any member's deny denies (a result is reported by the principal's client)
    if who.actor_id != record.principal and "admin" not in who.scopes:
        raise ApprovalError("forbidden", "this approval belongs to another principal")


def _digest(args: dict[str, Any]) -> str:
    # ``approve`` has a parameter named ``args_digest``, which hides the function there
    return args_digest(args)


def _check_acknowledgement(given: Decimal | str | None, amount: Decimal | None) -> None:
    if amount is None:
        return
    if given is None:
        raise ApprovalError(
            "acknowledgement_required",
            f"this action needs the amount re-typed to approve it (${amount:,.2f})",
        )
    try:
        value = Decimal(str(given).replace(",", "").replace("$", "").strip())
    except InvalidOperation as exc:
        raise ApprovalError(
            "acknowledgement_required", "the amount re-typed is not a number"
        ) from exc
    if out_of_range(value) is not None or out_of_range(amount) is not None:
        raise ApprovalError(
            "acknowledgement_required", "the amount re-typed does not match the action's amount"
        )
    cent = Decimal("0.01")
    try:  # bounded above, so rounding to the cent cannot overflow the context
        same = value.quantize(cent) == amount.quantize(cent)
    except InvalidOperation:
        same = False
    if not same:
        raise ApprovalError(
            "acknowledgement_required", "the amount re-typed does not match the action's amount"
        )

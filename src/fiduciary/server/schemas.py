"""The bodies the HTTP API accepts and returns (pydantic models; the OpenAPI document is built
from them). Requests forbid unknown fields; money is a decimal string, never a float."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints

from ..dual_control import DualControl, Progress
from ..events import GuardNote
from ..redaction import Redactor
from ..steps import CardStep
from ..stores.base import ApprovalRecord, ApprovalStatus, ApprovalVote, RunRecord, RunStatus

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_SEQ",
    "ApprovalList",
    "ApprovalOut",
    "ApproveBody",
    "Balances",
    "BalancesOut",
    "CardNote",
    "CreateRunBody",
    "DenyBody",
    "EventsQuery",
    "HookBody",
    "ListApprovalsQuery",
    "ListRunsQuery",
    "MessageBody",
    "ResultBody",
    "RunAccepted",
    "RunList",
    "RunOut",
    "WhoAmI",
    "nests_deeper_than",
]

Message = Annotated[str, StringConstraints(min_length=1, max_length=20_000)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateRunBody(_Request):
    """Start a run with the person's first message."""

    message: Message
    capabilities: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] | None = (
        Field(default=None, max_length=200, description="Narrow the run's whitelist to these.")
    )
    plan_first: bool = Field(default=False, description="Allow only read, preview and propose.")


class MessageBody(_Request):
    """Continue a finished run's conversation with a new message."""

    message: Message


class ApproveBody(_Request):
    """Approve a pending action. ``args_digest`` must be the digest the approver was shown."""

    args_digest: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    edits: dict[str, JsonValue] | None = Field(
        default=None, description="New values for the action's modifiable fields only."
    )
    confirm_amount: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        default=None, description="The amount re-typed, for actions of tier explicit."
    )
    assertion: dict[str, JsonValue] | None = Field(
        default=None,
        description="A passkey's WebAuthn assertion over the approval's binding, when the "
        "policy requires a signature (see GET /approvals/{approval_id}/signing-options).",
    )


class RegenerateBody(_Request):
    """Ask for fresh arguments (a new quote) for a pending action whose capability can make
    them. ``args_digest``, when given, must be the digest the person was shown."""

    args_digest: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = None


class DenyBody(_Request):
    reason: Annotated[str, StringConstraints(max_length=2000)] = ""


class ResultBody(_Request):
    """The result of an action the client executed itself."""

    result: JsonValue


class HookBody(_Request):
    """An inbound message from a channel: starts a run, or continues ``run_id``."""

    text: Message
    run_id: UUID | None = None


MAX_JSON_DEPTH = 32  # arrays and objects in a request body; validation recurses below this
MAX_SEQ = 2**63 - 1  # the largest integer every store holds (SQLite INTEGER, PostgreSQL bigint)


class ListRunsQuery(_Request):
    status: RunStatus | None = None
    limit: int = Field(default=50, ge=1, le=500)


class ListApprovalsQuery(_Request):
    run_id: UUID | None = None
    status: ApprovalStatus | None = "pending"


class EventsQuery(_Request):
    after: int = Field(default=0, ge=0, le=MAX_SEQ, description="Send the events after this seq.")
    follow: bool = Field(default=True, description="Keep the stream open for new events.")


class RunOut(BaseModel):
    run_id: UUID
    principal: str
    status: RunStatus
    title: str
    created_at: datetime
    updated_at: datetime
    last_seq: int
    output: JsonValue = Field(
        default=None,
        description="A completed run's typed answer, as JSON (its agent's output_type); "
        "null when it has none.",
    )

    @classmethod
    def of(cls, run: RunRecord, output: JsonValue = None) -> RunOut:
        return cls(
            run_id=run.run_id,
            principal=run.principal,
            status=run.status,
            title=run.title,
            created_at=run.created_at,
            updated_at=run.updated_at,
            last_seq=run.last_seq,
            output=output,
        )


class RunList(BaseModel):
    runs: list[RunOut]


class RunAccepted(BaseModel):
    """The run was recorded; it continues in the background. Follow ``events_url``."""

    run_id: UUID
    first_seq: int = Field(description="The seq of the first event this request recorded.")
    events_url: str


class CardNote(BaseModel):
    """A guard's hint or warning as the person reads it on the card: the sentence the guard
    wrote for the person, not the one for the model."""

    guard: str
    verdict: Literal["hint", "warn"]
    message: str


class VoteOut(BaseModel):
    approver: str
    at: datetime
    args_digest: str


class DualControlOut(BaseModel):
    """Where an approval under dual control stands: ``progress`` reads
    "1 of 2 approved (alice, 12:03)"; ``superseded`` are votes an edit left behind."""

    group: str
    required: int
    members: list[str]
    approvals: list[VoteOut]
    superseded: list[VoteOut]
    progress: str
    edited: bool = Field(
        default=False, description="An edit started the current set (the progress says so)."
    )


class DelegatedByOut(BaseModel):
    """A run above a delegated run's approval: whose task the action serves."""

    run_id: UUID
    delegate: str | None = Field(description="the name its parent called it by; null: a person's")
    title: str


class ApprovalOut(BaseModel):
    """A pending (or decided) action. ``args`` are redacted for display; ``args_digest`` binds
    the decision to the exact arguments."""

    approval_id: UUID
    run_id: UUID
    principal: str = Field(description="The proposer: the principal the run acts for.")
    tool_use_id: str
    capability: str
    args: dict[str, Any]
    args_digest: str
    tier: Literal["confirm", "explicit"]
    amount_usd: Decimal | None
    modifiable_fields: list[str]
    executor: Literal["server", "client", "person"]
    status: ApprovalStatus
    created_at: datetime
    expires_at: datetime
    decided_by: str | None = None
    decided_at: datetime | None = None
    reason: str | None = None
    guard_notes: list[CardNote] = Field(default_factory=list)
    description: str = ""
    dual_control: DualControlOut | None = None
    signature_required: bool = Field(
        default=False,
        description="Whether approving it, unedited, needs a passkey's signature (the policy's "
        "SignatureRule); an edit can change the tier and amount, and so this.",
    )
    edited: bool = Field(
        default=False,
        description="Under dual control: an approver's edit started a new approval set, and "
        "args, args_digest, tier and amount_usd are the edited ones the set votes on "
        "(proposed_args_digest: the digest of the arguments the run proposed).",
    )
    proposed_args_digest: str = ""
    regenerable: bool = Field(
        default=False,
        description="Fresh arguments (a new quote) can be asked for: POST "
        "/approvals/{approval_id}/regenerate.",
    )
    quoted_at: datetime | None = Field(
        default=None, description="When the price the arguments rest on was quoted."
    )
    regenerated_from: UUID | None = Field(
        default=None, description="The approval this one replaced (it ended superseded)."
    )
    steps: list[CardStep] | None = Field(
        default=None,
        description="A call made of steps: each step's operation, description, asset and "
        "amount, in order; one approval covers them all.",
    )
    delegated_by: list[DelegatedByOut] = Field(
        default_factory=list,
        description="For an action of a delegated run: the runs that delegated it, its parent "
        "first, up to the run a person started (fiduciary.delegation). Empty otherwise.",
    )

    @classmethod
    def of(
        cls,
        record: ApprovalRecord,
        redactor: Redactor,
        *,
        description: str = "",
        guard_notes: list[GuardNote] | None = None,
        dual: tuple[DualControl, Progress] | None = None,
        signature_required: bool = False,
    ) -> ApprovalOut:
        args = record.approved_args if record.approved_args is not None else record.args
        return cls(
            approval_id=record.approval_id,
            run_id=record.run_id,
            principal=record.principal,
            tool_use_id=record.tool_use_id,
            capability=record.capability,
            args=redactor.redact(args),
            args_digest=record.approved_digest or record.args_digest,
            tier=record.tier,
            amount_usd=record.amount_usd,
            modifiable_fields=list(record.modifiable_fields),
            executor=record.executor,
            status=record.status,
            created_at=record.created_at,
            expires_at=record.expires_at,
            decided_by=record.decided_by,
            decided_at=record.decided_at,
            reason=record.reason,
            guard_notes=[
                CardNote(guard=n.guard, verdict=n.verdict, message=n.shown)
                for n in guard_notes or []
            ],
            description=description,
            dual_control=None if dual is None else _dual_out(*dual),
            signature_required=signature_required,
            edited=record.status == "pending" and record.approved_digest is not None,
            proposed_args_digest=record.args_digest,
        )


def _dual_out(rule: DualControl, progress: Progress) -> DualControlOut:
    def votes(of: tuple[ApprovalVote, ...]) -> list[VoteOut]:
        return [VoteOut(approver=v.approver, at=v.at, args_digest=v.args_digest) for v in of]

    return DualControlOut(
        group=rule.group,
        required=rule.required,
        members=sorted(rule.members),
        approvals=votes(progress.votes),
        superseded=votes(progress.superseded),
        progress=progress.text(),
        edited=progress.edited,
    )


class ApprovalList(BaseModel):
    approvals: list[ApprovalOut]


class WhoAmI(BaseModel):
    principal: str
    scopes: list[str]
    key_id: str


class Balances(BaseModel):
    """What a balances hook may return instead of a plain mapping: the amounts, and what each is
    worth in USD where the agent knows a price (the console shows both)."""

    balances: dict[str, Decimal]
    usd: dict[str, Decimal] = Field(
        default_factory=dict, description="The USD value of a balance, by the same key."
    )
    total_usd: Decimal | None = Field(default=None, description="What it all adds up to, in USD.")


class BalancesOut(Balances):
    principal: str


def nests_deeper_than(data: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` levels (walked without recursion:
    validation and digests recurse, and must never meet a body that exhausts the stack)."""
    level: list[Any] = [data]
    for _ in range(limit):
        level = [
            child
            for node in level
            if isinstance(node, dict | list)
            for child in (node.values() if isinstance(node, dict) else node)
        ]
        if not level:
            return False
    return any(isinstance(node, dict | list) for node in level)

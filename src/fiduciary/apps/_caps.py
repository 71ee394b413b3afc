"""The capabilities an app's runs get: the engine's, bounded and watched, plus the apps' own.

A hook invocation may make at most 10 tool calls (the agent's ``max_tool_calls``); each call gets
at most 10 s and its result at most 4 KB (``bounded``). In intent runs a capability records the
grant use that let a call through (``Watched``). ``app_enable``, ``app_approve_intents`` and
``app_grant`` are how the engine asks a person: their tier is fixed at ``confirm``; so is
``request_grant``'s, which a message run's model calls to ask for a grant (``grant_request``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..capabilities import CallContext, Capability, Kind, Tier, capability

__all__ = [
    "HOOK_CALL_SECONDS",
    "HOOK_RESULT_CHARS",
    "HOOK_TOOL_CALLS",
    "MAX_GRANT_TTL",
    "GrantRequest",
    "Watched",
    "bounded",
    "engine_capabilities",
    "grant_request",
    "intent_pricer",
    "state_capability",
]

HOOK_TOOL_CALLS = 10
HOOK_CALL_SECONDS = 10.0
HOOK_RESULT_CHARS = 4096

Noted = Callable[[Capability, BaseModel], None]
Executed = Callable[[Capability, BaseModel, CallContext, Decimal | None], Awaitable[None]]


def bounded(cap: Capability, *, tier: Tier | None = None) -> Capability:
    """The capability with the per-invocation limits (and a fixed tier, when given)."""
    chars = cap.max_result_chars
    return dataclasses.replace(
        cap,
        timeout=min(cap.timeout, HOOK_CALL_SECONDS),
        max_result_chars=HOOK_RESULT_CHARS if chars is None else min(chars, HOOK_RESULT_CHARS),
        tier=tier if tier is not None else cap.tier,
    )


@dataclass(frozen=True, slots=True, eq=False)
class Watched(Capability):
    """A capability whose arguments are noted before the policy decides (grants bind resources)
    and whose executions are reported (grant uses are recorded)."""

    noted: Noted | None = None
    executed: Executed | None = None

    async def amount(self, args: BaseModel, ctx: CallContext) -> Decimal | None:
        if self.noted is not None:
            self.noted(self, args)
        return await Capability.amount(self, args, ctx)

    async def invoke(self, args: BaseModel, ctx: CallContext) -> Any:
        result = await Capability.invoke(self, args, ctx)
        if self.executed is not None:
            await self.executed(self, args, ctx, await Capability.amount(self, args, ctx))
        return result


def watched(cap: Capability, *, noted: Noted, executed: Executed) -> Watched:
    fields = {f.name: getattr(cap, f.name) for f in dataclasses.fields(Capability)}
    return Watched(**fields, noted=noted, executed=executed)


class IntentItem(BaseModel):
    summary: str
    capability: str
    args: dict[str, Any]


def state_capability(read: Callable[[str], Awaitable[dict[str, Any]]]) -> Capability:
    """``app_state``: an app's state as stored now (every hook run has it)."""

    @capability(kind=Kind.READ)
    async def app_state(app_id: str) -> dict[str, Any]:
        """The app's state as stored now (edits made since the context was built included)."""
        return await read(app_id)

    return app_state


IntentAmount = Callable[[str, dict[str, Any], CallContext], Awaitable[Decimal | None]]


def intent_pricer(capabilities: Callable[[], Mapping[str, Capability]]) -> IntentAmount:
    """What an intent moves, in USD, as its capability prices it (None: unknown)."""

    async def price(name: str, args: dict[str, Any], ctx: CallContext) -> Decimal | None:
        cap = capabilities().get(name)
        if cap is None:
            return None
        try:
            model = cap.input_model.model_validate(args)
        except ValueError:
            return None  # refused when it runs; until then its amount is unknown
        return await cap.amount(model, ctx)

    return price


def engine_capabilities(
    *,
    enabled: Callable[[str, str], Awaitable[None]],
    granted: Callable[[dict[str, Any], CallContext], Awaitable[str]],
    intent_amount: IntentAmount | None = None,
) -> list[Capability]:
    """``app_enable``, ``app_approve_intents``, ``app_grant``; their handlers run only after a
    person approved the exact arguments (tier fixed at ``confirm``). ``intent_amount`` prices
    one intent (its capability's own USD amount); a batch's amount is their sum, unknown when
    one of them is."""

    async def batch_amount(args: Any, ctx: CallContext) -> Decimal | None:
        if intent_amount is None:
            return None
        total = Decimal(0)
        for item in args.intents:
            amount = await intent_amount(item.capability, item.args, ctx)
            if amount is None:
                return None
            total += amount
        return total

    def describe_enable(args: Any) -> str:
        limits = ", ".join(f"{k} up to ${v}" for k, v in sorted(args.limits_usd.items()))
        return (
            f"Enable app {args.app_id} ({args.mode}): it may call "
            f"{', '.join(args.capabilities) or 'nothing'}; permissions "
            f"{', '.join(args.permissions) or 'none'}; limits {limits or 'none'}"
        )

    @capability(kind=Kind.PROPOSE, tier="confirm", describe=describe_enable)
    async def app_enable(
        app_id: str,
        mode: str,
        capabilities: list[str],
        permissions: list[str],
        limits_usd: dict[str, str],
    ) -> dict[str, str]:
        """Enable an app with exactly these capabilities, permissions and limits."""
        await enabled(app_id, mode)
        return {"enabled": app_id, "mode": mode}

    def describe_batch(args: Any) -> str:
        lines = "; ".join(f"{i + 1}. {item.summary}" for i, item in enumerate(args.intents))
        return f"App {args.app_id} proposes {len(args.intents)} action(s): {lines}"

    @capability(kind=Kind.PROPOSE, tier="confirm", describe=describe_batch, amount_usd=batch_amount)
    async def app_approve_intents(app_id: str, intents: list[IntentItem]) -> dict[str, int]:
        """Approve, as one, the listed intents of an app (one digest over the list)."""
        return {"approved": len(intents)}

    def describe_grant(args: Any) -> str:
        limits = ", ".join(f"{k} up to ${v}" for k, v in sorted(args.limits_usd.items()))
        scope = f" on {', '.join(args.resources)}" if args.resources else ""
        return (
            f"Let app {args.app_id} run {', '.join(args.operations)}{scope} without asking, "
            f"{limits}, for {args.ttl_seconds:g} s: {args.summary}"
        )

    @capability(kind=Kind.PROPOSE, tier="confirm", describe=describe_grant)
    async def app_grant(
        app_id: str,
        summary: str,
        operations: list[str],
        limits_usd: dict[str, str],
        resources: list[str],
        ttl_seconds: float,
        ctx: CallContext,
    ) -> dict[str, str]:
        """Grant an app, for a while, the listed operations up to the limits."""
        grant_id = await granted(
            {
                "app_id": app_id,
                "operations": operations,
                "limits_usd": limits_usd,
                "resources": resources,
                "ttl_seconds": ttl_seconds,
            },
            ctx,
        )
        return {"grant_id": grant_id}

    return [app_enable, app_approve_intents, app_grant]


MAX_GRANT_TTL = 3600.0  # seconds: what a model may ask for at most


class GrantRequest(BaseModel):
    """What the model asks for with ``request_grant``."""

    model_config = ConfigDict(extra="forbid")

    operations: list[str] = Field(
        min_length=1, description="The operations (the app's permissions) to run without a card."
    )
    limit_usd: Decimal = Field(gt=0, description="The USD limit, for each operation.")
    ttl_seconds: float = Field(
        gt=0, le=MAX_GRANT_TTL, description="How long the grant lasts once approved, in seconds."
    )
    reason: str = Field(
        min_length=1, max_length=500, description="Why, as the person will read it."
    )


_REQUEST_DESCRIPTION = (
    "Ask the person for a scoped, temporary grant: for ttl_seconds after their approval, calls "
    "of the listed operations run without another card, each operation up to limit_usd in "
    "total. Use it when a write of yours was refused or needs a person's approval each time, "
    "then call the write again once the grant is approved. The run waits for the person."
)


def grant_request(
    app_id: str,
    permissions: Collection[str] | None,
    granted: Callable[[dict[str, Any], CallContext], Awaitable[str]],
) -> Capability:
    """``request_grant``: the model asks for a grant (operations among the app's
    ``permissions``, a USD limit, a TTL); a person approves it (tier fixed at ``confirm``) and
    the approval creates it (``granted``). Operations outside the permissions are refused
    before any card. ``permissions`` None: any (the decider's, which only decides)."""
    allowed = None if permissions is None else frozenset(permissions)

    class AppGrantRequest(GrantRequest):
        @field_validator("operations")
        @classmethod
        def _permitted(cls, operations: list[str]) -> list[str]:
            outside = [] if allowed is None else sorted(set(operations) - allowed)
            if allowed is not None and outside:
                have = ", ".join(sorted(allowed)) or "none"
                raise ValueError(
                    f"the app has no permission for {', '.join(outside)} (it has: {have})"
                )
            return sorted(set(operations))

    def describe(args: Any) -> str:
        return (
            f"App {app_id} asks to run {', '.join(args.operations)} without asking, up to "
            f"${args.limit_usd} each, for {args.ttl_seconds:g} s: {args.reason}"
        )

    async def request_grant(args: Any, ctx: CallContext) -> dict[str, Any]:
        limit = str(args.limit_usd)
        spec = {
            "app_id": app_id,
            "operations": list(args.operations),
            "limits_usd": {op: limit for op in args.operations},
            "resources": [],
            "ttl_seconds": args.ttl_seconds,
        }
        grant_id = await granted(spec, ctx)
        return {
            "granted": True,
            "grant_id": grant_id,
            "operations": list(args.operations),
            "limit_usd": limit,
            "ttl_seconds": args.ttl_seconds,
        }

    return capability(
        name="request_grant",
        description=_REQUEST_DESCRIPTION,
        kind=Kind.PROPOSE,
        tier="confirm",
        input_model=AppGrantRequest,
        describe=describe,
    )(request_grant)

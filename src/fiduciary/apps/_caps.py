"""The capabilities an app's runs get: the engine's, bounded and watched, plus the apps' own.

A hook invocation may make at most 10 tool calls (the agent's ``max_tool_calls``); each call gets
at most 10 s and its result at most 4 KB (``bounded``). In intent runs a capability records the
grant use that let a call through (``Watched``). ``app_enable``, ``app_approve_intents`` and
``app_grant`` are how the engine asks a person: their tier is fixed at ``confirm``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

from ..capabilities import CallContext, Capability, Kind, Tier, capability

__all__ = [
    "HOOK_CALL_SECONDS",
    "HOOK_RESULT_CHARS",
    "HOOK_TOOL_CALLS",
    "Watched",
    "bounded",
    "engine_capabilities",
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

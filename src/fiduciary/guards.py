"""Guards: checks that run around a call and pass, hint, warn or block.

A guard has a name, a tier (safety > financial > ux: the order the runner asks them in) and a
phase (``pre``: before authorization and policy; ``post``: after execution, with the call's
``output``, hints and warnings only, each recorded as a ``post_guard_fired`` event after the
call's ``tool_call_end`` and added to its result for the model: ``_loop.after``). A block
becomes a tool error the model can act on; hints and warnings go to the model with the result
and to the person on the pending action. A verdict speaks to both in their own words:
``message`` is for the model (what to do next: "call balance_check first"), ``for_person`` is
the sentence a person reads on an approval card (what it means for them: "check every detail
before approving"). Every shipped guard writes both; a guard that writes no ``for_person``
shows its ``message`` on the card. A pre-guard's ``Verdict.confirm`` is a warning that
also makes a write wait for a person: the call's tier is raised to at least ``confirm``,
whatever its amount (it can never lower a tier, and a read is not held).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol
from uuid import UUID

from ._text import NOTES_MARKER
from .capabilities import Capability, Kind, Principal

__all__ = [
    "CallRecord",
    "Guard",
    "GuardCall",
    "GuardOutcome",
    "IrreversibilityGuard",
    "RetryProtectionGuard",
    "RunHistory",
    "Verdict",
    "default_guards",
    "run_guards",
]

GuardTier = Literal["safety", "financial", "ux"]
Phase = Literal["pre", "post"]
_TIER_ORDER: dict[str, int] = {"safety": 0, "financial": 1, "ux": 2}


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: Literal["pass", "hint", "warn", "block"]
    message: str = ""  # for the model
    needs_person: bool = False  # a write waits for a person's approval, whatever its tier
    for_person: str = ""  # for the person, on the card ("": the message is shown)

    @classmethod
    def ok(cls) -> Verdict:
        return _PASS

    @classmethod
    def hint(cls, message: str, *, for_person: str = "") -> Verdict:
        return cls("hint", message, for_person=for_person)

    @classmethod
    def warn(cls, message: str, *, for_person: str = "") -> Verdict:
        return cls("warn", message, for_person=for_person)

    @classmethod
    def block(cls, message: str, *, for_person: str = "") -> Verdict:
        return cls("block", message, for_person=for_person)

    @classmethod
    def confirm(cls, message: str, *, for_person: str = "") -> Verdict:
        """A warning that also holds the write for a person's approval (tier >= confirm)."""
        return cls("warn", message, needs_person=True, for_person=for_person)

    @property
    def shown(self) -> str:
        """What a person reads: ``for_person``, or the message if the guard wrote none."""
        return self.for_person or self.message


_PASS = Verdict("pass")


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One call the model made earlier in the run, as the log records it."""

    tool_use_id: str
    name: str
    kind: str | None
    input: dict[str, Any]
    args_digest: str
    at: datetime
    ok: bool | None = None  # None: no outcome (yet)
    output: str | None = None

    def body(self) -> Any:
        """The output's JSON body (the guard notes after it left out); None if it has none."""
        if not self.output:
            return None
        try:
            return json.loads(self.output.split(NOTES_MARKER, 1)[0])
        except ValueError:
            return None


@dataclass(slots=True)
class RunHistory:
    """What guards may know of the run so far: the person's messages and the calls made.

    ``relayed_by``: a client relaying calls for the person (``"mcp"``), whose conversation
    with them this run does not hold; ``None``: the run is the conversation."""

    user_messages: list[str] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    relayed_by: str | None = None

    def succeeded(self) -> Iterable[CallRecord]:
        return (c for c in self.calls if c.ok)

    def since_last_user_message(self) -> list[CallRecord]:
        return self.calls[self._turn_start :]

    _turn_start: int = 0

    def add_user_message(self, text: str) -> None:
        self.user_messages.append(text)
        self._turn_start = len(self.calls)

    def relayed(self, by: str, earlier: Sequence[CallRecord]) -> RunHistory:
        """This history as a relaying client's call sees it: ``earlier`` (the calls the same
        principal made through ``by`` in other runs, oldest first) come before this run's."""
        seen = RunHistory(list(self.user_messages), [*earlier, *self.calls], relayed_by=by)
        seen._turn_start = self._turn_start + len(earlier)
        return seen


@dataclass(frozen=True, slots=True)
class GuardCall:
    """The call a guard judges. ``output`` is set for post guards only."""

    capability: Capability
    args: dict[str, Any]
    args_digest: str
    tool_use_id: str
    run_id: UUID
    principal: Principal
    history: RunHistory
    now: datetime
    output: Any = None

    def earlier(self) -> list[CallRecord]:
        """The run's calls before this one (the log already holds this call's start)."""
        return [c for c in self.history.calls if c.tool_use_id != self.tool_use_id]


class Guard(Protocol):
    name: str
    tier: GuardTier
    phase: Phase

    def check(self, call: GuardCall) -> Verdict | Awaitable[Verdict]: ...


@dataclass(slots=True)
class GuardOutcome:
    block: tuple[str, GuardTier, Verdict] | None = None
    notes: list[tuple[Guard, Verdict]] = field(default_factory=list)

    @property
    def messages(self) -> list[str]:
        return [f"[{g.name}] {v.message}" for g, v in self.notes]

    @property
    def needs_person(self) -> list[str]:
        """The guards whose verdict holds the call for a person (``Verdict.confirm``)."""
        return [g.name for g, v in self.notes if v.needs_person]


def order_guards(guards: Iterable[Guard]) -> list[Guard]:
    """Safety before financial before UX; a stable sort keeps the configured order within a tier."""
    return sorted(guards, key=lambda g: _TIER_ORDER[g.tier])


async def run_guards(guards: Sequence[Guard], call: GuardCall, phase: Phase) -> GuardOutcome:
    """Ask the guards of one phase in tier order; stop at the first block."""
    outcome = GuardOutcome()
    for guard in order_guards(guards):
        if guard.phase != phase:
            continue
        verdict = guard.check(call)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if verdict.kind == "pass":
            continue
        if verdict.kind == "block":
            if phase == "post":  # after the effect nothing can be blocked; tell the model
                outcome.notes.append(
                    (guard, Verdict.warn(verdict.message, for_person=verdict.for_person))
                )
                continue
            outcome.block = (guard.name, guard.tier, verdict)
            return outcome
        outcome.notes.append((guard, verdict))
    return outcome


class RetryProtectionGuard:
    """Block an irreversible call whose identical input already succeeded in this run."""

    name = "retry_protection"
    tier: GuardTier = "safety"
    phase: Phase = "pre"

    def check(self, call: GuardCall) -> Verdict:
        if "irreversible" not in call.capability.flags:
            return Verdict.ok()
        for prior in call.history.succeeded():
            if prior.name == call.capability.name and prior.args_digest == call.args_digest:
                return Verdict.block(
                    f"{call.capability.name} with these exact arguments already succeeded in this "
                    f"run (call {prior.tool_use_id}); it is irreversible and will not run twice. "
                    "If the person really wants it again, ask them to say so with new details.",
                    for_person=f"This exact {call.capability.name} already went through in this "
                    "conversation, so it was not run a second time.",
                )
        return Verdict.ok()


class IrreversibilityGuard:
    """Hint when an irreversible call comes without a preview shown since the person spoke."""

    name = "irreversibility"
    tier: GuardTier = "ux"
    phase: Phase = "pre"

    def check(self, call: GuardCall) -> Verdict:
        if "irreversible" not in call.capability.flags:
            return Verdict.ok()
        recent = call.history.since_last_user_message()
        if any(c.kind == Kind.PREVIEW and c.ok for c in recent):
            return Verdict.ok()
        return Verdict.hint(
            f"{call.capability.name} cannot be undone and no preview was shown to the person; "
            "state exactly what will happen before or with this action.",
            for_person=f"{call.capability.name} cannot be undone, and no preview was shown "
            "first: check every detail below before you approve.",
        )


def default_guards() -> list[Guard]:
    return [RetryProtectionGuard(), IrreversibilityGuard()]

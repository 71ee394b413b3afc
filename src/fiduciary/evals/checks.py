"""What a run did (``Observed``), and the checks a case names (its evaluators).

Each check answers one question about a run and says why it failed, in a sentence. The names
are pydantic-evals' where the meaning is theirs (``EqualsExpected``, ``Equals``, ``Contains``)
and fiduciary's own for what only a gated run has (``ToolCalled``, ``NotCalled``, ``Tier``,
``Status``, ``OutputFields``, ``TextGuard``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from ..events import (
    Event,
    PendingAction,
    RunCompleted,
    RunFailed,
    TextGuardFired,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
)
from ..exceptions import ConfigurationError

__all__ = ["CHECKS", "Check", "Observed", "make_check"]


@dataclass(slots=True)
class ToolUse:
    name: str
    args: dict[str, Any]
    tier: str | None = None  # auto, confirm, explicit, deny; None: a read or no decision
    outcome: str = "open"  # ok, error, refused:<reason>, pending, open


@dataclass(slots=True)
class Observed:
    """What one run did, from its events."""

    status: str
    text: str = ""
    output: Any = None  # the typed output, when the run records one
    failure: str = ""
    calls: list[ToolUse] = field(default_factory=list)
    text_guards: list[str] = field(default_factory=list)  # guard:verdict

    @classmethod
    def of(cls, events: list[Event], status: str) -> Observed:
        seen = cls(status=status)
        by_id: dict[str, ToolUse] = {}
        for e in events:
            if isinstance(e, ToolCallStart):
                by_id[e.tool_use_id] = use = ToolUse(e.name, dict(e.input))
                seen.calls.append(use)
            elif isinstance(e, ToolCallEnd) and e.tool_use_id in by_id:
                use = by_id[e.tool_use_id]
                use.outcome = "error" if e.is_error else "ok"
                use.tier = e.tier or use.tier
            elif isinstance(e, ToolCallRejected) and e.tool_use_id in by_id:
                use = by_id[e.tool_use_id]
                use.outcome = f"refused:{e.reason}"
                if e.reason == "policy_denied":
                    use.tier = "deny"
            elif isinstance(e, PendingAction) and e.tool_use_id in by_id:
                use = by_id[e.tool_use_id]
                use.tier, use.outcome = e.tier, "pending"
            elif isinstance(e, TextGuardFired):
                seen.text_guards.append(f"{e.guard}:{e.verdict}")
            elif isinstance(e, RunCompleted):
                seen.text = e.text
                seen.output = getattr(e, "output", None)  # (typed outputs, where recorded)
            elif isinstance(e, RunFailed):
                seen.failure = f"{e.reason}: {e.message}"
        return seen

    def fields(self) -> Mapping[str, Any] | None:
        """The output as fields: the typed output, else the final text read as a JSON object."""
        value = self.output
        if value is None:
            try:
                value = json.loads(self.text)
            except ValueError:
                return None
        return value if isinstance(value, Mapping) else None


Check = Callable[[Observed, Any], str | None]  # (what the run did, expected) -> why it failed


def _same(expected: Any, actual: Any) -> bool:
    """Equal as a person reads them: "25" and 25 and 25.00 are the same amount."""
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        return all(k in actual and _same(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(map(_same, expected, actual))
    if expected == actual:
        return True
    if isinstance(expected, bool) or isinstance(actual, bool):
        return False
    try:
        return Decimal(str(expected)) == Decimal(str(actual))
    except (InvalidOperation, ValueError):
        return str(expected) == str(actual)


def _spec(arg: Any, key: str) -> dict[str, Any]:
    """``Check: value`` or ``Check: {key: value, ...}``."""
    return dict(arg) if isinstance(arg, Mapping) else {key: arg}


def tool_called(seen: Observed, arg: Any) -> str | None:
    spec = _spec(arg, "name")
    name, args = spec.get("name"), spec.get("args") or {}
    named = [c for c in seen.calls if c.name == name]
    if not named:
        made = ", ".join(c.name for c in seen.calls) or "none"
        return f"{name} was not called (calls: {made})"
    if not any(_same(args, c.args) for c in named):
        return f"{name} was called with {named[-1].args}, not {args}"
    return None


def not_called(seen: Observed, arg: Any) -> str | None:
    name = _spec(arg, "name")["name"]
    if any(c.name == name for c in seen.calls):
        return f"{name} was called (forbidden)"
    return None


def tier(seen: Observed, arg: Any) -> str | None:
    spec = _spec(arg, "tier")
    name, wanted = spec.get("tool"), spec.get("tier")
    tiers = [c.tier for c in seen.calls if name is None or c.name == name]
    if wanted not in tiers:
        return f"tier {wanted} expected for {name or 'a call'}, got {tiers or 'no call'}"
    return None


def status(seen: Observed, arg: Any) -> str | None:
    if seen.status != arg:
        why = f" ({seen.failure})" if seen.failure else ""
        return f"status {seen.status}{why}, not {arg}"
    return None


def not_failed(seen: Observed, arg: Any) -> str | None:
    """Implied by every case that names no ``Status``: a run that failed fails its case."""
    return f"the run failed ({seen.failure})" if seen.status == "failed" else None


def contains(seen: Observed, arg: Any) -> str | None:
    spec = _spec(arg, "value")
    value, text = str(spec["value"]), seen.text
    if not spec.get("case_sensitive", True):
        value, text = value.lower(), text.lower()
    if value not in text:
        return f"the answer does not contain {spec['value']!r}"
    return None


def equals(seen: Observed, arg: Any) -> str | None:
    value = _spec(arg, "value")["value"]
    actual = seen.output if seen.output is not None else seen.text
    if isinstance(value, str) and isinstance(actual, str):
        same = value.strip() == actual.strip()
    else:
        same = _same(value, actual)
    return None if same else f"the answer is {actual!r}, not {value!r}"


def output_fields(seen: Observed, arg: Any) -> str | None:
    fields = seen.fields()
    if fields is None:
        return "the answer has no fields (neither a typed output nor a JSON object)"
    wrong = [k for k, v in dict(arg).items() if k not in fields or not _same(v, fields[k])]
    if wrong:
        return "fields differ: " + ", ".join(f"{k}={fields.get(k)!r}" for k in wrong)
    return None


def text_guard(seen: Observed, arg: Any) -> str | None:
    spec = _spec(arg, "name")
    wanted = f"{spec['name']}:{spec.get('verdict', 'block')}"
    if wanted not in seen.text_guards:
        return f"text guard {wanted} did not fire (fired: {seen.text_guards or 'none'})"
    return None


CHECKS: dict[str, Check] = {
    "ToolCalled": tool_called,
    "NotCalled": not_called,
    "Tier": tier,
    "Status": status,
    "Contains": contains,
    "Equals": equals,
    "OutputFields": output_fields,
    "TextGuard": text_guard,
}
"""The evaluators a case may name; ``EqualsExpected`` compares with ``expected_output``."""


def make_check(name: str, arg: Any, expected_output: Any) -> tuple[Check, Any]:
    """The check an evaluator spec names, with its argument; a clear error for any other."""
    if name == "EqualsExpected":
        return (output_fields if isinstance(expected_output, Mapping) else equals), (
            expected_output
        )
    check = CHECKS.get(name)
    if check is None:
        known = ", ".join(["EqualsExpected", *CHECKS])
        raise ConfigurationError(f"unknown evaluator {name!r}; fiduciary knows {known}")
    if arg is None:
        raise ConfigurationError(f"the evaluator {name} needs an argument")
    return check, arg

"""Text guards: checks on the person's message (``input``) and the run's final text (``output``).

Tool guards (``fiduciary.guards``) judge calls; text guards judge the words going in and out,
with the same tiers (safety > financial > ux: the order they are asked in) and the same verdicts
(``Verdict.hint``, ``warn``, ``block``). Each non-passing verdict is recorded as a
``text_guard_fired`` event. What a verdict does:

- ``input``, before the model is asked about a new message: a block fails the run
  (``run_failed``, reason ``guard_blocked``) before any model turn, so nothing is sent to the
  provider; a hint or a warning is recorded and the run goes on.
- ``output``, on the text of a run's last turn (the answer the run would complete with): a block
  fails the run (``guard_blocked``) instead of completing it, so the text is never the run's
  result (``run_completed`` is not written; the streamed ``text_delta`` events stay in the log,
  redacted as every event is). The model is not asked again: a block is final, as a person
  reviewing the run would want it. A hint or a warning is recorded and the run completes.

Built in: ``PromptInjectionGuard`` and ``PiiGuard`` (input), ``SecretGuard`` and
``UnbackedAmountGuard`` (output: an amount in the answer that no tool of the run returned —
the hallucinated figure a person would act on).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal, Protocol
from uuid import UUID

from .guards import GuardTier, RunHistory, Verdict
from .redaction import REDACTED, redact_text

__all__ = [
    "PiiGuard",
    "PromptInjectionGuard",
    "SecretGuard",
    "TextCall",
    "TextGuard",
    "TextOutcome",
    "UnbackedAmountGuard",
    "run_text_guards",
]

TextPhase = Literal["input", "output"]
_TIER_ORDER: dict[str, int] = {"safety": 0, "financial": 1, "ux": 2}


@dataclass(frozen=True, slots=True)
class TextCall:
    """The text a guard judges: the person's message (``input``) or the final answer
    (``output``), with what the run did so far (``history``: the messages and the calls, with
    their outputs)."""

    text: str
    phase: TextPhase
    run_id: UUID
    principal: str
    history: RunHistory


class TextGuard(Protocol):
    name: str
    tier: GuardTier
    phase: TextPhase

    def check(self, call: TextCall) -> Verdict | Awaitable[Verdict]: ...


@dataclass(slots=True)
class TextOutcome:
    """The verdicts that did not pass, in the order asked; ``block`` is the first block."""

    fired: list[tuple[TextGuard, Verdict]]
    block: tuple[TextGuard, Verdict] | None = None


async def run_text_guards(guards: Sequence[TextGuard], call: TextCall) -> TextOutcome:
    """Ask the guards of ``call.phase`` in tier order; stop at the first block."""
    outcome = TextOutcome(fired=[])
    for guard in sorted(guards, key=lambda g: _TIER_ORDER[g.tier]):  # stable within a tier
        if guard.phase != call.phase:
            continue
        verdict = guard.check(call)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if verdict.kind == "pass":
            continue
        outcome.fired.append((guard, verdict))
        if verdict.kind == "block":
            outcome.block = (guard, verdict)
            return outcome
    return outcome


# --- built-in guards -------------------------------------------------------------------------

_INJECTION = re.compile(
    r"ignore (all |any )?(the |your )?(previous|prior|above) (instructions|rules)"
    r"|disregard (all |any )?(the |your )?(previous|prior|above|system)"
    r"|you are now (in )?(developer|dan|jailbreak)"
    r"|reveal (your |the )?(system prompt|hidden instructions)"
    r"|(new|override) system prompt",
    re.IGNORECASE,
)


class PromptInjectionGuard:
    """Block a message that tries to override the agent's instructions (a pattern check: it
    catches the common phrasings, not a determined attacker; gates still hold every write)."""

    name = "prompt_injection"
    tier: GuardTier = "safety"
    phase: TextPhase = "input"

    def __init__(self, *, block: bool = True) -> None:
        self.block = block

    def check(self, call: TextCall) -> Verdict:
        if _INJECTION.search(call.text) is None:
            return Verdict.ok()
        message = "The message tries to override the agent's instructions."
        person = "This message reads like an attempt to take over the assistant; it was not sent."
        if self.block:
            return Verdict.block(message, for_person=person)
        return Verdict.warn(
            message, for_person="This message reads like an attempt to take over the assistant."
        )


_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b")
_CARD = re.compile(r"\b(?:\d[ -]?){13,19}\b")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){3,7}(?: ?[A-Z0-9]{1,3})?\b")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


class PiiGuard:
    """Warn (or block, ``block=True``) on a message carrying a payment card number (Luhn
    checked), an IBAN or an e-mail address: personal data the provider would receive."""

    name = "pii"
    tier: GuardTier = "safety"
    phase: TextPhase = "input"

    def __init__(self, *, block: bool = False) -> None:
        self.block = block

    def check(self, call: TextCall) -> Verdict:
        found: list[str] = []
        for m in _CARD.finditer(call.text):
            digits = re.sub(r"\D", "", m.group())
            if 13 <= len(digits) <= 19 and _luhn(digits):
                found.append("a card number")
                break
        if _IBAN.search(call.text):
            found.append("an IBAN")
        if _EMAIL.search(call.text):
            found.append("an e-mail address")
        if not found:
            return Verdict.ok()
        message = f"The message carries personal data ({', '.join(found)})."
        person = f"Your message holds {', '.join(found)}: avoid sending personal data."
        if self.block:
            return Verdict.block(message, for_person=person)
        return Verdict.warn(message, for_person=person)


class SecretGuard:
    """Block an answer that carries a secret (what ``fiduciary.redaction`` recognises: API keys,
    tokens, private keys). The loop redacts the model's text as it streams, so the final text
    holds ``[REDACTED]`` where the agent's redactor caught one: that counts too."""

    name = "secret_in_output"
    tier: GuardTier = "safety"
    phase: TextPhase = "output"

    def check(self, call: TextCall) -> Verdict:
        if REDACTED not in call.text and redact_text(call.text) == call.text:
            return Verdict.ok()
        return Verdict.block(
            "The answer carries a secret; it was withheld.",
            for_person="The answer contained a secret (a key or a token), so it was withheld.",
        )


# an amount: optional currency sign, digits with thousands separators, optional decimals
_AMOUNT = re.compile(r"(?<![\w.])[$€£]?\s?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\w])")


def _amounts(text: str) -> set[Decimal]:
    out: set[Decimal] = set()
    for m in _AMOUNT.finditer(text):
        try:
            out.add(Decimal(m.group(1).replace(",", "") + (m.group(2) or "")).normalize())
        except InvalidOperation:  # pragma: no cover - the pattern only matches digits
            continue
    return out


class UnbackedAmountGuard:
    """Flag an answer that states an amount no tool of the run returned and the person did not
    write: a figure the model made up. Small numbers (below ``min_amount``, default 10: counts,
    list positions) are not judged. Warns by default; ``block=True`` withholds the answer."""

    name = "unbacked_amount"
    tier: GuardTier = "financial"
    phase: TextPhase = "output"

    def __init__(self, *, block: bool = False, min_amount: Decimal = Decimal(10)) -> None:
        self.block = block
        self.min_amount = min_amount

    def check(self, call: TextCall) -> Verdict:
        claimed = {a for a in _amounts(call.text) if a >= self.min_amount}
        if not claimed:
            return Verdict.ok()
        known: set[Decimal] = set()
        for record in call.history.calls:
            known |= _amounts(record.output or "")
            known |= _amounts(str(record.input))
        for message in call.history.user_messages:
            known |= _amounts(message)
        unbacked = sorted(claimed - known)
        if not unbacked:
            return Verdict.ok()
        shown = ", ".join(f"{a:f}" for a in unbacked)
        message = f"The answer states amounts no tool returned: {shown}."
        person = "Check these figures: no tool of this run returned them."
        if self.block:
            return Verdict.block(message, for_person=person)
        return Verdict.warn(message, for_person=person)

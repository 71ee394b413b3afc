"""Approvals a person signs: which need a signature, and what exactly is signed.

A policy's ``SignatureRule`` (``Policy(signatures=SignatureRule(...))``) says from which amount
in USD, or for which tiers, an approval must carry a signature (a WebAuthn assertion made with
the approver's passkey). What is signed is the approval's binding (``binding``): approval id,
run id, the digest of the arguments approved, tier, amount, currency, chain id (none yet) and
expiry; the WebAuthn challenge is the SHA-256 of its canonical JSON (``challenge``), so a
signature for one approval, or for other arguments, can never approve another.

The core checks the rule; verifying a signature is a seam (``SignatureCheck``), implemented
with py_webauthn in ``fiduciary.passkeys`` (extra ``passkeys``). An agent without one, or a
decision without an assertion (the CLI, Telegram, MCP: where no passkey can be used), is
refused with ``signature_required``: the person signs on the approval's card in the console.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, Protocol

from .exceptions import ConfigurationError
from .stores.base import ApprovalRecord

__all__ = ["SignatureCheck", "SignatureRule", "binding", "canonical", "challenge"]

SIGNATURE_REQUIRED = (
    "this approval must be signed with a passkey: open its card in the web console "
    "(/console) and approve it there"
)


@dataclass(frozen=True, slots=True)
class SignatureRule:
    """Approvals at or above ``at_or_above_usd`` (None: no amount makes it needed), or of one
    of ``tiers``, must be signed. An unknown amount counts as above the threshold."""

    at_or_above_usd: Decimal | None = None
    tiers: frozenset[Literal["confirm", "explicit"]] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        floor = self.at_or_above_usd
        if floor is not None and (
            not isinstance(floor, Decimal) or not floor.is_finite() or floor < 0
        ):
            raise ConfigurationError("SignatureRule: at_or_above_usd must be a Decimal >= 0")
        tiers = frozenset(self.tiers)
        if isinstance(self.tiers, str) or not tiers <= {"confirm", "explicit"}:
            raise ConfigurationError("SignatureRule: tiers must be 'confirm' and/or 'explicit'")
        object.__setattr__(self, "tiers", tiers)

    def requires(self, tier: str, amount_usd: Decimal | None) -> bool:
        if tier in self.tiers:
            return True
        floor = self.at_or_above_usd
        return floor is not None and (amount_usd is None or amount_usd >= floor)


def binding(
    record: ApprovalRecord, *, args_digest: str, tier: str, amount_usd: Decimal | None
) -> dict[str, str | None]:
    """What an approver signs: the approval's identity, the arguments approved (their
    digest), tier, amount, currency, chain id and expiry."""
    return {
        "approval_id": str(record.approval_id),
        "run_id": str(record.run_id),
        "args_digest": args_digest,
        "tier": tier,
        "amount": None if amount_usd is None else format(amount_usd, "f"),
        "currency": "USD",
        "chain_id": None,
        "expires_at": record.expires_at.isoformat(),
    }


def canonical(value: Mapping[str, Any]) -> bytes:
    """The canonical JSON of a binding (sorted keys, no spaces, UTF-8)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def challenge(value: Mapping[str, Any]) -> bytes:
    """The WebAuthn challenge of a binding: the SHA-256 of its canonical JSON."""
    return hashlib.sha256(canonical(value)).digest()


class SignatureCheck(Protocol):
    """Verifies an approver's assertion over a binding and records it (``fiduciary.passkeys``).
    Raises ``ApprovalError`` (``signature_refused``) and records nothing when it fails."""

    async def verify(
        self,
        record: ApprovalRecord,
        *,
        approver: str,
        signed: dict[str, str | None],
        assertion: Any,
    ) -> None: ...

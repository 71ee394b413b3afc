"""Every signed decision of a run, verified again offline from the stored bytes.

``verify_run`` reads the signatures a run's approvals were signed with and the registered
public keys (``PasskeyRegistry``), and checks each again with py_webauthn: the signature over
the stored authenticator data and client data, the challenge recomputed from the stored
binding, the origin and relying party it was accepted for, user presence and verification,
and that the key belongs to the approver and the binding names this run. It trusts nothing
the server decided: a byte changed anywhere makes that signature invalid.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import webauthn
from webauthn.helpers import bytes_to_base64url
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import AuthenticationCredential, AuthenticatorAssertionResponse

from ..signed_approvals import challenge
from ._registry import PasskeyRegistry, StoredSignature

__all__ = ["SignatureVerdict", "verify_run"]


@dataclass(frozen=True, slots=True)
class SignatureVerdict:
    """One signed decision: who, which key, what was signed, valid or not (and why not)."""

    approval_id: UUID
    approver: str
    key: str  # the passkey's name and the start of its id
    signed: dict[str, Any]
    valid: bool
    reason: str = ""


def verify_run(registry: PasskeyRegistry, run_id: UUID) -> list[SignatureVerdict]:
    return [_verify(registry, run_id, s) for s in registry.signatures(run_id)]


def _verify(registry: PasskeyRegistry, run_id: UUID, s: StoredSignature) -> SignatureVerdict:
    key_id = bytes_to_base64url(s.credential_id)
    try:
        signed: dict[str, Any] = json.loads(s.binding)
    except ValueError:
        signed = {}

    def verdict(reason: str = "", key: str = key_id[:12]) -> SignatureVerdict:
        return SignatureVerdict(s.approval_id, s.approver, key, signed, not reason, reason)

    credential = registry.get(s.credential_id)
    if credential is None:
        return verdict("the key is not registered")
    key = f"{credential.name} ({key_id[:12]})"
    if credential.principal != s.approver:
        return verdict(f"the key belongs to {credential.principal}, not {s.approver}", key)
    if signed.get("run_id") != str(run_id) or signed.get("approval_id") != str(s.approval_id):
        return verdict("what was signed names another run or approval", key)
    try:
        origins = [str(o) for o in json.loads(s.origins)]
        webauthn.verify_authentication_response(
            credential=AuthenticationCredential(
                id=key_id,
                raw_id=s.credential_id,
                response=AuthenticatorAssertionResponse(
                    client_data_json=s.client_data_json,
                    authenticator_data=s.authenticator_data,
                    signature=s.signature,
                ),
            ),
            expected_challenge=challenge(signed),
            expected_rp_id=s.rp_id,
            expected_origin=origins,
            credential_public_key=credential.public_key,
            credential_current_sign_count=0,  # offline: the counter was checked at the time
            require_user_verification=True,
        )
    except (WebAuthnException, ValueError, KeyError, TypeError) as exc:
        return verdict(str(exc) or type(exc).__name__, key)
    return verdict("", key)

"""Private: registration and verification of passkeys with py_webauthn."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from .._logs import logger
from ..clock import Clock, SystemClock
from ..exceptions import ApprovalError, ConfigurationError
from ..signed_approvals import canonical, challenge
from ..stores.base import ApprovalRecord
from ._registry import Credential, PasskeyRegistry, StoredSignature

try:
    import webauthn
    from webauthn.helpers import parse_authentication_credential_json
    from webauthn.helpers.exceptions import WebAuthnException
    from webauthn.helpers.structs import (
        AuthenticationCredential,
        AuthenticatorSelectionCriteria,
        PublicKeyCredentialDescriptor,
        ResidentKeyRequirement,
        UserVerificationRequirement,
    )
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("passkeys need py_webauthn: pip install 'fiduciary[passkeys]'") from exc

__all__ = ["Passkeys", "check_origins"]

log = logger("fiduciary.passkeys")

_LOCAL = {"localhost", "127.0.0.1", "::1"}
_REGISTRATION_TTL = timedelta(minutes=5)


def check_origins(rp_id: str, origins: Sequence[str]) -> tuple[str, ...]:
    """The origins, if each is https (http only on localhost) and within ``rp_id``."""
    if isinstance(origins, str) or not origins:
        raise ConfigurationError("passkeys need at least one origin, e.g. https://example.com")
    if not rp_id or "/" in rp_id or ":" in rp_id:
        raise ConfigurationError(f"the relying party id {rp_id!r} must be a host name")
    for origin in origins:
        parts = urlsplit(origin)
        host = parts.hostname or ""
        if parts.scheme != "https" and not (parts.scheme == "http" and host in _LOCAL):
            raise ConfigurationError(
                f"passkey origin {origin!r} must be https (http only on localhost)"
            )
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ConfigurationError(f"passkey origin {origin!r} must be scheme://host[:port]")
        if host != rp_id and not host.endswith("." + rp_id):
            raise ConfigurationError(
                f"passkey origin {origin!r} is not within the relying party id {rp_id!r}"
            )
    return tuple(o.rstrip("/") for o in origins)


class Passkeys:
    """A relying party: its id, origins and registry (see the package's docstring)."""

    def __init__(
        self,
        registry: PasskeyRegistry,
        *,
        rp_id: str,
        origins: Sequence[str],
        rp_name: str = "fiduciary",
        clock: Clock | None = None,
    ) -> None:
        self.registry = registry
        self.rp_id = rp_id
        self.origins = check_origins(rp_id, origins)
        self.rp_name = rp_name
        self.clock = clock or SystemClock()

    # --- registration ------------------------------------------------------------------------
    def registration_options(self, principal: str) -> dict[str, Any]:
        """The options for ``navigator.credentials.create()`` (JSON), user verification
        required; the principal's passkeys are excluded."""
        options = webauthn.generate_registration_options(
            rp_id=self.rp_id,
            rp_name=self.rp_name,
            user_name=principal,
            user_id=hashlib.sha256(principal.encode()).digest()[:16],
            authenticator_selection=AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.PREFERRED,
                user_verification=UserVerificationRequirement.REQUIRED,
            ),
            exclude_credentials=[
                PublicKeyCredentialDescriptor(id=c.credential_id)
                for c in self.registry.of(principal)
            ],
        )
        # in the registry's database: the answer may reach another server on it
        self.registry.put_challenge(
            principal, options.challenge, self.clock.now() + _REGISTRATION_TTL
        )
        parsed: dict[str, Any] = json.loads(webauthn.options_to_json(options))
        return parsed

    def register(self, principal: str, credential: Any, *, name: str) -> Credential:
        """Verify ``navigator.credentials.create()``'s answer to the last options given to
        ``principal`` (once) and keep the passkey; ``ApprovalError`` otherwise."""
        expected = self.registry.take_challenge(principal, self.clock.now())
        if expected is None:
            raise ApprovalError(
                "signature_refused", "ask for registration options first (they expire)"
            )
        name = (name or "passkey").strip()[:60] or "passkey"
        try:
            verified = webauthn.verify_registration_response(
                credential=credential,
                expected_challenge=expected,
                expected_rp_id=self.rp_id,
                expected_origin=list(self.origins),
                require_user_verification=True,
            )
        except (WebAuthnException, ValueError, KeyError, TypeError) as exc:
            raise self._refused(
                principal, "registration", f"the passkey is refused: {exc}"
            ) from exc
        if self.registry.get(verified.credential_id) is not None:
            raise ApprovalError("signature_refused", "this passkey is already registered")
        stored = Credential(
            credential_id=verified.credential_id,
            principal=principal,
            name=name,
            public_key=verified.credential_public_key,
            sign_count=verified.sign_count,
            created_at=self.clock.now(),
        )
        self.registry.add(stored)
        return stored

    def list(self, principal: str) -> list[Credential]:
        return self.registry.of(principal)

    def revoke(self, principal: str, credential_id: bytes) -> bool:
        return self.registry.revoke(principal, credential_id, self.clock.now())

    # --- approvals ---------------------------------------------------------------------------
    def assertion_options(self, principal: str, signed: dict[str, str | None]) -> dict[str, Any]:
        """The options for ``navigator.credentials.get()`` over an approval's binding."""
        options = webauthn.generate_authentication_options(
            rp_id=self.rp_id,
            challenge=challenge(signed),
            allow_credentials=[
                PublicKeyCredentialDescriptor(id=c.credential_id)
                for c in self.registry.of(principal)
                if c.revoked_at is None
            ],
            user_verification=UserVerificationRequirement.REQUIRED,
        )
        parsed: dict[str, Any] = json.loads(webauthn.options_to_json(options))
        return parsed

    async def verify(
        self,
        record: ApprovalRecord,
        *,
        approver: str,
        signed: dict[str, str | None],
        assertion: Any,
    ) -> None:
        """``SignatureCheck``: verify and keep the assertion, or ``ApprovalError``."""
        where = str(record.approval_id)
        try:
            parsed = _parse(assertion)
        except (WebAuthnException, ValueError, KeyError, TypeError) as exc:
            raise self._refused(approver, where, f"the assertion is malformed: {exc}") from exc
        known = self.registry.get(parsed.raw_id)
        if known is None or known.revoked_at is not None:
            raise self._refused(approver, where, "this passkey is not registered (or revoked)")
        if known.principal != approver:
            raise self._refused(approver, where, "this passkey belongs to another principal")
        expected = challenge(signed)
        try:
            verified = webauthn.verify_authentication_response(
                credential=parsed,
                expected_challenge=expected,
                expected_rp_id=self.rp_id,
                expected_origin=list(self.origins),
                credential_public_key=known.public_key,
                credential_current_sign_count=known.sign_count,
                require_user_verification=True,
            )
        except (WebAuthnException, ValueError, KeyError, TypeError) as exc:
            raise self._refused(approver, where, f"the signature is refused: {exc}") from exc
        kept = StoredSignature(
            run_id=record.run_id,
            approval_id=record.approval_id,
            approver=approver,
            credential_id=known.credential_id,
            binding=canonical(signed).decode(),
            challenge=expected,
            authenticator_data=parsed.response.authenticator_data,
            client_data_json=parsed.response.client_data_json,
            signature=parsed.response.signature,
            rp_id=self.rp_id,
            origins=json.dumps(list(self.origins)),
            at=self.clock.now(),
        )
        if not self.registry.record_use(known, verified.new_sign_count, kept):
            raise self._refused(approver, where, "this assertion was already used (a replay)")

    @staticmethod
    def _refused(who: str, where: str, why: str) -> ApprovalError:
        # every refusal is recorded: who, on what, and why (never the assertion's bytes)
        log.warning("passkey refused for %s on %s: %s", who, where, why)
        return ApprovalError("signature_refused", why)


def _parse(assertion: Any) -> AuthenticationCredential:
    if isinstance(assertion, AuthenticationCredential):
        return assertion
    text = assertion if isinstance(assertion, str) else json.dumps(assertion)
    return parse_authentication_credential_json(text)

"""Passkeys (WebAuthn) for approvals a person signs, with py_webauthn (extra ``passkeys``).

``Passkeys`` registers a principal's passkeys (``registration_options`` then ``register``;
``list`` and ``revoke``) and verifies an approval's assertion (``verify``, the core's
``SignatureCheck``: ``agent.with_options(signatures=passkeys)``). The relying party id and its
origins come from configuration; an origin that is not https is refused, except on localhost.

``verify`` checks, with py_webauthn: the signature with the registered public key, the
challenge (the SHA-256 of the approval's binding: ``fiduciary.signed_approvals``), the
origin, the relying party id, user presence AND user verification, and the sign counter; and
itself that the credential is registered, not revoked, and belongs to the deciding principal.
A refusal is an ``ApprovalError`` (``signature_refused``) with the reason, logged, and changes
nothing. The assertion's bytes are kept with the binding (``PasskeyRegistry``: in the run
store's database, ``PasskeyRegistry.for_store``), and ``verify_run`` checks every signature
of a run again, offline.
"""

from __future__ import annotations

from ._passkeys import Passkeys, check_origins
from ._registry import Credential, PasskeyRegistry, StoredSignature
from .audit import SignatureVerdict, verify_run

__all__ = [
    "Credential",
    "PasskeyRegistry",
    "Passkeys",
    "SignatureVerdict",
    "StoredSignature",
    "check_origins",
    "verify_run",
]

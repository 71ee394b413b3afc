"""The handlers of ``/passkeys`` and of an approval's signing options.

A principal registers passkeys (options, then the browser's answer), lists and revokes them;
the console asks for an approval's signing options (the challenge is the SHA-256 of the
binding of what it approves: with its edits, ``POST``) and sends the assertion with
``POST /approvals/{id}/approve``. They need
the agent's ``signatures`` to be a ``fiduciary.passkeys.Passkeys``; otherwise ``not_available``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field, JsonValue, StringConstraints
from starlette.responses import Response

from ..exceptions import ApprovalError
from .pipeline import Call, json_response
from .problems import ProblemError
from .schemas import _Request
from .state import Server

if TYPE_CHECKING:
    from ..passkeys import Credential, Passkeys

__all__ = [
    "PasskeyList",
    "PasskeyOut",
    "RegisterBody",
    "SigningBody",
    "WebAuthnOptions",
    "list_passkeys",
    "register",
    "registration_options",
    "revoke",
    "signing_options",
    "signing_options_for",
]


class WebAuthnOptions(BaseModel):
    """Options for ``navigator.credentials.create()`` / ``get()``, as py_webauthn made them."""

    options: dict[str, Any]


class RegisterBody(_Request):
    credential: dict[str, JsonValue] = Field(
        description="What navigator.credentials.create() answered (its JSON)."
    )
    name: Annotated[str, StringConstraints(max_length=60)] = "passkey"


class PasskeyOut(BaseModel):
    credential_id: str
    name: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class PasskeyList(BaseModel):
    passkeys: list[PasskeyOut]


def _passkeys(server: Server) -> Passkeys:
    try:
        from ..passkeys import Passkeys
    except ImportError:
        raise ProblemError("not_available", "passkeys need the 'passkeys' extra") from None
    found = server.agent.signatures
    if not isinstance(found, Passkeys):
        raise ProblemError("not_available", "passkeys are not configured on this server")
    return found


def _out(credential: Credential) -> PasskeyOut:
    from webauthn.helpers import bytes_to_base64url

    return PasskeyOut(
        credential_id=bytes_to_base64url(credential.credential_id),
        name=credential.name,
        created_at=credential.created_at,
        last_used_at=credential.last_used_at,
        revoked_at=credential.revoked_at,
    )


async def registration_options(server: Server, call: Call) -> Response:
    options = _passkeys(server).registration_options(call.caller.principal)
    return json_response(WebAuthnOptions(options=options))


async def register(server: Server, call: Call) -> Response:
    passkeys = _passkeys(server)
    body = call.body_as(RegisterBody)
    try:
        made = passkeys.register(call.caller.principal, body.credential, name=body.name)
    except ApprovalError as exc:
        raise ProblemError("signature_refused", exc.message) from None
    return json_response(_out(made), status=201)


async def list_passkeys(server: Server, call: Call) -> Response:
    found = _passkeys(server).list(call.caller.principal)
    return json_response(PasskeyList(passkeys=[_out(c) for c in found]))


async def revoke(server: Server, call: Call) -> Response:
    from webauthn.helpers import base64url_to_bytes

    passkeys = _passkeys(server)
    try:
        credential_id = base64url_to_bytes(call.path("credential_id"))
    except ValueError:
        raise ProblemError("not_found", "no such passkey") from None
    if not passkeys.revoke(call.caller.principal, credential_id):
        raise ProblemError("not_found", "no such passkey")
    return Response(status_code=204)


class SigningBody(_Request):
    """What an approver means to approve: the digest shown and any edits."""

    args_digest: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = None
    edits: dict[str, JsonValue] | None = Field(
        default=None, description="New values for the action's modifiable fields only."
    )


async def signing_options(server: Server, call: Call) -> Response:
    """The options to sign an approval as it is shown (under dual control after an edit:
    the edited arguments the set votes on)."""
    return await _signing(server, call, SigningBody())


async def signing_options_for(server: Server, call: Call) -> Response:
    """The options to sign an approval with edits: the challenge binds the edited arguments,
    re-checked and re-priced as ``approve`` will (a signature for the unedited ones, or for
    other edits, is refused there)."""
    return await _signing(server, call, call.body_as(SigningBody))


async def _signing(server: Server, call: Call, body: SigningBody) -> Response:
    passkeys = _passkeys(server)
    record = await server.visible_approval(call.caller, call.path("approval_id"))
    signed = await server.agent.signing_binding(
        record.approval_id,
        by=server.decider(call.caller),
        edits=body.edits,
        args_digest=body.args_digest,
    )
    return json_response(
        WebAuthnOptions(options=passkeys.assertion_options(call.caller.principal, signed))
    )

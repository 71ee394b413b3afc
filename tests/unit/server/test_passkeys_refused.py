"""Refused signatures over HTTP: each is a 403 with the reason, an audit row of the run
(``rejected:signature_refused``, who tried, why) and nothing else: the approval stays pending,
the run's log and status are unchanged, nothing executes. And an edited approval is signed over
its edited binding: a signature for the proposed arguments does not approve the edit, nor the
edit's signature the proposed arguments."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

from fiduciary import Agent, ManualClock, Policy
from fiduciary.demo import Billing
from fiduciary.dual_control import DualControl
from fiduciary.passkeys import PasskeyRegistry, Passkeys, verify_run
from fiduciary.server import Server
from fiduciary.signed_approvals import SignatureRule
from fiduciary.stores.base import Store
from fiduciary.testing import ScriptedModel, allow_all

from ..conftest import Effects, toy_capabilities
from ..softauthn import SoftAuthenticator
from .conftest import Keys, bearer, problem, scripts, settle, start_run

pytestmark = pytest.mark.timeout(30)

RP, ORIGIN = "localhost", "http://localhost:8000"


@pytest.fixture
def passkeys(tmp_path: Path, clock: ManualClock) -> Iterator[Passkeys]:
    registry = PasskeyRegistry(tmp_path / "passkeys.sqlite3")
    yield Passkeys(registry, rp_id=RP, origins=[ORIGIN], clock=clock)
    registry.close()


FINANCE = DualControl("finance", frozenset({"bob", "carol"}), required=2)


@pytest.fixture
def agent(
    request: pytest.FixtureRequest,
    store: Store,
    clock: ManualClock,
    effects: Effects,
    billing: Billing,
    passkeys: Passkeys,
) -> Agent:
    # the refusals: bob and carol both approve alice's action, each signing
    dual = [FINANCE] if request.function.__name__.startswith("test_a_refused") else []
    made = Agent(
        model=ScriptedModel(scripts()),
        capabilities=[*billing.capabilities(), *toy_capabilities(effects)],
        store=store,
        clock=clock,
        authorize=allow_all,
        policy=Policy(signatures=SignatureRule(at_or_above_usd=Decimal(50)), dual_control=dual),
    )
    return made.with_options(signatures=passkeys)


async def enrol(client: httpx.AsyncClient, key: str) -> SoftAuthenticator:
    device = SoftAuthenticator(RP, ORIGIN)
    options = await client.post("/passkeys/registration-options", headers=bearer(key))
    assert options.status_code == 200, options.text
    made = await client.post(
        "/passkeys",
        json={"credential": device.create(options.json()["options"]), "name": "phone"},
        headers=bearer(key),
    )
    assert made.status_code == 201, made.text
    return device


async def pending(client: httpx.AsyncClient, key: str, server: Server) -> dict[str, Any]:
    run_id = await start_run(client, key, "send 60")
    await settle(server)
    response = await client.get(f"/approvals?run_id={run_id}", headers=bearer(key))
    (approval,) = response.json()["approvals"]
    assert isinstance(approval, dict)
    return approval


async def challenge_of(
    client: httpx.AsyncClient, key: str, approval: dict[str, Any], edits: Any = None
) -> bytes:
    url = f"/approvals/{approval['approval_id']}/signing-options"
    if edits is None:
        response = await client.get(url, headers=bearer(key))
    else:
        body = {"args_digest": approval["args_digest"], "edits": edits}
        response = await client.post(url, json=body, headers=bearer(key))
    assert response.status_code == 200, response.text
    return base64url_to_bytes(response.json()["options"]["challenge"])


def _tampered(assertion: dict[str, Any]) -> dict[str, Any]:
    signature = bytearray(base64url_to_bytes(assertion["response"]["signature"]))
    signature[-1] ^= 0x01
    response = {**assertion["response"], "signature": bytes_to_base64url(bytes(signature))}
    return {**assertion, "response": response}


ATTACKS = {
    "other_principal": ("this passkey belongs to another principal",),
    # the sign counter or the single-use challenge, whichever py_webauthn meets first
    "replayed": ("the signature is refused", "this assertion was already used (a replay)"),
    "other_approval": ("the signature is refused",),
    "no_uv": ("the signature is refused",),
    "origin": ("the signature is refused",),
    "bad_signature": ("the signature is refused",),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_a_refused_signature_is_a_403_and_an_audit_row_and_nothing_else(
    client: httpx.AsyncClient,
    keys: Keys,
    server: Server,
    store: Store,
    effects: Effects,
    attack: str,
) -> None:
    carol, _ = await keys.store.create("carol", ["runs:read", "approvals:decide"])
    device = await enrol(client, keys.bob)
    carols = await enrol(client, carol)
    approval = await pending(client, keys.alice, server)
    run_id = UUID(approval["run_id"])
    url = f"/approvals/{approval['approval_id']}/approve"
    body: dict[str, Any] = {"args_digest": approval["args_digest"]}
    if attack == "replayed":  # bob signs and votes (1 of 2), then his assertion comes again
        assertion = device.get(await challenge_of(client, keys.bob, approval))
        ok = await client.post(url, json={**body, "assertion": assertion}, headers=bearer(keys.bob))
        assert ok.status_code == 200, ok.text
        assert ok.json()["status"] == "pending"
    elif attack == "other_approval":
        other = await pending(client, keys.alice, server)
        assertion = device.get(await challenge_of(client, keys.bob, other))
    elif attack == "other_principal":
        assertion = carols.get(await challenge_of(client, keys.bob, approval))
    elif attack == "no_uv":
        device.user_verified = False
        assertion = device.get(await challenge_of(client, keys.bob, approval))
    elif attack == "origin":
        assertion = device.get(
            await challenge_of(client, keys.bob, approval), origin="https://evil.example"
        )
    else:
        assertion = _tampered(device.get(await challenge_of(client, keys.bob, approval)))
    events_before = await store.read_events(run_id)
    run_before = await store.get_run(run_id)
    audit_before = await store.audit_records(run_id)
    votes_before = await store.list_votes(UUID(approval["approval_id"]))
    refused = await client.post(
        url, json={**body, "assertion": assertion}, headers=bearer(keys.bob)
    )
    detail = problem(refused, 403, "signature_refused")["detail"]
    assert detail.startswith(ATTACKS[attack]), detail
    await settle(server)
    assert effects.payments == []  # nothing executed
    # one audit row more, with the reason; the log, the run and the approval unchanged
    audit = await store.audit_records(run_id)
    (row,) = audit[len(audit_before) :]
    assert row.outcome == "rejected:signature_refused"
    assert row.principal == "bob"
    assert row.output == detail
    assert row.input == {"approval_id": approval["approval_id"]}
    assert await store.read_events(run_id) == events_before
    assert await store.get_run(run_id) == run_before
    record = await store.get_approval(UUID(approval["approval_id"]))
    assert record is not None
    assert record.status == "pending"
    assert await store.list_votes(record.approval_id) == votes_before


async def test_an_edited_approval_is_signed_over_its_edited_binding(
    client: httpx.AsyncClient,
    keys: Keys,
    server: Server,
    store: Store,
    effects: Effects,
    passkeys: Passkeys,
) -> None:
    device = await enrol(client, keys.alice)
    approval = await pending(client, keys.alice, server)
    url = f"/approvals/{approval['approval_id']}/approve"
    edits = {"amount": "70"}
    proposed = await challenge_of(client, keys.alice, approval)
    edited = await challenge_of(client, keys.alice, approval, edits)
    assert proposed != edited
    body = {"args_digest": approval["args_digest"]}
    # the proposed arguments' signature does not approve the edit
    refused = await client.post(
        url,
        json={**body, "edits": edits, "assertion": device.get(proposed)},
        headers=bearer(keys.alice),
    )
    problem(refused, 403, "signature_refused")
    # nor the edit's signature the proposed arguments
    refused = await client.post(
        url, json={**body, "assertion": device.get(edited)}, headers=bearer(keys.alice)
    )
    problem(refused, 403, "signature_refused")
    await settle(server)
    assert effects.payments == []
    rows = await store.audit_records(UUID(approval["run_id"]))
    assert [r.outcome for r in rows].count("rejected:signature_refused") == 2
    # the edit signed over its own binding is approved, and runs with the edited amount
    signed = await client.post(
        url,
        json={**body, "edits": edits, "assertion": device.get(edited)},
        headers=bearer(keys.alice),
    )
    assert signed.status_code == 200, signed.text
    assert signed.json()["status"] == "approved"
    await settle(server)
    assert [p["amount"] for p in effects.payments] == [Decimal(70)]
    (verdict,) = verify_run(passkeys.registry, UUID(approval["run_id"]))
    assert verdict.valid, verdict.reason
    assert verdict.signed["amount"] == "70"
    assert verdict.signed["args_digest"] == signed.json()["args_digest"]


async def test_signing_options_for_an_edit_that_is_refused_say_why(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    await enrol(client, keys.alice)
    approval = await pending(client, keys.alice, server)
    url = f"/approvals/{approval['approval_id']}/signing-options"
    bad = await client.post(
        url,
        json={"args_digest": approval["args_digest"], "edits": {"to": "mallory"}},
        headers=bearer(keys.alice),
    )
    problem(bad, 422, "field_not_modifiable")
    stale = await client.post(url, json={"args_digest": "0" * 64}, headers=bearer(keys.alice))
    problem(stale, 409, "digest_mismatch")

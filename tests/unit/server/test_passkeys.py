"""Passkeys over the HTTP API: register one, sign an approval with it, and every refusal is a
403 with the reason that executes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from webauthn.helpers import base64url_to_bytes

from fiduciary import Agent, ManualClock, Policy
from fiduciary.demo import Billing
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


@pytest.fixture
def agent(
    store: Store, clock: ManualClock, effects: Effects, billing: Billing, passkeys: Passkeys
) -> Agent:
    return Agent(
        model=ScriptedModel(scripts()),
        capabilities=[*billing.capabilities(), *toy_capabilities(effects)],
        store=store,
        clock=clock,
        authorize=allow_all,
        policy=Policy(signatures=SignatureRule(at_or_above_usd=Decimal(50))),
    ).with_options(signatures=passkeys)


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
    assert made.json()["name"] == "phone"
    return device


async def pending(client: httpx.AsyncClient, keys: Keys, server: Server) -> dict[str, Any]:
    run_id = await start_run(client, keys.alice, "send 60")
    await settle(server)
    response = await client.get(f"/approvals?run_id={run_id}", headers=bearer(keys.alice))
    (approval,) = response.json()["approvals"]
    assert isinstance(approval, dict)
    return approval


async def signature(
    client: httpx.AsyncClient, key: str, approval: dict[str, Any], device: SoftAuthenticator
) -> dict[str, Any]:
    response = await client.get(
        f"/approvals/{approval['approval_id']}/signing-options", headers=bearer(key)
    )
    assert response.status_code == 200, response.text
    return device.get(base64url_to_bytes(response.json()["options"]["challenge"]))


async def test_register_sign_approve_and_verify(
    client: httpx.AsyncClient,
    keys: Keys,
    server: Server,
    effects: Effects,
    passkeys: Passkeys,
) -> None:
    device = await enrol(client, keys.alice)
    approval = await pending(client, keys, server)
    assert approval["signature_required"] is True  # the console's card says so before Approve
    url = f"/approvals/{approval['approval_id']}/approve"
    unsigned = await client.post(
        url, json={"args_digest": approval["args_digest"]}, headers=bearer(keys.alice)
    )
    problem(unsigned, 403, "signature_required")
    assertion = await signature(client, keys.alice, approval, device)
    signed = await client.post(
        url,
        json={"args_digest": approval["args_digest"], "assertion": assertion},
        headers=bearer(keys.alice),
    )
    assert signed.status_code == 200, signed.text
    assert signed.json()["status"] == "approved"
    await settle(server)
    assert len(effects.payments) == 1
    (verdict,) = verify_run(passkeys.registry, approval["run_id"])
    assert verdict.valid
    listed = (await client.get("/passkeys", headers=bearer(keys.alice))).json()["passkeys"]
    assert [p["name"] for p in listed] == ["phone"]
    assert listed[0]["last_used_at"] is not None


async def test_another_principals_passkey_is_refused_and_nothing_runs(
    client: httpx.AsyncClient, keys: Keys, server: Server, effects: Effects
) -> None:
    await enrol(client, keys.alice)
    bobs = await enrol(client, keys.bob)
    approval = await pending(client, keys, server)
    # bob's device signs alice's approval (its challenge is public to whoever sees the card)
    response = await client.get(
        f"/approvals/{approval['approval_id']}/signing-options", headers=bearer(keys.alice)
    )
    assertion = bobs.get(base64url_to_bytes(response.json()["options"]["challenge"]))
    refused = await client.post(
        f"/approvals/{approval['approval_id']}/approve",
        json={"args_digest": approval["args_digest"], "assertion": assertion},
        headers=bearer(keys.alice),
    )
    body = problem(refused, 403, "signature_refused")
    assert body["detail"] == "this passkey belongs to another principal"
    await settle(server)
    assert effects.payments == []


async def test_a_revoked_passkey_signs_nothing(
    client: httpx.AsyncClient, keys: Keys, server: Server, effects: Effects
) -> None:
    device = await enrol(client, keys.alice)
    (listed,) = (await client.get("/passkeys", headers=bearer(keys.alice))).json()["passkeys"]
    gone = await client.delete(f"/passkeys/{listed['credential_id']}", headers=bearer(keys.alice))
    assert gone.status_code == 204, gone.text
    approval = await pending(client, keys, server)
    assertion = await signature(client, keys.alice, approval, device)
    refused = await client.post(
        f"/approvals/{approval['approval_id']}/approve",
        json={"args_digest": approval["args_digest"], "assertion": assertion},
        headers=bearer(keys.alice),
    )
    problem(refused, 403, "signature_refused")
    assert effects.payments == []


def test_serve_refuses_a_passkey_origin_that_is_not_https(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import typer
    from typer.testing import CliRunner

    from fiduciary.server.cli import register

    app = typer.Typer()
    register(app)
    monkeypatch.setenv("FIDUCIARY_PASSKEY_RP_ID", "pay.example.com")
    monkeypatch.setenv("FIDUCIARY_PASSKEY_ORIGINS", "http://pay.example.com")
    monkeypatch.setenv("FIDUCIARY_PASSKEYS", str(tmp_path / "passkeys.sqlite3"))
    result = CliRunner().invoke(app, ["serve", "--db", str(tmp_path / "x.sqlite3")])
    assert result.exit_code == 2
    assert "passkey origin 'http://pay.example.com' must be https" in " ".join(
        result.output.split()
    )
    assert not (tmp_path / "x.sqlite3").exists()  # refused before anything was opened
    monkeypatch.delenv("FIDUCIARY_PASSKEY_ORIGINS")
    half = CliRunner().invoke(app, ["serve", "--db", str(tmp_path / "x.sqlite3")])
    assert half.exit_code == 2
    assert "need both" in half.output


def test_passkeys_from_the_environment_on_localhost(tmp_path: Path) -> None:
    from fiduciary.server.passkey_config import passkeys_from_env

    assert passkeys_from_env({}) is None
    made = passkeys_from_env(
        {
            "FIDUCIARY_PASSKEY_RP_ID": "localhost",
            "FIDUCIARY_PASSKEY_ORIGINS": "http://localhost:8000, https://console.localhost",
            "FIDUCIARY_PASSKEYS": str(tmp_path / "p" / "keys.sqlite3"),
        }
    )
    assert made is not None
    assert made.origins == ("http://localhost:8000", "https://console.localhost")
    made.registry.close()

"""Passkey-signed approvals: a real WebAuthn assertion (a software authenticator) verified by
py_webauthn over the approval's binding; every refusal changes nothing; ``verify_run`` checks
every signature again offline, and a changed byte makes it fail."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from fiduciary import Agent, ApprovalError, ManualClock, PendingAction, Policy
from fiduciary.exceptions import ConfigurationError
from fiduciary.passkeys import PasskeyRegistry, Passkeys, check_origins, verify_run
from fiduciary.signed_approvals import SignatureRule, binding, challenge
from fiduciary.stores.base import ApprovalRecord, Store
from fiduciary.testing import Call, Reply, Script, ToolCalls, collect

from .cli.support import fiduciary
from .conftest import Effects, make_agent
from .softauthn import SoftAuthenticator

pytestmark = pytest.mark.timeout(30)

RP = "fiduciary.test"
ORIGIN = "https://fiduciary.test"


@pytest.fixture
def registry_path(tmp_path: Path) -> Path:
    return tmp_path / "passkeys.sqlite3"


@pytest.fixture
def passkeys(registry_path: Path, clock: ManualClock) -> Iterator[Passkeys]:
    registry = PasskeyRegistry(registry_path)
    yield Passkeys(registry, rp_id=RP, origins=[ORIGIN], clock=clock)
    registry.close()


def enrol(passkeys: Passkeys, principal: str) -> SoftAuthenticator:
    device = SoftAuthenticator(RP, ORIGIN)
    passkeys.register(
        principal, device.create(passkeys.registration_options(principal)), name="laptop"
    )
    return device


def signing_agent(effects: Effects, store: Store, clock: ManualClock, passkeys: Passkeys) -> Agent:
    agent = make_agent(
        effects,
        store,
        clock,
        Script("send 150", [ToolCalls([Call("send", {"to": "x", "amount": "150"})]), Reply("ok")]),
        Script("send 120", [ToolCalls([Call("send", {"to": "y", "amount": "120"})]), Reply("ok")]),
        policy=Policy(signatures=SignatureRule(at_or_above_usd=Decimal(100))),
    )
    return agent.with_options(signatures=passkeys)


async def pending(agent: Agent, message: str) -> tuple[PendingAction, ApprovalRecord]:
    events = await collect(agent.run(message, principal="alice"))
    event = next(e for e in events if isinstance(e, PendingAction))
    record = await agent.store.get_approval(event.approval_id)
    assert record is not None
    return event, record


def sign(device: SoftAuthenticator, record: ApprovalRecord, **options: str) -> dict[str, object]:
    signed = binding(
        record, args_digest=record.args_digest, tier=record.tier, amount_usd=record.amount_usd
    )
    return device.get(challenge(signed), **options)


async def test_a_signed_approval_runs_once_and_verifies_offline(
    effects: Effects, store: Store, clock: ManualClock, passkeys: Passkeys
) -> None:
    device = enrol(passkeys, "alice")
    agent = signing_agent(effects, store, clock, passkeys)
    event, record = await pending(agent, "send 150")
    decided = await agent.approve(event.approval_id, by="alice", assertion=sign(device, record))
    assert decided.status == "approved"
    await collect(agent.resume(event.run_id))
    assert len(effects.payments) == 1
    (verdict,) = verify_run(passkeys.registry, event.run_id)
    assert verdict.valid, verdict.reason
    assert verdict.approver == "alice"
    assert verdict.key.startswith("laptop (")
    assert verdict.signed["args_digest"] == record.args_digest
    assert verdict.signed["amount"] == "150"
    (credential,) = passkeys.list("alice")
    assert credential.last_used_at == clock.now()
    assert credential.sign_count == 1


async def test_without_a_signature_the_approval_is_refused_with_where_to_sign(
    effects: Effects, store: Store, clock: ManualClock, passkeys: Passkeys
) -> None:
    enrol(passkeys, "alice")
    agent = signing_agent(effects, store, clock, passkeys)
    event, _ = await pending(agent, "send 150")
    with pytest.raises(ApprovalError) as caught:
        await agent.approve(event.approval_id, by="alice")  # the CLI, Telegram, MCP
    assert caught.value.code == "signature_required"
    assert "in the web console (/console)" in caught.value.message
    unable_to_verify = agent.with_options(signatures=None)
    with pytest.raises(ApprovalError) as unable:  # an agent that cannot verify decides nothing
        await unable_to_verify.approve(event.approval_id, by="alice", assertion={"id": "x"})
    assert unable.value.code == "signature_required"
    record = await store.get_approval(event.approval_id)
    assert record is not None
    assert record.status == "pending"


@pytest.mark.parametrize("attack", ["other_principal", "other_approval", "no_uv", "origin"])
async def test_a_bad_assertion_is_refused_and_changes_nothing(
    effects: Effects, store: Store, clock: ManualClock, passkeys: Passkeys, attack: str
) -> None:
    alice = enrol(passkeys, "alice")
    bob = enrol(passkeys, "bob")
    agent = signing_agent(effects, store, clock, passkeys)
    event, record = await pending(agent, "send 150")
    reasons = {
        "other_principal": "this passkey belongs to another principal",
        "other_approval": "challenge was not expected",
        "no_uv": "User verification is required",
        "origin": "Unexpected client data origin",
    }
    if attack == "other_principal":
        assertion = sign(bob, record)
    elif attack == "other_approval":
        _, other = await pending(agent, "send 120")
        assertion = sign(alice, other)
    elif attack == "no_uv":
        alice.user_verified = False
        assertion = sign(alice, record)
    else:
        assertion = sign(alice, record, origin="https://evil.example")
    with pytest.raises(ApprovalError) as caught:
        await agent.approve(event.approval_id, by="alice", assertion=assertion)
    assert caught.value.code == "signature_refused"
    assert reasons[attack] in caught.value.message
    after = await store.get_approval(event.approval_id)
    assert after is not None
    assert after.status == "pending"
    assert verify_run(passkeys.registry, event.run_id) == []
    assert effects.payments == []


async def test_a_replayed_assertion_is_refused(
    effects: Effects, store: Store, clock: ManualClock, passkeys: Passkeys
) -> None:
    device = enrol(passkeys, "alice")
    agent = signing_agent(effects, store, clock, passkeys)
    _, record = await pending(agent, "send 150")
    assertion = sign(device, record)
    signed = binding(
        record, args_digest=record.args_digest, tier=record.tier, amount_usd=record.amount_usd
    )
    await passkeys.verify(record, approver="alice", signed=signed, assertion=assertion)
    with pytest.raises(ApprovalError) as caught:
        await passkeys.verify(record, approver="alice", signed=signed, assertion=assertion)
    assert caught.value.code == "signature_refused"
    assert len(verify_run(passkeys.registry, record.run_id)) == 1


@pytest.mark.parametrize(
    "column", ["authenticator_data", "client_data_json", "signature", "binding", "public_key"]
)
async def test_a_changed_stored_byte_fails_the_offline_verification(
    effects: Effects,
    store: Store,
    clock: ManualClock,
    passkeys: Passkeys,
    registry_path: Path,
    column: str,
) -> None:
    device = enrol(passkeys, "alice")
    agent = signing_agent(effects, store, clock, passkeys)
    event, record = await pending(agent, "send 150")
    await agent.approve(event.approval_id, by="alice", assertion=sign(device, record))
    assert [v.valid for v in verify_run(passkeys.registry, event.run_id)] == [True]
    table = "passkey_credentials" if column == "public_key" else "passkey_signatures"
    with sqlite3.connect(registry_path) as conn:
        (value,) = conn.execute(f"SELECT {column} FROM {table}").fetchone()
        data = bytearray(value.encode() if isinstance(value, str) else value)
        data[len(data) - 3] ^= 0x01  # one bit of one byte
        changed = data.decode() if isinstance(value, str) else bytes(data)
        conn.execute(f"UPDATE {table} SET {column} = ?", (changed,))
    (verdict,) = verify_run(passkeys.registry, event.run_id)
    assert not verdict.valid
    assert verdict.reason


def test_origins_must_be_https_except_on_localhost() -> None:
    assert check_origins("localhost", ["http://localhost:8000"]) == ("http://localhost:8000",)
    assert check_origins("example.com", ["https://app.example.com"]) == ("https://app.example.com",)
    with pytest.raises(ConfigurationError, match="must be https"):
        check_origins("example.com", ["http://example.com"])
    with pytest.raises(ConfigurationError, match="not within the relying party id"):
        check_origins("example.com", ["https://example.org"])
    with pytest.raises(ConfigurationError, match="at least one origin"):
        check_origins("example.com", [])


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)  # three processes: once is enough
async def test_audit_verify_says_who_which_key_what_and_fails_on_a_changed_byte(
    effects: Effects,
    store: Store,
    clock: ManualClock,
    passkeys: Passkeys,
    registry_path: Path,
) -> None:
    device = enrol(passkeys, "alice")
    agent = signing_agent(effects, store, clock, passkeys)
    event, record = await pending(agent, "send 150")
    await agent.approve(event.approval_id, by="alice", assertion=sign(device, record))
    run = str(event.run_id)

    ok = fiduciary("audit", "verify", run, "--passkeys", registry_path, columns=300)
    assert ok.returncode == 0, ok.stderr
    assert "valid alice with laptop (" in ok.stdout
    assert f"approval {event.approval_id}: arguments {record.args_digest}, confirm, 150 USD" in (
        ok.stdout
    )
    assert "1 of 1 signatures valid" in ok.stdout

    with sqlite3.connect(registry_path) as conn:
        (value,) = conn.execute("SELECT signature FROM passkey_signatures").fetchone()
        conn.execute(
            "UPDATE passkey_signatures SET signature = ?", (bytes([value[0] ^ 1]) + value[1:],)
        )
    bad = fiduciary("audit", "verify", run, "--passkeys", registry_path, columns=300)
    assert bad.returncode == 1
    assert "INVALID alice" in bad.stdout
    assert "0 of 1 signatures valid" in bad.stdout

    missing = fiduciary("audit", "verify", run, "--passkeys", registry_path.with_name("no"))
    assert missing.returncode == 2
    assert "no passkey registry at" in missing.stderr
    assert "Traceback" not in missing.stderr + bad.stderr

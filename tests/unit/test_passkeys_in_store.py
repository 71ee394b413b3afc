"""The passkey registry in the run store's SQLite file: registered, signed, verified offline by
``fiduciary audit verify RUN --db`` from that file; a registration challenge is taken once
and expires."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from fiduciary import ApprovalError, ManualClock, PendingAction, Policy
from fiduciary.passkeys import PasskeyRegistry, Passkeys, verify_run
from fiduciary.signed_approvals import SignatureRule, binding, challenge
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ToolCalls, collect

from .cli.support import fiduciary
from .conftest import Effects, make_agent
from .softauthn import SoftAuthenticator

pytestmark = pytest.mark.timeout(60)

RP, ORIGIN = "fiduciary.test", "https://fiduciary.test"


async def test_signed_in_the_run_store_and_verified_from_it(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    store, clock, effects = SQLiteStore(db), ManualClock(), Effects()
    registry = PasskeyRegistry.for_store(store)
    try:
        passkeys = Passkeys(registry, rp_id=RP, origins=[ORIGIN], clock=clock)
        device = SoftAuthenticator(RP, ORIGIN)
        answer = device.create(passkeys.registration_options("alice"))
        passkeys.register("alice", answer, name="laptop")
        with pytest.raises(ApprovalError, match="registration options first"):
            passkeys.register("alice", answer, name="again")  # its challenge is taken
        late = SoftAuthenticator(RP, ORIGIN)
        options = passkeys.registration_options("alice")
        clock.advance(timedelta(minutes=6))
        with pytest.raises(ApprovalError, match="registration options first"):
            passkeys.register("alice", late.create(options), name="late")  # expired
        agent = make_agent(
            effects,
            store,
            clock,
            Script(
                "send 150", [ToolCalls([Call("send", {"to": "x", "amount": "150"})]), Reply("ok")]
            ),
            policy=Policy(signatures=SignatureRule(at_or_above_usd=Decimal(100))),
        ).with_options(signatures=passkeys)
        events = await collect(agent.run("send 150", principal="alice"))
        (event,) = [e for e in events if isinstance(e, PendingAction)]
        record = await store.get_approval(event.approval_id)
        assert record is not None
        signed = binding(
            record, args_digest=record.args_digest, tier=record.tier, amount_usd=record.amount_usd
        )
        await agent.approve(event.approval_id, by="alice", assertion=device.get(challenge(signed)))
        await collect(agent.resume(event.run_id))
        assert len(effects.payments) == 1
        assert [v.valid for v in verify_run(registry, event.run_id)] == [True]
    finally:
        registry.close()
        await store.close()
    ok = fiduciary("audit", "verify", str(event.run_id), "--db", db, columns=300)
    assert ok.returncode == 0, ok.stderr
    assert "valid alice with laptop (" in ok.stdout
    assert "1 of 1 signatures valid" in ok.stdout

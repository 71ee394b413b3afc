"""An approval binds to what the person was shown, even when its stored row is rewritten.

The approvals row is rewritten with the database's own client (sqlite3, psycopg), the way an
attacker with write access to the file would; the pending action in the run's log is what it is
checked against, at the decision and again before anything executes.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from fiduciary import (
    Agent,
    ApprovalError,
    ManualClock,
    PendingAction,
    ToolCallRejected,
    capability,
)
from fiduciary.capabilities import args_digest
from fiduciary.events import ToolCallEnd
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

from ..postgres_support import new_database
from .conftest import Effects, make_agent

ALICE = "alice"

Tamper = Callable[[str, dict[str, Any]], None]  # (approval_id, column -> value)


@pytest.fixture(params=["sqlite", "postgres"])
async def tampered_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Store, Tamper]]:
    """A real database file/server and a way to rewrite an approvals row behind the store."""
    if request.param == "sqlite":
        path = tmp_path / "runs.sqlite3"
        store: Store = SQLiteStore(path)

        def tamper(approval_id: str, columns: dict[str, Any]) -> None:
            sets = ", ".join(f"{c} = ?" for c in columns)
            with sqlite3.connect(path) as conn:
                cur = conn.execute(
                    f"UPDATE approvals SET {sets} WHERE approval_id = ?",
                    [*columns.values(), approval_id],
                )
                assert cur.rowcount == 1

    else:
        import psycopg

        from fiduciary.stores.postgres import PostgresStore

        dsn = await new_database()
        store = await PostgresStore.open(dsn)

        def tamper(approval_id: str, columns: dict[str, Any]) -> None:
            sets = ", ".join(f"{c} = %s" for c in columns)
            with psycopg.connect(dsn, autocommit=True) as conn:
                cur = conn.execute(
                    f"UPDATE approvals SET {sets} WHERE approval_id = %s",
                    [*columns.values(), approval_id],
                )
                assert cur.rowcount == 1

    yield store, tamper
    await store.close()


def paying_agent(effects: Effects, store: Store, clock: ManualClock, amount: str) -> Agent:
    script = Script(
        "pay",
        [ToolCalls([Call("send", {"to": "bob", "amount": amount})]), Reply("reported")],
    )
    return make_agent(effects, store, clock, script)


async def _pending(agent: Agent) -> PendingAction:
    events = await collect(agent.run("pay bob", principal=ALICE))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    return pending


def _evil_args(pending: PendingAction) -> dict[str, Any]:
    return {**pending.input, "to": "mallory"}


async def test_rewritten_args_with_the_old_digest_are_refused_at_the_decision(
    effects: Effects, tampered_store: tuple[Store, Tamper], clock: ManualClock
) -> None:
    store, tamper = tampered_store
    agent = paying_agent(effects, store, clock, "150")
    pending = await _pending(agent)
    tamper(str(pending.approval_id), {"args": json.dumps(_evil_args(pending))})
    with pytest.raises(ApprovalError) as err:
        await agent.approve(pending.approval_id, by=ALICE, args_digest=pending.args_digest)
    assert err.value.code == "tampered"
    # the digest rewritten to match the new args does not help either
    evil = _evil_args(pending)
    tamper(str(pending.approval_id), {"args_digest": args_digest(evil)})
    with pytest.raises(ApprovalError) as err:
        await agent.approve(pending.approval_id, by=ALICE, args_digest=args_digest(evil))
    assert err.value.code == "tampered"
    assert (await store.get_approval(pending.approval_id)).status == "pending"  # type: ignore[union-attr]
    assert effects.payments == []


async def test_explicit_card_rewritten_to_confirm_still_needs_the_amount(
    effects: Effects, tampered_store: tuple[Store, Tamper], clock: ManualClock
) -> None:
    store, tamper = tampered_store
    agent = paying_agent(effects, store, clock, "700")
    pending = await _pending(agent)
    assert pending.tier == "explicit"
    tamper(str(pending.approval_id), {"tier": "confirm"})
    with pytest.raises(ApprovalError) as err:
        await agent.approve(pending.approval_id, by=ALICE)
    assert err.value.code == "tampered"
    tamper(str(pending.approval_id), {"tier": "explicit", "amount_usd": "7"})
    with pytest.raises(ApprovalError) as err:
        await agent.approve(pending.approval_id, by=ALICE, confirm_amount="7")
    assert err.value.code == "tampered"
    assert effects.payments == []


@pytest.mark.parametrize("column", ["args", "approved_args", "tier", "amount_usd"])
async def test_a_row_rewritten_after_approval_does_not_execute(
    effects: Effects, tampered_store: tuple[Store, Tamper], clock: ManualClock, column: str
) -> None:
    store, tamper = tampered_store
    agent = paying_agent(effects, store, clock, "700")
    pending = await _pending(agent)
    await agent.approve(pending.approval_id, by=ALICE, confirm_amount="700")
    evil = _evil_args(pending)
    changes: dict[str, Any] = {
        "args": {"args": json.dumps(evil), "args_digest": args_digest(evil)},
        # the approved args with a digest that matches them: only the log can tell
        "approved_args": {"approved_args": json.dumps(evil), "approved_digest": args_digest(evil)},
        "tier": {"tier": "confirm"},
        "amount_usd": {"amount_usd": "7"},
    }[column]
    tamper(str(pending.approval_id), changes)
    more = await collect(agent.resume(pending.run_id))
    assert effects.payments == []
    (rejected,) = [e for e in more if isinstance(e, ToolCallRejected)]
    assert rejected.reason == "tampered"
    assert "not executed" in rejected.message
    assert not [e for e in more if isinstance(e, ToolCallEnd)]
    audit = await store.audit_records(pending.run_id)
    assert any(a.outcome == "rejected:tampered" for a in audit)
    assert (await agent.get_run(pending.run_id)).status == "completed"


async def test_an_honest_edit_still_executes(
    effects: Effects, tampered_store: tuple[Store, Tamper], clock: ManualClock
) -> None:
    store, _ = tampered_store
    agent = paying_agent(effects, store, clock, "150")
    pending = await _pending(agent)
    await agent.approve(pending.approval_id, by=ALICE, edits={"amount": "140", "memo": "rent"})
    await collect(agent.resume(pending.run_id))
    assert effects.payments == [{"to": "bob", "amount": Decimal("140"), "memo": "rent"}]


async def test_a_client_result_for_a_rewritten_row_is_refused(
    effects: Effects, tampered_store: tuple[Store, Tamper], clock: ManualClock
) -> None:
    @capability(kind="execute", executor="client", operation="send", tier="confirm")
    async def sign_and_send(to: str, amount: str) -> dict[str, str]:
        """The person's device signs and sends this transfer."""
        raise AssertionError("client-executed")

    store, tamper = tampered_store
    script = Script(
        "sign",
        [ToolCalls([Call("sign_and_send", {"to": "bob", "amount": "3"})]), Reply("reported")],
    )
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[sign_and_send],
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    events = await collect(agent.run("sign it", principal=ALICE))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    evil = _evil_args(pending)
    tamper(str(pending.approval_id), {"args": json.dumps(evil), "args_digest": args_digest(evil)})
    with pytest.raises(ApprovalError) as err:
        await agent.submit_result(pending.approval_id, {"sent": "yes"}, by=ALICE)
    assert err.value.code == "tampered"
    # denying is always possible: nothing runs
    await agent.deny(pending.approval_id, by=ALICE, reason="looks wrong")
    more = await collect(agent.resume(pending.run_id))
    (rejected,) = [e for e in more if isinstance(e, ToolCallRejected)]
    assert rejected.reason == "denied"

"""Dual control over HTTP after an approver's edit: every view shows the edited arguments the set
votes on (their digest, amount, the note that an edit started a new set), an approver who
approves what is shown joins that set, and the action runs once with the edited arguments."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import httpx
import pytest

from fiduciary import Agent, ManualClock, Policy
from fiduciary.capabilities import args_digest
from fiduciary.server import Server
from fiduciary.stores.base import Store
from fiduciary.testing import ScriptedModel, allow_all

from ..conftest import Effects, toy_capabilities
from .conftest import Keys, bearer, problem, scripts, settle, start_run
from .dual_support import FINANCE, agent, card, carol

pytestmark = pytest.mark.timeout(30)

__all__ = ["agent", "carol"]  # the fixtures (dual_support)


async def test_every_view_shows_the_edited_set_and_approving_it_joins_it(
    client: httpx.AsyncClient,
    keys: Keys,
    server: Server,
    effects: Effects,
    carol: str,
    store: Store,
) -> None:
    run_id = await start_run(client, keys.alice, "send 60")
    await settle(server)
    (proposed,) = (
        await client.get(f"/approvals?run_id={run_id}", headers=bearer(keys.alice))
    ).json()["approvals"]
    approval_id = proposed["approval_id"]
    assert proposed["edited"] is False
    assert proposed["principal"] == "alice"
    voted = await client.post(
        f"/approvals/{approval_id}/approve",
        json={"args_digest": proposed["args_digest"], "edits": {"amount": "70"}},
        headers=bearer(carol),
    )
    assert voted.status_code == 200, voted.text
    edited_digest = args_digest({**proposed["args"], "amount": "70"})
    for key in (keys.alice, keys.bob, carol):  # the proposer and both members see the same
        shown = await card(client, key, approval_id)
        assert shown["status"] == "pending"
        assert shown["args"]["amount"] == "70"
        assert shown["args_digest"] == edited_digest != proposed["args_digest"]
        assert Decimal(shown["amount_usd"]) == Decimal(70)
        assert shown["edited"] is True
        assert shown["proposed_args_digest"] == proposed["args_digest"]
        assert shown["dual_control"]["edited"] is True
        assert shown["dual_control"]["progress"].endswith("; an edit started a new approval set")
        assert shown["dual_control"]["progress"].startswith("1 of 2 approved (carol, ")
    (listed,) = (await client.get("/approvals", headers=bearer(keys.bob))).json()["approvals"]
    assert listed["args_digest"] == edited_digest
    assert listed["args"]["amount"] == "70"
    # a card still showing the proposed arguments is refused if its digest is neither set's
    stale = await client.post(
        f"/approvals/{approval_id}/approve",
        json={"args_digest": "0" * 64},
        headers=bearer(keys.bob),
    )
    problem(stale, 409, "digest_mismatch")
    # bob approves what he is shown: the edited arguments; the set is complete
    done = await client.post(
        f"/approvals/{approval_id}/approve",
        json={"args_digest": edited_digest},
        headers=bearer(keys.bob),
    )
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "approved"
    assert done.json()["args_digest"] == edited_digest
    assert done.json()["edited"] is False  # decided: the approved arguments, as always
    await settle(server)
    assert [p["amount"] for p in effects.payments] == [Decimal(70)]
    record = await store.get_approval(UUID(approval_id))
    assert record is not None
    assert record.approved_digest == edited_digest
    assert sorted(record.decided_by.split(", ")) == ["bob", "carol"]  # type: ignore[union-attr]


async def test_approving_the_proposed_digest_after_an_edit_votes_for_the_proposed_args(
    client: httpx.AsyncClient,
    keys: Keys,
    server: Server,
    effects: Effects,
    carol: str,
    clock: ManualClock,
) -> None:
    run_id = await start_run(client, keys.alice, "send 60")
    await settle(server)
    (proposed,) = (
        await client.get(f"/approvals?run_id={run_id}", headers=bearer(keys.alice))
    ).json()["approvals"]
    url = f"/approvals/{proposed['approval_id']}/approve"
    edited = await client.post(
        url,
        json={"args_digest": proposed["args_digest"], "edits": {"amount": "70"}},
        headers=bearer(carol),
    )
    assert edited.status_code == 200, edited.text
    clock.advance(timedelta(minutes=1))  # the votes' order is their time
    # bob's card was opened before carol's edit: his vote is for what he saw, another set
    old = await client.post(
        url, json={"args_digest": proposed["args_digest"]}, headers=bearer(keys.bob)
    )
    assert old.status_code == 200, old.text
    body = old.json()
    assert body["status"] == "pending"
    assert body["args_digest"] == proposed["args_digest"]  # the latest set: the proposed args
    assert body["edited"] is False
    assert body["dual_control"]["progress"].startswith("1 of 2 approved (bob, ")
    assert body["dual_control"]["progress"].endswith("; an edit started a new approval set")
    await settle(server)
    assert effects.payments == []


def test_the_cli_lists_the_edited_set(tmp_path: Any) -> None:
    """``fiduciary approvals list --json`` reads the votes: the edited arguments and the note."""
    import asyncio

    from typer.testing import CliRunner

    from fiduciary.cli.app import app
    from fiduciary.stores.sqlite import SQLiteStore
    from fiduciary.testing import collect

    db = tmp_path / "runs.sqlite3"
    effects = Effects()

    async def propose_and_edit() -> str:
        store = SQLiteStore(db)
        try:
            agent = Agent(
                model=ScriptedModel(scripts()),
                capabilities=toy_capabilities(effects),
                store=store,
                authorize=allow_all,
                policy=Policy(dual_control=[FINANCE]),
            )
            events = await collect(agent.run("send 60", principal="alice"))
            (approval,) = [e for e in events if e.type == "pending_action"]
            approval_id = approval.approval_id
            await agent.approve(approval_id, by="carol", edits={"amount": "70"})
            return str(approval_id)
        finally:
            await store.close()

    approval_id = asyncio.run(propose_and_edit())
    result = CliRunner().invoke(app, ["approvals", "list", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    (line,) = [json.loads(x) for x in result.output.splitlines() if x.strip()]
    assert line["approval_id"] == approval_id
    assert line["edited"] is True
    assert line["note"] == "an edit started a new approval set"
    assert line["approved_args"]["amount"] == "70"
    assert line["approved_digest"] == args_digest(line["approved_args"])
    assert line["args"]["amount"] == "60"  # the row keeps what the run proposed
    table = CliRunner().invoke(app, ["approvals", "list", "--db", str(db)])
    assert table.exit_code == 0, table.output
    assert "an edit started a new approval set" in " ".join(table.output.split())


async def test_a_proposer_refused_is_an_audit_row_and_nothing_else(
    client: httpx.AsyncClient, keys: Keys, server: Server, effects: Effects, store: Store
) -> None:
    run_id = await start_run(client, keys.alice, "send 60")
    await settle(server)
    (proposed,) = (
        await client.get(f"/approvals?run_id={run_id}", headers=bearer(keys.alice))
    ).json()["approvals"]
    events, run = await store.read_events(run_id), await store.get_run(run_id)
    before = await store.audit_records(run_id)
    refused = await client.post(
        f"/approvals/{proposed['approval_id']}/approve",
        json={"args_digest": proposed["args_digest"]},
        headers=bearer(keys.alice),
    )
    detail = problem(refused, 403, "separation_of_duties")["detail"]
    (row,) = (await store.audit_records(run_id))[len(before) :]
    assert (row.outcome, row.principal, row.output) == (
        "rejected:separation_of_duties",
        "alice",
        detail,
    )
    assert row.input == {"approval_id": proposed["approval_id"]}
    assert await store.read_events(run_id) == events
    assert await store.get_run(run_id) == run
    assert await store.list_votes(UUID(proposed["approval_id"])) == []
    await settle(server)
    assert effects.payments == []

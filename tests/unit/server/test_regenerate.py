"""A swap's stale card made anew over HTTP: POST /approvals/{id}/regenerate supersedes the
approval, the run waits on a new one with a fresh quote, and the old one is refused for good.
And durably: a store write that fails between the two leaves exactly one live approval."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from fiduciary import ManualClock, Policy
from fiduciary.events import ActionResolved, PendingAction, ToolCallEnd
from fiduciary.exceptions import StoreError
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, MemoryStore, Reply, Script, ScriptedModel, ToolCalls, collect
from fiduciary.wallet import PaperWallet, build_wallet_agent
from tests.unit.wallet.test_regenerate import swap_agent

from .conftest import AppFactory, Keys, all_events, bearer, problem, settle, start_run

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def wallet(clock: ManualClock) -> Iterator[PaperWallet]:
    with PaperWallet(clock=clock) as opened:
        yield opened


async def test_a_card_is_made_anew_over_http(
    make_app: AppFactory, keys: Keys, wallet: PaperWallet, clock: ManualClock
) -> None:
    app = make_app(agent=swap_agent(MemoryStore(), wallet, clock))
    server = app.state.server
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://test"
    ) as client:
        run_id = await start_run(client, keys.alice, "swap 500 USDC for SUI")
        await settle(server)
        listed = await client.get(f"/approvals?run_id={run_id}", headers=bearer(keys.alice))
        (card,) = listed.json()["approvals"]
        assert card["regenerable"] is True
        assert card["quoted_at"] is not None
        assert card["regenerated_from"] is None

        clock.advance(timedelta(seconds=75))  # the quote went stale
        old = card["approval_id"]
        answer = await client.post(
            f"/approvals/{old}/regenerate",
            json={"args_digest": card["args_digest"]},
            headers=bearer(keys.alice),
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "superseded"
        await settle(server)

        listed = await client.get(f"/approvals?run_id={run_id}", headers=bearer(keys.alice))
        (fresh,) = listed.json()["approvals"]  # exactly one waits: the new one
        assert fresh["regenerated_from"] == old
        assert fresh["args"]["quote_id"] != card["args"]["quote_id"]
        assert fresh["args_digest"] != card["args_digest"]
        run = await client.get(f"/runs/{run_id}", headers=bearer(keys.alice))
        assert run.json()["status"] == "awaiting_approval"

        # the old approval is gone for good: approving it, digest-bound, is refused
        again = await client.post(
            f"/approvals/{old}/approve",
            json={"args_digest": card["args_digest"], "confirm_amount": "500"},
            headers=bearer(keys.alice),
        )
        problem(again, 409, "already_decided")
        # someone else cannot ask for it; a second regenerate of the old one is refused
        other = await client.post(
            f"/approvals/{fresh['approval_id']}/regenerate", json={}, headers=bearer(keys.bob)
        )
        assert other.status_code in (403, 404), other.text
        twice = await client.post(
            f"/approvals/{old}/regenerate", json={}, headers=bearer(keys.alice)
        )
        problem(twice, 409, "already_decided")

        events = await all_events(client, keys.alice, run_id)
        resolved = [e for e in events if isinstance(e, ActionResolved)]
        assert [(e.decision, str(e.approval_id)) for e in resolved] == [("superseded", old)]
        pending = [e for e in events if isinstance(e, PendingAction)]
        assert [str(p.regenerated_from) for p in pending[1:]] == [old]

        approved = await client.post(
            f"/approvals/{fresh['approval_id']}/approve",
            json={"args_digest": fresh["args_digest"], "confirm_amount": fresh["amount_usd"]},
            headers=bearer(keys.alice),
        )
        assert approved.status_code == 200, approved.text
        await settle(server)
        run = await client.get(f"/runs/{run_id}", headers=bearer(keys.alice))
        assert run.json()["status"] == "completed"


async def test_a_card_not_made_anew_is_refused_with_a_problem(
    make_app: AppFactory, keys: Keys, client: httpx.AsyncClient, server: Any
) -> None:
    run_id = await start_run(client, keys.alice, "send 60")  # the toy send: no regenerate
    await settle(server)
    listed = await client.get(f"/approvals?run_id={run_id}", headers=bearer(keys.alice))
    (card,) = listed.json()["approvals"]
    assert card["regenerable"] is False
    refused = await client.post(
        f"/approvals/{card['approval_id']}/regenerate", json={}, headers=bearer(keys.alice)
    )
    problem(refused, 409, "not_regenerable")
    still = await client.get(f"/approvals/{card['approval_id']}", headers=bearer(keys.alice))
    assert still.json()["status"] == "pending"  # a refusal changes nothing


class _FailingApprovalWrites(SQLiteStore):
    """A store whose next commit carrying a new approval fails, as a crash would."""

    fail_next = True

    async def commit(self, run_id: Any, **kwargs: Any) -> Any:
        if self.fail_next and kwargs.get("approvals"):
            self.fail_next = False
            raise StoreError("disk I/O error (injected)")
        return await super().commit(run_id, **kwargs)


async def test_a_failed_write_between_supersede_and_the_new_card_leaves_one_live_approval(
    tmp_path: Path, wallet: PaperWallet, clock: ManualClock
) -> None:
    path = tmp_path / "runs.sqlite3"
    store = _FailingApprovalWrites(path)
    store.fail_next = False
    agent = swap_agent(store, wallet, clock)
    events = await collect(agent.run("swap 500 USDC for SUI", principal="ann"))
    run_id = events[0].run_id
    (first,) = [e for e in events if isinstance(e, PendingAction)]
    clock.advance(timedelta(seconds=75))
    await agent.regenerate(first.approval_id, by="ann")
    store.fail_next = True  # the drive's commit of the new card fails
    with pytest.raises(StoreError):
        await collect(agent.resume(run_id))
    await store.close()

    # meanwhile: nothing can be approved (the old one is superseded, no new one was written)
    reopened = SQLiteStore(path)
    try:
        assert await reopened.list_approvals(run_id=run_id, status="pending") == []
        later = swap_agent(reopened, wallet, clock)
        resumed = await later.resume_all()  # the decision's wake marker finds the run
        assert run_id in resumed
        live = await reopened.list_approvals(run_id=run_id, status="pending")
        assert len(live) == 1
        logged = [e for e in await reopened.read_events(run_id) if isinstance(e, PendingAction)]
        assert logged[-1].approval_id == live[0].approval_id
        assert logged[-1].regenerated_from == first.approval_id
        old = await reopened.get_approval(first.approval_id)
        assert old is not None
        assert old.status == "superseded"
    finally:
        await reopened.close()


async def test_a_call_of_steps_is_one_card_over_http(
    make_app: AppFactory, keys: Keys, wallet: PaperWallet, clock: ManualClock
) -> None:
    script = Script(
        "swap and save",
        [
            ToolCalls([Call("balance_check")]),
            ToolCalls([Call("swap_and_save", {"from_asset": "SUI", "amount": "100"})]),
            Reply("Swapped and saved."),
        ],
    )
    agent = build_wallet_agent(
        MemoryStore(),
        wallet,
        model=ScriptedModel([script]),
        policy=Policy(preset="conservative", daily_autonomous_limit_usd=None),
        clock=clock,
    )
    app = make_app(agent=agent)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://test"
    ) as client:
        run_id = await start_run(client, keys.alice, "swap and save 100 SUI")
        await settle(app.state.server)
        listed = await client.get(f"/approvals?run_id={run_id}", headers=bearer(keys.alice))
        (card,) = listed.json()["approvals"]
        assert [(s["operation"], s["asset"]) for s in card["steps"]] == [
            ("swap", "SUI"),
            ("save", "USDC"),
        ]
        approved = await client.post(
            f"/approvals/{card['approval_id']}/approve",
            json={"args_digest": card["args_digest"], "confirm_amount": card["amount_usd"]},
            headers=bearer(keys.alice),
        )
        assert approved.status_code == 200, approved.text
        await settle(app.state.server)
        events = await all_events(client, keys.alice, run_id)
        (end,) = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "swap_and_save"]
        report = json.JSONDecoder().raw_decode(end.output)[0]
        assert report["completed"] is True
        assert [s["status"] for s in report["steps"]] == ["done", "done"]

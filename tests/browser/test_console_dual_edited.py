"""Dual control and signatures in the console, in a real browser (Chromium): the proposer's card
has no Approve (a line says who must approve), and after an approver's edit it shows the edited
arguments; a second approver's card shows the edited set and approving it runs the edited action
once. With a virtual authenticator: a second principal's passkey, a replayed assertion, an
assertion for another approval, user verification off and a wrong origin are each refused (403
and an audit row, from the browser's own bytes), and nothing executes."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

import httpx
import pytest

from fiduciary import Agent, Policy
from fiduciary.capabilities import args_digest
from fiduciary.dual_control import DualControl
from fiduciary.passkeys import PasskeyRegistry, Passkeys, check_origins
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.signed_approvals import SignatureRule
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import allow_all
from tests.waiting import eventually

from ..unit.conftest import Effects, toy_capabilities
from .served_page import signed_in
from .test_console_dual_control import WRITES, dual_agent, model, pictures, vote
from .test_console_passkeys import REGISTER, authenticator

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# the console's way to sign (fetch the options, navigator.credentials.get), for another key
SIGN = """async ([key, approvalId]) => {
  const b64 = (t) => Uint8Array.from(
    atob(t.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((t.length + 3) % 4)),
    (c) => c.charCodeAt(0));
  const out = (b) => btoa(String.fromCharCode(...new Uint8Array(b)))
    .replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
  const headers = { authorization: `Bearer ${key}` };
  const got = await fetch(`/approvals/${approvalId}/signing-options`, { headers });
  const { options } = await got.json();
  const publicKey = { ...options, challenge: b64(options.challenge),
    allowCredentials: (options.allowCredentials || []).map((c) => ({ ...c, id: b64(c.id) })) };
  try {
    const made = await navigator.credentials.get({ publicKey });
    const r = made.response;
    return { id: made.id, rawId: out(made.rawId), type: made.type, response: {
      authenticatorData: out(r.authenticatorData), clientDataJSON: out(r.clientDataJSON),
      signature: out(r.signature), userHandle: r.userHandle ? out(r.userHandle) : null } };
  } catch (e) {
    return { refused: e.name };
  }
}"""


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_the_proposers_card_has_no_approve_and_shows_the_edited_set(
    tmp_path: Path,
) -> None:
    effects = Effects()
    agent, store = dual_agent(tmp_path, effects)  # finance: alice, bob, carol; 2 of them
    keys = MemoryKeyStore()
    alice, _ = await keys.create("alice", WRITES)
    carol, _ = await keys.create("carol", WRITES)
    app = create_app(agent, keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, alice) as shown:
            page = shown.page
            await page.get_by_test_id("message").fill("send 60")
            await page.get_by_test_id("send").click()
            card = page.get_by_test_id("pending-card")
            await card.wait_for()
            # alice proposed it: a member of finance, but never its approver
            line = card.get_by_test_id("needs-approvers")
            await line.get_by_text("needs 2 approvers of finance, not you").wait_for()
            assert await card.get_by_test_id("approve").count() == 0
            assert await card.get_by_test_id("deny").count() == 1
            base = "http://" + urlsplit(page.url).netloc
            async with httpx.AsyncClient(base_url=base) as client:
                await vote(client, carol, {"amount": "61"})
                (approval,) = (await client.get("/approvals", headers=bearer(alice))).json()[
                    "approvals"
                ]
            edited = approval["args_digest"]
            assert approval["edited"] is True
            # the card follows the set (it reads the approval every few seconds)
            progress = card.get_by_test_id("dual-progress")
            await progress.get_by_text("an edit started a new approval set").wait_for()
            await card.locator(".digest").get_by_text(f"sha256 {edited}").wait_for()
            assert '"61"' in await card.get_by_test_id("args").inner_text()
            assert await card.get_by_test_id("approve").count() == 0
            assert effects.payments == []
            await pictures(page, card, tmp_path, "approval-proposer")
    finally:
        await store.close()


async def test_a_second_approver_approves_the_edited_set_from_its_card(tmp_path: Path) -> None:
    effects = Effects()
    agent, store = dual_agent(tmp_path, effects)
    keys = MemoryKeyStore()
    dave, _ = await keys.create("dave", WRITES)
    bob, _ = await keys.create("bob", WRITES)
    carol, _ = await keys.create("carol", WRITES)
    app = create_app(agent, keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, bob) as shown:
            page = shown.page
            base = "http://" + urlsplit(page.url).netloc
            async with httpx.AsyncClient(base_url=base) as client:
                started = await client.post(
                    "/runs", json={"message": "send 60"}, headers=bearer(dave)
                )
                assert started.status_code == 202, started.text
                await vote(client, carol, {"amount": "61"})
            item = page.get_by_test_id("pending-item")
            await item.wait_for()
            await item.click()
            card = page.get_by_test_id("vote-card")
            await (
                card.get_by_test_id("dual-progress")
                .get_by_text("an edit started a new approval set")
                .wait_for()
            )
            assert '"61"' in await card.get_by_test_id("args").inner_text()
            digest = args_digest({"to": "x", "amount": "61", "memo": ""})
            assert digest in await card.locator(".digest").inner_text()
            await card.get_by_test_id("approve").click()
            await card.get_by_test_id("vote-outcome").get_by_text("approved").wait_for()

            async def paid() -> bool:
                return len(effects.payments) == 1

            await eventually(paid, what="the payment")
            assert effects.payments[0]["amount"] == Decimal("61")
    finally:
        await store.close()


async def test_browser_made_assertions_refused_each_with_an_audit_row(tmp_path: Path) -> None:
    effects = Effects()
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    finance = DualControl("finance", frozenset({"bob", "carol"}), required=2)
    agent = Agent(
        model=model(),
        capabilities=toy_capabilities(effects),
        store=store,
        authorize=allow_all,
        policy=Policy(
            signatures=SignatureRule(at_or_above_usd=Decimal(50)), dual_control=[finance]
        ),
    )
    keys = MemoryKeyStore()
    alice, _ = await keys.create("alice", WRITES)
    bob, _ = await keys.create("bob", WRITES)
    carol, _ = await keys.create("carol", WRITES)
    registry = PasskeyRegistry.for_store(store)  # the run store's own file
    # the page's origin is known once it is served: the relying party learns it then
    passkeys = Passkeys(registry, rp_id="localhost", origins=["http://localhost"])
    app = create_app(agent.with_options(signatures=passkeys), keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, bob, host="localhost") as shown:
            page = shown.page
            origin = "http://" + urlsplit(page.url).netloc
            passkeys.origins = check_origins("localhost", [origin])
            verifies = await authenticator(page)
            assert await page.evaluate(REGISTER, bob) == 201
            assert await page.evaluate(REGISTER, carol) == 201  # a second principal's passkey
            async with httpx.AsyncClient(base_url=origin) as client:
                ids: list[str] = []
                for _ in range(2):
                    started = await client.post(
                        "/runs", json={"message": "send 60"}, headers=bearer(alice)
                    )
                    assert started.status_code == 202, started.text
                    run_id = started.json()["run_id"]

                    async def waiting(run_id: str = run_id) -> bool:
                        got = await client.get(f"/approvals?run_id={run_id}", headers=bearer(bob))
                        found = got.json()["approvals"]
                        ids[len(ids) :] = [a["approval_id"] for a in found][:1]
                        return bool(found)

                    before = len(ids)
                    await eventually(waiting, what="the approval")
                    assert len(ids) == before + 1
                first, second = ids

                async def sign(key: str, approval_id: str) -> dict[str, Any]:
                    made: dict[str, Any] = await page.evaluate(SIGN, [key, approval_id])
                    return made

                async def approve(approval_id: str, assertion: dict[str, Any]) -> httpx.Response:
                    shown_now = (
                        await client.get(f"/approvals/{approval_id}", headers=bearer(bob))
                    ).json()
                    body = {"args_digest": shown_now["args_digest"], "assertion": assertion}
                    return await client.post(
                        f"/approvals/{approval_id}/approve", json=body, headers=bearer(bob)
                    )

                async def refused(approval_id: str, assertion: dict[str, Any], why: str) -> None:
                    record = await store.get_approval(UUID(approval_id))
                    assert record is not None
                    rows = len(await store.audit_records(record.run_id))
                    answer = await approve(approval_id, assertion)
                    assert answer.status_code == 403, answer.text
                    detail = answer.json()["detail"]
                    assert detail.startswith(why), detail
                    audit = await store.audit_records(record.run_id)
                    (row,) = audit[rows:]
                    assert (row.outcome, row.principal, row.output) == (
                        "rejected:signature_refused",
                        "bob",
                        detail,
                    )
                    assert effects.payments == []

                # carol's passkey, in bob's hands
                await refused(
                    first,
                    await sign(carol, first),
                    "this passkey belongs to another principal",
                )
                # bob's signature of the second approval, for the first
                await refused(first, await sign(bob, second), "the signature is refused")
                # bob signs the first: 1 of 2; the same assertion again is a replay
                mine = await sign(bob, first)
                counted = await approve(first, mine)
                assert counted.status_code == 200, counted.text
                assert counted.json()["status"] == "pending"
                await refused(first, mine, "the signature is refused")
                # a console served from another origin than the relying party's
                passkeys.origins = check_origins("localhost", ["https://console.localhost"])
                await refused(second, await sign(bob, second), "the signature is refused")
                passkeys.origins = check_origins("localhost", [origin])
                # user verification off: the browser makes no assertion at all
                await verifies(False)
                assert await sign(bob, second) == {"refused": "NotAllowedError"}
                still = await store.get_approval(UUID(second))
                assert still is not None
                assert still.status == "pending"
                assert effects.payments == []
    finally:
        registry.close()
        await store.close()

"""Approving by signing, in a real browser: Chromium with a virtual authenticator (the DevTools
protocol's WebAuthn domain) registers a passkey, the console's Approve signs the approval's
binding with it, the action runs once, and ``verify_run`` checks the signature offline. With
user verification off, the browser signs nothing and nothing runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from fiduciary import Agent, Policy
from fiduciary.passkeys import PasskeyRegistry, Passkeys, check_origins, verify_run
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.signed_approvals import SignatureRule
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all
from tests.agent_support import Effects, toy_capabilities

from .served_page import Page, signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

REGISTER = """async (key) => {
  const b64 = (t) => Uint8Array.from(
    atob(t.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((t.length + 3) % 4)),
    (c) => c.charCodeAt(0));
  const out = (b) => btoa(String.fromCharCode(...new Uint8Array(b)))
    .replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
  const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };
  const got = await fetch("/passkeys/registration-options", { method: "POST", headers });
  const { options } = await got.json();
  const publicKey = { ...options, challenge: b64(options.challenge),
    user: { ...options.user, id: b64(options.user.id) },
    excludeCredentials: (options.excludeCredentials || []).map((c) => ({ ...c, id: b64(c.id) })) };
  const made = await navigator.credentials.create({ publicKey });
  const credential = { id: made.id, rawId: out(made.rawId), type: made.type, response: {
    clientDataJSON: out(made.response.clientDataJSON),
    attestationObject: out(made.response.attestationObject) } };
  const sent = await fetch("/passkeys", { method: "POST", headers,
    body: JSON.stringify({ credential, name: "this browser" }) });
  return sent.status;
}"""


async def authenticator(page: Page) -> Callable[[bool], Awaitable[None]]:
    """A virtual platform authenticator that verifies the user; the function it returns turns
    user verification on or off."""
    cdp = await page.context.new_cdp_session(page)
    await cdp.send("WebAuthn.enable")
    added = await cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )

    async def verifies(on: bool) -> None:
        await cdp.send(
            "WebAuthn.setUserVerified",
            {"authenticatorId": added["authenticatorId"], "isUserVerified": on},
        )

    return verifies


@pytest.mark.parametrize("verified", [True, False], ids=["uv", "no-uv"])
async def test_register_a_passkey_and_approve_by_signing(tmp_path: Path, verified: bool) -> None:
    effects = Effects()
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    registry = PasskeyRegistry(tmp_path / "passkeys.sqlite3")
    agent = Agent(
        model=ScriptedModel(
            [
                Script(
                    "send 60", [ToolCalls([Call("send", {"to": "x", "amount": "60"})]), Reply("ok")]
                )
            ]
        ),
        capabilities=toy_capabilities(effects),
        store=store,
        authorize=allow_all,
        policy=Policy(signatures=SignatureRule(at_or_above_usd=Decimal(50))),
    )
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
    # the page's origin is known once it is served: the relying party learns it then
    passkeys = Passkeys(registry, rp_id="localhost", origins=["http://localhost"])
    app = create_app(agent.with_options(signatures=passkeys), keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key, host="localhost") as shown:
            page = shown.page
            origin = "http://" + (urlsplit(page.url).netloc)
            passkeys.origins = check_origins("localhost", [origin])
            verifies = await authenticator(page)
            assert await page.evaluate(REGISTER, key) == 201
            if not verified:  # the same passkey, on a device that no longer verifies the user
                await verifies(False)
            await page.get_by_test_id("message").fill("send 60")
            await page.get_by_test_id("send").click()
            card = page.get_by_test_id("pending-card")
            await card.wait_for()
            await card.get_by_test_id("approve").click()
            if verified:
                await page.get_by_test_id("conversation").get_by_text("ok").last.wait_for()
                assert len(effects.payments) == 1
                (run,) = await store.list_runs()
                (verdict,) = verify_run(registry, run.run_id)
                assert verdict.valid, verdict.reason
                assert verdict.approver == "alice"
            else:
                error = card.locator(".error")
                # Chrome refuses to sign without user verification (NotAllowedError): no
                # assertion is made; the server's own check is tested with a software one
                await error.filter(has_text="not allowed").wait_for()
                approvals: list[Any] = await store.list_approvals(status="pending")
                assert len(approvals) == 1
                assert effects.payments == []
    finally:
        registry.close()
        await store.close()

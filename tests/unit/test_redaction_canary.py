"""A secret returned by a capability reaches no event, audit row or model request."""

from __future__ import annotations

from typing import Any

from fiduciary import Agent, capability, encode_event
from fiduciary.events import PendingAction
from fiduciary.stores.base import Store
from fiduciary.testing import (
    Call,
    ManualClock,
    Reply,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
    collect,
)

CANARIES = (
    "sk-live-CANARY0123456789abcdefghij",
    "CANARYPASSWORD99",
    "CANARYSIGNATURE77",
    "CANARY-session-cookie",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYW5hcnkifQ.c2lnbmF0dXJlQ0FOQVJZ",
)


@capability(kind="read")
async def fetch_account() -> dict[str, Any]:
    """Account details as a careless backend returns them."""
    return {
        "holder": "Alice",
        "api_key": CANARIES[0],
        "credentials": {"password": CANARIES[1]},
        "statement_url": f"https://alice:{CANARIES[1]}@bank.example/s.pdf?X-Amz-Signature={CANARIES[2]}",
        "headers": [f"Cookie: session={CANARIES[3]}", f"Authorization: Bearer {CANARIES[4]}"],
    }


@capability(kind="execute", tier="confirm")
async def update_profile(note: str, token: str) -> dict[str, str]:
    """Update the profile (the model passes a token it saw)."""
    return {"ok": "yes"}


async def test_secrets_reach_no_event_audit_row_or_model_request(
    store: Store, clock: ManualClock
) -> None:
    script = Script(
        "account",
        [
            ToolCalls([Call("fetch_account")]),
            ToolCalls(
                [
                    Call(
                        "update_profile",
                        lambda r: {
                            "note": r["fetch_account"]["statement_url"],
                            "token": CANARIES[0],
                        },
                    )
                ]
            ),
            Reply("done"),
        ],
    )
    model = ScriptedModel([script])
    agent = Agent(
        model=model,
        capabilities=[fetch_account, update_profile],
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    events = await collect(
        agent.run(f"show my account, my key is {CANARIES[0]}", principal="alice")
    )
    run_id = events[0].run_id
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    await agent.approve(pending.approval_id, by="alice")
    await collect(agent.resume(run_id))

    stored = "\n".join(encode_event(e) for e in await store.read_events(run_id))
    audit = "\n".join(repr(a) for a in await store.audit_records(run_id))
    requests = "\n".join(repr(r) for r in model.requests)
    assert "Alice" in stored  # the rest of the data still flows
    assert len(model.requests) == 3
    for canary in CANARIES:
        assert canary not in stored, canary
        assert canary not in audit, canary
        assert canary not in requests, canary

"""A secret returned by a capability reaches no event, audit row, model request or log line."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import fiduciary
from fiduciary import Agent, AuthorizationRequest, Redactor, capability, encode_event
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


async def test_secrets_reach_no_event_audit_row_model_request_or_log(
    store: Store, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # everything any logger writes, at every level
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
        assert canary not in caplog.text, canary


HELD = "held-secret-CANARY-4242-never-logged"  # no known shape: only known_secrets catch it
LEAK = f"upstream said: Authorization: Bearer {CANARIES[4]} password={CANARIES[1]} {HELD}"


@capability(kind="read")
async def flaky_lookup() -> dict[str, str]:
    """A read whose backend fails with its credentials in the error text."""
    raise RuntimeError(LEAK)


@capability(kind="execute", tier="auto")
async def leaky_write(note: str) -> dict[str, str]:
    """A write its authorizer chokes on."""
    return {"ok": "yes"}


async def test_secrets_in_exception_texts_reach_no_log_line(
    store: Store, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    async def authorize(request: AuthorizationRequest) -> bool:
        raise PermissionError(f"policy server rejected {request.capability.name}: {LEAK}")

    script = Script(
        "look",
        [
            ToolCalls([Call("flaky_lookup")]),
            ToolCalls([Call("leaky_write", {"note": "x"})]),
            Reply("sorry"),
        ],
    )
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[flaky_lookup, leaky_write],
        store=store,
        clock=clock,
        authorize=authorize,
        redactor=Redactor(known_secrets=[HELD]),
    )
    with caplog.at_level(logging.DEBUG, logger="fiduciary"):
        await collect(agent.run("look it up", principal="alice"))
    failures = [r for r in caplog.records if r.name.startswith("fiduciary")]
    assert {r.getMessage() for r in failures} >= {
        "handler of flaky_lookup failed",
        "authorize callback failed; denying leaky_write",
    }
    # what any handler would write: message, traceback (which names the exception) and stack
    formatter = logging.Formatter("%(levelname)s %(name)s %(message)s")
    written = "\n".join(formatter.format(r) for r in failures) + caplog.text
    assert "RuntimeError" in written
    assert "PermissionError" in written
    assert "upstream said" in written  # the rest of the text still helps whoever reads it
    for canary in (*CANARIES, HELD):
        assert canary not in written, canary
    assert all(r.exc_info is None for r in failures)  # the exception object is not handed on


def test_every_logger_of_fiduciary_redacts() -> None:
    """A module that logs takes its logger from ``fiduciary._logs.logger`` (never bare)."""
    root = Path(fiduciary.__file__).parent
    bare = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "logging.getLogger(" in path.read_text(encoding="utf-8")
    ]
    # _logs makes them; the CLI only attaches a handler to "fiduciary"
    assert sorted(bare) == ["_logs.py", "cli/app.py"]

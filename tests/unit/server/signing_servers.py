"""The agent of ``test_passkeys_two_servers``' server processes (``--agent``): payments of 50 USD
and more need two signed approvals of finance (bob and carol), alice proposes."""

from __future__ import annotations

from decimal import Decimal

from fiduciary import Agent, Policy
from fiduciary.dual_control import DualControl
from fiduciary.signed_approvals import SignatureRule
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all

from ..conftest import Effects, toy_capabilities

FINANCE = DualControl("finance", frozenset({"bob", "carol"}), required=2)


def signing_agent(store: Store) -> Agent:
    send = Script(
        "send 60", [ToolCalls([Call("send", {"to": "dave", "amount": "60"})]), Reply("Sent.")]
    )
    return Agent(
        model=ScriptedModel([send]),
        capabilities=toy_capabilities(Effects()),
        store=store,
        authorize=allow_all,
        policy=Policy(
            signatures=SignatureRule(at_or_above_usd=Decimal(50)), dual_control=[FINANCE]
        ),
    )

"""What the dual-control HTTP tests share: the finance rule (two of alice, bob and carol at $50
and above), the agent under it, carol's key and an approval's card as a member reads it."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import httpx
import pytest

from fiduciary import Agent, ManualClock, Policy
from fiduciary.demo import Billing
from fiduciary.dual_control import DualControl
from fiduciary.stores.base import Store
from fiduciary.testing import ScriptedModel, allow_all

from ..conftest import Effects, toy_capabilities
from .conftest import Keys, bearer, scripts

__all__ = ["FINANCE", "agent", "card", "carol"]

FINANCE = DualControl(
    "finance", frozenset({"alice", "bob", "carol"}), required=2, at_or_above_usd=Decimal(50)
)


@pytest.fixture
def agent(store: Store, clock: ManualClock, effects: Effects, billing: Billing) -> Agent:
    return Agent(
        model=ScriptedModel(scripts()),
        capabilities=[*billing.capabilities(), *toy_capabilities(effects)],
        store=store,
        clock=clock,
        authorize=allow_all,
        policy=Policy(dual_control=[FINANCE]),
    )


@pytest.fixture
async def carol(keys: Keys) -> str:
    key, _ = await keys.store.create("carol", ["runs:read", "approvals:decide"])
    return key


async def card(client: httpx.AsyncClient, key: str, approval_id: str) -> dict[str, Any]:
    response = await client.get(f"/approvals/{approval_id}", headers=bearer(key))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body

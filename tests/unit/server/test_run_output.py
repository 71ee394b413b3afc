"""``GET /runs/{id}`` → ``output``: a completed run's typed answer, as JSON."""

from __future__ import annotations

from decimal import Decimal

import anyio
import pytest
from pydantic import BaseModel

from fiduciary import Agent
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all

from .conftest import AppFactory, Keys, bearer, client_for, settle, start_run

pytestmark = pytest.mark.timeout(30)


class Quote(BaseModel):
    item: str
    usd: Decimal


async def test_a_typed_run_shows_its_output_and_a_failed_one_null(
    make_app: AppFactory, keys: Keys, store: Store
) -> None:
    model = ScriptedModel(
        [
            Script("quote", [ToolCalls([Call("final_result", {"item": "pen", "usd": "1.20"})])]),
            Script("chat", [Reply('{"item": "text is no quote"}')]),
        ]
    )
    agent = Agent(model=model, capabilities=[], store=store, authorize=allow_all, output_type=Quote)
    app = make_app(agent=agent)
    server = app.state.server
    async with client_for(app) as client:
        with anyio.fail_after(10):
            typed = await start_run(client, keys.alice, "a quote for a pen")
            await settle(server)
            body = (await client.get(f"/runs/{typed}", headers=bearer(keys.alice))).json()
            assert body["status"] == "completed"
            assert body["output"] == {"item": "pen", "usd": "1.20"}
            assert await agent.output(typed) == Quote(item="pen", usd=Decimal("1.20"))
            # a run that failed to answer: no output
            failed = await start_run(client, keys.alice, "just chat")
            await settle(server)
            body = (await client.get(f"/runs/{failed}", headers=bearer(keys.alice))).json()
            assert body["status"] == "failed"
            assert body["output"] is None
            listed = (await client.get("/runs", headers=bearer(keys.alice))).json()["runs"]
            # the list carries each run's output as GET /runs/{id} does
            outputs = {r["run_id"]: r["output"] for r in listed}
            assert outputs == {str(typed): {"item": "pen", "usd": "1.20"}, str(failed): None}

"""The approval flow in a FastAPI app: fiduciary's HTTP API mounted at /agent beside the
shop's own routes (the shop of shop.py).

    python examples/fastapi_app.py                   # a refund through the API, in-process
    uvicorn fastapi_app:app --app-dir examples       # serve it; the API key is printed at start

Needs the server extra and FastAPI: pip install 'fiduciary[server]' fastapi
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI, HTTPException

from fiduciary.server import DEFAULT_SCOPES, MemoryKeyStore, create_app
from shop import PRINCIPAL, Shop, build_agent

shop = Shop()
keys = MemoryKeyStore()  # SQLiteKeyStore(path) or PostgresKeyStore(dsn) to keep them
agent_api = create_app(build_agent(shop), keys=keys)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # FastAPI does not run a mounted app's lifespan: run fiduciary's (it resumes runs in the
    # background and closes their streams on shutdown) inside the shop's own
    key, _ = await keys.create(PRINCIPAL, DEFAULT_SCOPES, label="example")
    app.state.api_key = key
    print(f"API key for {PRINCIPAL!r}: {key}")
    async with agent_api.router.lifespan_context(agent_api):
        yield


app = FastAPI(title="Shop", lifespan=lifespan)
app.mount("/agent", agent_api)  # POST /agent/runs, GET /agent/approvals, ...


@app.get("/orders/{order_id}")
async def get_order(order_id: str) -> dict[str, str]:
    if order_id not in shop.orders:
        raise HTTPException(status_code=404, detail=f"there is no order {order_id}")
    order = shop.orders[order_id]
    return {"id": order.id, "status": order.status, "refunded": str(order.refunded)}


async def wait_for(client: httpx.AsyncClient, run_id: str, status: str) -> dict[str, Any]:
    """Poll the run until it reaches ``status`` (a browser follows /agent/runs/{id}/events)."""
    for _ in range(200):
        run: dict[str, Any] = (await client.get(f"/agent/runs/{run_id}")).raise_for_status().json()
        if run["status"] == status:
            return run
        await asyncio.sleep(0.05)
    raise TimeoutError(f"run {run_id} is {run['status']}, not {status}")


async def main() -> None:
    async with lifespan(app):  # uvicorn does this when it serves the app
        transport = httpx.ASGITransport(app=app)
        headers = {"authorization": f"Bearer {app.state.api_key}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://shop", headers=headers
        ) as client:
            print("before:", (await client.get("/orders/A-1002")).json())
            message = "Order A-1002 never arrived: refund it in full."
            created = await client.post("/agent/runs", json={"message": message})
            run_id = created.raise_for_status().json()["run_id"]
            await wait_for(client, run_id, "awaiting_approval")

            (card,) = (await client.get("/agent/approvals")).json()["approvals"]
            print(f"waiting for a person ({card['tier']}): {card['description']}")
            decided = await client.post(
                f"/agent/approvals/{card['approval_id']}/approve",
                json={"args_digest": card["args_digest"]},  # what the person was shown
            )
            print("approved:", decided.raise_for_status().json()["status"])

            await wait_for(client, run_id, "completed")
            print("after:", (await client.get("/orders/A-1002")).json())


if __name__ == "__main__":
    asyncio.run(main())

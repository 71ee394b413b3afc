"""A local x402-protected API for the chain tests, built of the x402 package's own parts.

A FastAPI app serves ``GET /forecast`` behind x402's payment middleware: an
``x402ResourceServer`` with the EVM ``exact`` server scheme asks for ``price_units`` of the
dev stablecoin (its EIP-712 domain in ``extra``) to ``pay_to`` on ``eip155:31337``. Its
facilitator is x402's ``x402Facilitator`` with the EVM ``exact`` facilitator scheme and a
``FacilitatorWeb3Signer`` over an account of its own on anvil: it verifies each payment
(signature, amount, payee, a simulation) and settles it on chain, paying the gas. uvicorn
serves the app on a free port in a thread for the length of a test.

Switches a test turns: ``price_units`` and ``pay_to`` (read at each request),
``lose_answers`` (this many paid answers are replaced by a 402 after they settled: the answer
lost on the way back), and ``hold`` (set: the next paid request waits in its handler,
verified and not yet settled, until ``release``; the buyer can be killed there;
``fail_held``: it then fails, unsettled).
"""

from __future__ import annotations

import secrets
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from eth_account import Account
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from x402 import x402Facilitator, x402ResourceServer
from x402.http import PaymentOption, RouteConfig
from x402.http.middleware.fastapi import payment_middleware
from x402.mechanisms.evm import FacilitatorWeb3Signer
from x402.mechanisms.evm.exact import register_exact_evm_facilitator, register_exact_evm_server
from x402.schemas import AssetAmount

from tests.waiting import wait_for

from .anvil import rpc
from .conftest import FUNDING_WEI

TOKEN_NAME = "USD Coin (dev)"  # deploy() names the stablecoin so; its EIP-712 version is "2"
NETWORK = "eip155:31337"


@dataclass
class PaidApi:
    """The API's side: what it asks, and what it saw."""

    token: str
    pay_to: str
    price_units: int = 2_000_000  # 2 USDC
    lose_answers: int = 0
    hold: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    fail_held: bool = False  # a held request, released, fails (500): x402 does not settle it
    url: str = ""
    payments_seen: int = 0  # requests that carried a payment the facilitator verified
    served: int = 0  # paid answers the handler gave

    def price(self, context: Any) -> AssetAmount:
        return AssetAmount(
            amount=str(self.price_units),
            asset=self.token,
            extra={"name": TOKEN_NAME, "version": "2"},
        )


def _app(api: PaidApi, facilitator: x402Facilitator) -> FastAPI:
    server = x402ResourceServer(facilitator)
    register_exact_evm_server(server, NETWORK)
    route = RouteConfig(
        accepts=PaymentOption(
            scheme="exact",
            pay_to=lambda context: api.pay_to,
            price=api.price,
            network=NETWORK,
            max_timeout_seconds=300,
        ),
        description="today's forecast",
    )
    paid = payment_middleware({"GET /forecast": route}, server)
    app = FastAPI()

    @app.get("/forecast")
    async def forecast() -> Response:
        api.payments_seen += 1
        if api.hold.is_set():  # the buyer is killed while it waits for this answer
            api.hold.clear()
            await anyio.to_thread.run_sync(api.release.wait)
            if api.fail_held:
                return JSONResponse({"error": "the forecast failed"}, status_code=500)
        api.served += 1
        return JSONResponse({"forecast": "sunny"})

    @app.middleware("http")
    async def x402(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Any:
        return await paid(request, call_next)

    @app.middleware("http")  # outside x402's: it sees the settled answer
    async def lossy(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Any:
        response = await call_next(request)
        if response.status_code == 200 and api.lose_answers > 0:
            api.lose_answers -= 1
            return JSONResponse({"error": "payment required"}, status_code=402)
        return response

    return app


@contextmanager
def serving(anvil_url: str, token: str) -> Iterator[PaidApi]:
    """The API on a free port, its facilitator funded with 10 ETH on anvil for the gas."""
    key = secrets.token_bytes(32)
    rpc(anvil_url, "anvil_setBalance", Account.from_key(key).address, hex(FUNDING_WEI))
    facilitator = x402Facilitator()
    register_exact_evm_facilitator(
        facilitator, FacilitatorWeb3Signer("0x" + key.hex(), anvil_url), NETWORK
    )
    api = PaidApi(token=token, pay_to=str(Account.from_key(secrets.token_bytes(32)).address))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    api.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(_app(api, facilitator), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, what="the x402 API to start")
        yield api
    finally:
        api.release.set()
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()

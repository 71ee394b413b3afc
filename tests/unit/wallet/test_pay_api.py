"""Paying for an API over x402: a local HTTP server answers 402 with x402 payment requirements
and serves the resource for a proof it checks in the wallet's file; the agent's payment is a
gated write with its amount and payee on the card, and a replayed 402 never pays twice."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from x402.http.constants import (
    PAYMENT_REQUIRED_HEADER,
    PAYMENT_RESPONSE_HEADER,
    PAYMENT_SIGNATURE_HEADER,
)
from x402.http.utils import (
    decode_payment_signature_header,
    encode_payment_required_header,
    safe_base64_encode,
)
from x402.schemas import PaymentPayload, PaymentRequired, PaymentRequirements, ResourceInfo

from fiduciary import ManualClock, Policy, SQLiteStore
from fiduciary.agent import Agent
from fiduciary.events import PendingAction, ToolCallEnd
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, collect
from fiduciary.wallet import PaperWallet
from fiduciary.wallet.demo import own_wallet_only
from fiduciary.wallet.machine_payments import PAPER_NETWORK, pay_api_capabilities

from .conftest import available, tx_count

MERCHANT = "0x" + "4e" * 20


@dataclass
class Merchant:
    """The API's side: its price, and the proofs it accepted."""

    wallet_path: Path
    price_units: int = 10_000_000  # 10 USDC
    served: list[str] = field(default_factory=list)  # the transactions it served a request for
    url: str = ""

    def requirements(self, resource: str) -> PaymentRequired:
        return PaymentRequired(
            resource=ResourceInfo(url=resource, description="today's forecast"),
            accepts=[
                PaymentRequirements(
                    scheme="exact",
                    network=PAPER_NETWORK,
                    asset="USDC",
                    amount=str(self.price_units),
                    pay_to=MERCHANT,
                    max_timeout_seconds=60,
                )
            ],
        )

    def verify(self, proof: PaymentPayload) -> bool:
        """The proof names a wallet transaction that paid this merchant the price."""
        digest = str(proof.payload.get("transaction", ""))
        with PaperWallet(self.wallet_path) as books:  # its own connection to the file
            found = books.ledger.read().by_digest(digest) if len(digest) >= 6 else []
        if len(found) != 1:
            return False
        paid = sum(
            (leg.amount for leg in found[0].legs_of(f"@addr:{MERCHANT}") if leg.asset == "USDC"),
            Decimal(0),
        )
        return paid * 10**6 == self.price_units and proof.accepted.pay_to == MERCHANT


def serve(merchant: Merchant) -> Iterator[Merchant]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            resource = merchant.url + self.path
            header = self.headers.get(PAYMENT_SIGNATURE_HEADER)
            proof = None if header is None else decode_payment_signature_header(header)
            if not isinstance(proof, PaymentPayload) or not merchant.verify(proof):
                body = b'{"error": "payment required"}'
                self.send_response(402)
                self.send_header(
                    PAYMENT_REQUIRED_HEADER,
                    encode_payment_required_header(merchant.requirements(resource)),
                )
            else:
                digest = str(proof.payload["transaction"])
                merchant.served.append(digest)
                body = json.dumps({"forecast": "sunny"}).encode()
                self.send_response(200)
                settled = {"success": True, "transaction": digest, "network": PAPER_NETWORK}
                self.send_header(PAYMENT_RESPONSE_HEADER, safe_base64_encode(json.dumps(settled)))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    merchant.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield merchant
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def wallet_file(tmp_path: Path, clock: ManualClock) -> Iterator[PaperWallet]:
    with PaperWallet(tmp_path / "wallet.sqlite3", clock=clock) as opened:
        opened.open("ann")
        yield opened


@pytest.fixture
def merchant(wallet_file: PaperWallet) -> Iterator[Merchant]:
    yield from serve(Merchant(Path(wallet_file.path)))


def agent_for(wallet: PaperWallet, store: SQLiteStore, *steps: Any) -> Agent:
    return Agent(
        model=ScriptedModel([Script("go", [*steps, Reply("done")])]),
        capabilities=pay_api_capabilities(wallet),
        store=store,
        policy=Policy(preset="balanced"),
        authorize=own_wallet_only,
        clock=wallet.clock,
    )


def pay_call(merchant: Merchant, amount: str = "10") -> Call:
    return Call(
        "pay_api",
        {"url": merchant.url + "/forecast", "asset": "USDC", "amount": amount, "pay_to": MERCHANT},
    )


def output_of(end: ToolCallEnd) -> Any:
    """The capability's JSON result (a guard's hint may follow it)."""
    return json.JSONDecoder().raw_decode(end.output)[0]


async def approved_end(agent: Agent, events: list[Any]) -> tuple[PendingAction, ToolCallEnd]:
    pending = next(e for e in events if isinstance(e, PendingAction))
    await agent.approve(pending.approval_id, by="ann")
    resumed = await collect(agent.resume(events[0].run_id))
    return pending, next(e for e in resumed if isinstance(e, ToolCallEnd) and e.name == "pay_api")


async def test_the_agent_prices_pays_on_the_card_and_gets_the_answer(
    wallet_file: PaperWallet, merchant: Merchant, tmp_path: Path
) -> None:
    before = available(wallet_file, "ann", "USDC")
    agent = agent_for(
        wallet_file,
        SQLiteStore(tmp_path / "runs.sqlite3"),
        ToolCalls([Call("api_price", {"url": merchant.url + "/forecast"})]),
        ToolCalls([pay_call(merchant)]),
    )
    events = await collect(agent.run("go", principal="ann"))
    price = next(e for e in events if isinstance(e, ToolCallEnd) and e.name == "api_price")
    (offer,) = json.loads(price.output)["accepts"]
    assert (offer["amount"], offer["asset"], offer["pay_to"]) == ("10.000000", "USDC", MERCHANT)
    assert merchant.served == []

    pending, end = await approved_end(agent, events)
    assert pending.tier == "confirm"
    assert "10 USDC" in pending.description
    assert MERCHANT in pending.description
    assert pending.amount_usd == Decimal("10.00")
    assert not end.is_error, end.output
    answer = output_of(end)
    assert answer["status"] == 200
    assert json.loads(answer["body"]) == {"forecast": "sunny"}
    assert answer["settlement"]["transaction"] == answer["paid"]["digest"]
    assert merchant.served == [answer["paid"]["digest"]]
    assert available(wallet_file, "ann", "USDC") == before - 10


async def test_a_replayed_402_for_the_same_request_never_pays_twice(
    wallet_file: PaperWallet, merchant: Merchant, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    before = available(wallet_file, "ann", "USDC")
    digests = []
    for _ in range(2):  # two calls, two approvals, two idempotency keys: one request
        agent = agent_for(wallet_file, store, ToolCalls([pay_call(merchant)]))
        _, end = await approved_end(agent, await collect(agent.run("go", principal="ann")))
        assert not end.is_error, end.output
        answer = output_of(end)
        assert answer["status"] == 200
        digests.append(answer["paid"]["digest"])
        posted = tx_count(wallet_file)
    assert digests[0] == digests[1]
    assert output_of(end)["paid"]["replayed"] is True
    assert available(wallet_file, "ann", "USDC") == before - 10
    assert tx_count(wallet_file) == posted
    assert merchant.served == digests  # the same proof, served twice


async def test_a_price_other_than_the_approved_one_pays_nothing(
    wallet_file: PaperWallet, merchant: Merchant, tmp_path: Path
) -> None:
    merchant.price_units = 12_000_000  # it asks 12 now; the card said 10
    before = tx_count(wallet_file)
    agent = agent_for(
        wallet_file, SQLiteStore(tmp_path / "runs.sqlite3"), ToolCalls([pay_call(merchant)])
    )
    _, end = await approved_end(agent, await collect(agent.run("go", principal="ann")))
    assert (end.is_error, end.error_code) == (True, "price_changed")
    assert tx_count(wallet_file) == before
    assert merchant.served == []

"""Paying for an API: the HTTP 402 flow of x402 (https://x402.org), paid from the paper wallet.

``pay_api_capabilities(wallet)`` declares two capabilities:

- ``api_price`` (a preview) requests a URL and, if it answers ``402 Payment Required``, reports
  what it asks (the x402 ``PAYMENT-REQUIRED`` header, or the body of an x402 v1 answer).
- ``pay_api`` (a write, ``operation="pay"``) carries the amount, the asset and the payee on its
  card. Its handler requests the URL again; if the 402 asks exactly what was approved it pays
  the payee from the paper wallet and retries the request with the proof in the
  ``PAYMENT-SIGNATURE`` header; anything else is refused (``price_changed``) and pays nothing.

The paper wallet pays requirements of the scheme ``exact`` on the network ``fiduciary:paper``
(``asset`` a symbol, ``amount`` in the asset's smallest units). The ledger key of the payment is
derived from the request (principal, method, URL, the requirement), not from the call: a 402
replayed for the same request, by a retried call or a second one, finds the payment it made and
sends the same proof again; it never pays twice. The proof's ``payload`` names the wallet
transaction (``transaction``: its digest) and the payer's address (``payer``).

Needs the ``payments`` extra (``pip install 'fiduciary[payments]'``: x402 and httpx).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field

from ..capabilities import CallContext, Capability, capability
from .addresses import plain_recipient
from .assets import get_asset
from .capabilities import Amount, AssetName
from .errors import WalletError
from .operations import Send
from .views import Receipt
from .wallet import PaperWallet

if TYPE_CHECKING:
    import httpx
    from x402.schemas import PaymentRequired, PaymentRequirements

__all__ = ["PAPER_NETWORK", "ApiAnswer", "ApiPrice", "pay_api_capabilities", "request_key"]

PAPER_NETWORK = "fiduciary:paper"
BODY_CHARS = 4_000
Method = Literal["GET", "POST"]
Url = Annotated[str, Field(pattern=r"^https?://", max_length=2_000, description="The API's URL.")]


class ApiPrice(BaseModel):
    """What a URL asks to be paid (empty ``accepts``: it asked nothing)."""

    url: str
    status: int
    accepts: list[dict[str, Any]] = Field(
        description="each way to pay: scheme, network, asset, amount (in the asset, as a "
        "decimal), pay_to; the paper wallet pays the network fiduciary:paper"
    )


class ApiAnswer(BaseModel):
    """The API's answer after paying (or without paying, if it asked nothing)."""

    status: int
    body: str
    paid: Receipt | None = None
    settlement: dict[str, Any] | None = None  # the PAYMENT-RESPONSE header, decoded


def request_key(principal: str, method: str, url: str, requirement: dict[str, Any]) -> str:
    """The ledger key of paying for one request: the same request and price, the same key."""
    body = json.dumps([principal, method.upper(), url, requirement], sort_keys=True)
    return "x402:" + hashlib.sha256(body.encode()).hexdigest()


def _payment_required(response: httpx.Response) -> PaymentRequired | None:
    from x402.http.constants import PAYMENT_REQUIRED_HEADER
    from x402.http.utils import decode_payment_required_header
    from x402.schemas import PaymentRequired

    if response.status_code != 402:
        return None
    header = response.headers.get(PAYMENT_REQUIRED_HEADER)
    try:
        decoded = (
            decode_payment_required_header(header)
            if header
            else PaymentRequired.model_validate_json(response.content)
        )
    except ValueError as exc:
        raise WalletError("bad_payment_request", f"the 402 answer is not x402: {exc}") from exc
    if not isinstance(decoded, PaymentRequired):
        raise WalletError("bad_payment_request", "only x402 version 2 answers are paid")
    return decoded


def _offer(req: PaymentRequirements) -> dict[str, Any]:
    offer: dict[str, Any] = {
        "scheme": req.scheme,
        "network": req.network,
        "asset": req.asset,
        "pay_to": req.pay_to,
        "amount_units": req.amount,
    }
    if req.network == PAPER_NETWORK:
        with contextlib.suppress(WalletError, ValueError):
            offer["amount"] = str(get_asset(req.asset).from_units(int(req.amount)))
    return offer


def pay_api_capabilities(
    wallet: PaperWallet, *, client: Callable[[], httpx.AsyncClient] | None = None
) -> list[Capability]:
    """``api_price`` and ``pay_api`` over ``wallet`` (``client`` makes the HTTP client)."""

    def open_client() -> httpx.AsyncClient:
        import httpx

        return client() if client is not None else httpx.AsyncClient(timeout=30)

    def usd(a: Any, ctx: CallContext) -> Decimal | None:
        try:
            return wallet.usd_value(get_asset(a.asset).symbol, a.amount)
        except WalletError:
            return None

    @capability(kind="preview")
    async def api_price(ctx: CallContext, url: Url, method: Method = "GET") -> ApiPrice:
        """Ask an API what it charges: request the URL and report the ways to pay a 402
        answer asks for (amount, asset, payee). Pays nothing; pass one to pay_api."""
        async with open_client() as http:
            response = await http.request(method, url)
        required = _payment_required(response)
        accepts = [] if required is None else [_offer(r) for r in required.accepts]
        return ApiPrice(url=url, status=response.status_code, accepts=accepts)

    @capability(
        kind="execute",
        risk="high",
        operation="pay",
        amount_usd=usd,
        flags={"mutating", "requires_balance", "irreversible"},
        describe=lambda a: (
            f"Pay {a.amount} {a.asset.upper()} to {a.pay_to} for {a.method} {a.url} (x402)"
        ),
    )
    async def pay_api(
        ctx: CallContext,
        url: Url,
        asset: AssetName,
        amount: Amount,
        pay_to: Annotated[
            str, AfterValidator(plain_recipient), Field(description="The payee api_price named.")
        ],
        method: Method = "GET",
    ) -> ApiAnswer:
        """Pay an API that answers HTTP 402 (x402) and return its answer: the amount, asset and
        payee must be what api_price reported; if the API now asks otherwise nothing is paid."""
        from x402.http.constants import PAYMENT_RESPONSE_HEADER, PAYMENT_SIGNATURE_HEADER
        from x402.http.utils import encode_payment_signature_header
        from x402.schemas import PaymentPayload

        principal = ctx.principal.actor_id
        symbol = get_asset(asset).symbol
        units = str(get_asset(symbol).units(amount))
        async with open_client() as http:
            first = await http.request(method, url)
            required = _payment_required(first)
            if required is None:
                return ApiAnswer(status=first.status_code, body=first.text[:BODY_CHARS])
            chosen = next(
                (
                    r
                    for r in required.accepts
                    if (r.scheme, r.network) == ("exact", PAPER_NETWORK)
                    and r.asset.upper() == symbol
                    and r.amount == units
                    and r.pay_to.lower() == pay_to.lower()
                ),
                None,
            )
            if chosen is None:
                asked = "; ".join(json.dumps(_offer(r)) for r in required.accepts)
                raise WalletError(
                    "price_changed",
                    f"{url} no longer asks {amount} {symbol} to {pay_to} (it asks: {asked}); "
                    "nothing was paid",
                )
            key = request_key(principal, method, url, chosen.model_dump(mode="json"))
            memo = f"x402 {method} {url}"[:140]
            receipt = wallet.execute(
                principal, Send(pay_to, symbol, amount, memo), key=key, at=ctx.clock.now()
            )
            proof = PaymentPayload(
                payload={"transaction": receipt.digest, "payer": wallet.address_of(principal)},
                accepted=chosen,
                resource=required.resource,
            )
            answer = await http.request(
                method,
                url,
                headers={PAYMENT_SIGNATURE_HEADER: encode_payment_signature_header(proof)},
            )
        settlement = None
        header = answer.headers.get(PAYMENT_RESPONSE_HEADER)
        if header:
            from x402.http.utils import safe_base64_decode

            try:
                settlement = json.loads(safe_base64_decode(header))
            except ValueError:
                settlement = None
        return ApiAnswer(
            status=answer.status_code,
            body=answer.text[:BODY_CHARS],
            paid=receipt,
            settlement=settlement,
        )

    return [api_price, pay_api]

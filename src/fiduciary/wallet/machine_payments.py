"""Paying for an API: the HTTP 402 flow of x402 (https://x402.org), from any wallet that can pay.

``pay_api_capabilities(payer)`` declares two capabilities:

- ``api_price`` (a preview) requests a URL and, if it answers ``402 Payment Required``, reports
  what it asks (the x402 ``PAYMENT-REQUIRED`` header, or the body of an x402 v1 answer).
- ``pay_api`` (a write, ``operation="pay"``) carries the amount, the asset and the payee on its
  card, and binds the network and the asset's contract (hidden arguments the payer fills, so
  they are in the digest the person approves). Its handler requests the URL again; if the 402
  asks exactly what was approved, the payer pays and the request is retried with the proof in
  the ``PAYMENT-SIGNATURE`` header; anything else is refused (``price_changed``), nothing paid.

A payer is one small protocol, ``ApiPayer``: the network it pays on, which requirements it can
pay, and ``pay``. Two exist: ``PaperPayer`` (this module: the paper wallet, the scheme
``exact`` on the network ``fiduciary:paper``, ``asset`` a symbol, the proof names the wallet
transaction) and ``fiduciary.chain.api_payments.ChainApiPayer`` (the chain wallet, x402's EVM
``exact`` scheme: an EIP-3009 authorization signed by the wallet's key, settled on chain by the
API's facilitator). A ``PaperWallet`` given as the payer is wrapped in a ``PaperPayer``.

The ledger key of a payment is derived from the request (principal, method, URL, the
requirement), not from the call: a 402 replayed for the same request, by a retried call, a
resumed one or a second one, never pays twice. The paper wallet finds the payment it posted
under that key and sends the same proof again; the chain payer derives the EIP-3009 nonce from
the key, so every authorization it could sign for one request shares one nonce, which the token
settles at most once; when the chain says that nonce is used it signs nothing and reports the
transaction that settled it.

Needs the ``payments`` extra (``pip install 'fiduciary[payments]'``: x402 and httpx).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from ..capabilities import CallContext, Capability, capability
from ..exceptions import CapabilityError
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

__all__ = [
    "PAPER_NETWORK",
    "ApiAnswer",
    "ApiPayer",
    "ApiPrice",
    "Authorization",
    "PaperPayer",
    "Payment",
    "pay_api_capabilities",
    "request_key",
]

PAPER_NETWORK = "fiduciary:paper"
BODY_CHARS = 4_000
Method = Literal["GET", "POST"]
Url = Annotated[str, Field(pattern=r"^https?://", max_length=2_000, description="The API's URL.")]
Bound = SkipJsonSchema[Annotated[str, Field(description="Filled by the payer.")]]


class ApiPrice(BaseModel):
    """What a URL asks to be paid (empty ``accepts``: it asked nothing)."""

    url: str
    status: int
    accepts: list[dict[str, Any]] = Field(
        description="each way to pay: scheme, network, asset, amount_units, pay_to; amount (in "
        "the asset, as a decimal) and symbol for the ways this wallet can pay"
    )


class Authorization(BaseModel):
    """An x402 EVM ``exact`` payment: an EIP-3009 authorization the payer signed."""

    network: str
    asset: str  # the token's address
    symbol: str
    amount: Decimal
    payer: str
    pay_to: str
    nonce: str  # the EIP-3009 nonce, derived from the payment's ledger key
    valid_before: int | None = None  # a unix time (the chain's)
    # the nonce was already used on chain: nothing was signed, the payment was made before
    replayed: bool = False
    transaction: str | None = None  # the transaction that settled it, when known


class ApiAnswer(BaseModel):
    """The API's answer after paying (or without paying, if it asked nothing)."""

    status: int
    body: str
    paid: Receipt | Authorization | None = None
    settlement: dict[str, Any] | None = None  # the PAYMENT-RESPONSE header, decoded
    note: str | None = None  # what the status alone would not say


@dataclass(frozen=True, slots=True)
class Payment:
    """What a payer did: the x402 ``payload`` to send (None: the request was paid before and
    there is nothing new to send) and its record."""

    payload: dict[str, Any] | None
    paid: Receipt | Authorization


class ApiPayer(Protocol):
    """A wallet that pays x402 requirements of the scheme ``exact`` on one network."""

    @property
    def network(self) -> str:
        """The x402 network it pays on (``fiduciary:paper``, ``eip155:31337``)."""
        ...

    @property
    def contract(self) -> str:
        """The address of the asset it pays in, bound into approvals ("" when none)."""
        ...

    def symbol(self, asset: str) -> str:
        """The symbol of an asset a call names; refused (``unknown_asset``) if not paid."""
        ...

    def pays(self, requirement: PaymentRequirements, symbol: str) -> bool:
        """Whether ``requirement`` (on this payer's network) asks for ``symbol``."""
        ...

    def units(self, symbol: str, amount: Decimal) -> int:
        """``amount`` in the asset's smallest units (refused if it has more decimals)."""
        ...

    def amount_of(self, requirement: PaymentRequirements) -> tuple[str, Decimal] | None:
        """The symbol and the amount a requirement asks, if this payer pays it."""
        ...

    def usd_value(self, symbol: str, amount: Decimal) -> Decimal | None: ...

    async def pay(
        self, principal: str, key: str, requirement: PaymentRequirements, *, memo: str, at: datetime
    ) -> Payment:
        """Pay ``requirement`` once per ``key`` (the request's ledger key)."""
        ...


class PaperPayer:
    """The paper wallet as an ``ApiPayer``: a ``Send`` posted under the request's key."""

    network = PAPER_NETWORK
    contract = ""

    def __init__(self, wallet: PaperWallet) -> None:
        self.wallet = wallet

    def symbol(self, asset: str) -> str:
        return get_asset(asset).symbol

    def pays(self, requirement: PaymentRequirements, symbol: str) -> bool:
        return requirement.asset.upper() == symbol

    def units(self, symbol: str, amount: Decimal) -> int:
        return get_asset(symbol).units(amount)

    def amount_of(self, requirement: PaymentRequirements) -> tuple[str, Decimal] | None:
        with contextlib.suppress(WalletError, ValueError):
            asset = get_asset(requirement.asset)
            return asset.symbol, asset.from_units(int(requirement.amount))
        return None

    def usd_value(self, symbol: str, amount: Decimal) -> Decimal | None:
        try:
            return self.wallet.usd_value(symbol, amount)
        except WalletError:
            return None

    async def pay(
        self, principal: str, key: str, requirement: PaymentRequirements, *, memo: str, at: datetime
    ) -> Payment:
        asset = get_asset(requirement.asset)
        amount = asset.from_units(int(requirement.amount))
        send = Send(requirement.pay_to, asset.symbol, amount, memo)
        receipt = self.wallet.execute(principal, send, key=key, at=at)
        payer = self.wallet.address_of(principal)
        return Payment({"transaction": receipt.digest, "payer": payer}, receipt)


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


def _offer(req: PaymentRequirements, payer: ApiPayer) -> dict[str, Any]:
    offer: dict[str, Any] = {
        "scheme": req.scheme,
        "network": req.network,
        "asset": req.asset,
        "pay_to": req.pay_to,
        "amount_units": req.amount,
    }
    priced = payer.amount_of(req) if (req.scheme, req.network) == ("exact", payer.network) else None
    if priced is not None:
        offer["symbol"], amount = priced
        offer["amount"] = str(amount)
    return offer


def _settlement(answer: httpx.Response) -> dict[str, Any] | None:
    from x402.http.constants import PAYMENT_RESPONSE_HEADER
    from x402.http.utils import safe_base64_decode

    header = answer.headers.get(PAYMENT_RESPONSE_HEADER)
    if not header:
        return None
    try:
        decoded = json.loads(safe_base64_decode(header))
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None


def _chosen(
    required: PaymentRequired, payer: ApiPayer, symbol: str, units: int, pay_to: str
) -> PaymentRequirements | None:
    for r in required.accepts:
        if (
            (r.scheme, r.network) == ("exact", payer.network)
            and payer.pays(r, symbol)
            and r.amount == str(units)
            and r.pay_to.lower() == pay_to.lower()
        ):
            return r
    return None


def _card(a: Any) -> str:
    """What the person approves: the amount, the asset, the payee, the request, and off the
    paper wallet the network and the token."""
    where = "" if a.network == PAPER_NETWORK else f" on {a.network}, token {a.contract}"
    return f"Pay {a.amount} {a.asset.upper()} to {a.pay_to} for {a.method} {a.url} (x402{where})"


def _paid_before(paid: Receipt | Authorization, url: str) -> str:
    settled = getattr(paid, "transaction", None) or "a transaction not found in the logs read"
    return (
        f"{url} was already paid for this request (settled by {settled}) and asks again: "
        "nothing more was signed or paid. Tell the person; do not pay it again."
    )


def _check_bound(payer: ApiPayer, network: str, contract: str) -> None:
    if network != payer.network or contract.lower() != payer.contract.lower():
        raise WalletError(
            "not_this_chain",
            f"this payment was approved for {network} {contract}, not {payer.network} "
            f"{payer.contract}: nothing was paid. Ask the person again.",
        )


def pay_api_capabilities(
    payer: ApiPayer | PaperWallet, *, client: Callable[[], httpx.AsyncClient] | None = None
) -> list[Capability]:
    """``api_price`` and ``pay_api`` paid by ``payer`` (a ``PaperWallet`` is paid from as a
    ``PaperPayer``); ``client`` makes the HTTP client."""
    pays: ApiPayer = PaperPayer(payer) if isinstance(payer, PaperWallet) else payer

    def open_client() -> httpx.AsyncClient:
        import httpx

        return client() if client is not None else httpx.AsyncClient(timeout=30)

    def usd(a: Any, ctx: CallContext) -> Decimal | None:
        try:
            return pays.usd_value(pays.symbol(a.asset), a.amount)
        except CapabilityError:  # an asset the payer does not pay: the handler refuses it
            return None

    @capability(kind="preview")
    async def api_price(ctx: CallContext, url: Url, method: Method = "GET") -> ApiPrice:
        """Ask an API what it charges: request the URL and report the ways to pay a 402
        answer asks for (amount, asset, payee). Pays nothing; pass one to pay_api."""
        async with open_client() as http:
            response = await http.request(method, url)
        required = _payment_required(response)
        accepts = [] if required is None else [_offer(r, pays) for r in required.accepts]
        return ApiPrice(url=url, status=response.status_code, accepts=accepts)

    @capability(
        kind="execute",
        risk="high",
        replay="resume",
        operation="pay",
        amount_usd=usd,
        flags={"mutating", "requires_balance", "irreversible"},
        describe=_card,
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
        network: Bound = pays.network,
        contract: Bound = pays.contract,
    ) -> ApiAnswer:
        """Pay an API that answers HTTP 402 (x402) and return its answer: the amount, asset and
        payee must be what api_price reported; if the API now asks otherwise nothing is paid."""
        from x402.http.constants import PAYMENT_SIGNATURE_HEADER
        from x402.http.utils import encode_payment_signature_header
        from x402.schemas import PaymentPayload

        _check_bound(pays, network, contract)
        symbol = pays.symbol(asset)
        units = pays.units(symbol, amount)
        async with open_client() as http:
            first = await http.request(method, url)
            required = _payment_required(first)
            if required is None:
                return ApiAnswer(status=first.status_code, body=first.text[:BODY_CHARS])
            chosen = _chosen(required, pays, symbol, units, pay_to)
            if chosen is None:
                asked = "; ".join(json.dumps(_offer(r, pays)) for r in required.accepts)
                raise WalletError(
                    "price_changed",
                    f"{url} no longer asks {amount} {symbol} to {pay_to} on {pays.network} "
                    f"(it asks: {asked}); nothing was paid",
                )
            key = request_key(ctx.principal.actor_id, method, url, chosen.model_dump(mode="json"))
            memo = f"x402 {method} {url}"[:140]
            payment = await pays.pay(
                ctx.principal.actor_id, key, chosen, memo=memo, at=ctx.clock.now()
            )
            if payment.payload is None:  # paid before: the API asks again, nothing new is sent
                return ApiAnswer(
                    status=first.status_code,
                    body=first.text[:BODY_CHARS],
                    paid=payment.paid,
                    note=_paid_before(payment.paid, url),
                )
            proof = PaymentPayload(
                payload=payment.payload, accepted=chosen, resource=required.resource
            )
            answer = await http.request(
                method,
                url,
                headers={PAYMENT_SIGNATURE_HEADER: encode_payment_signature_header(proof)},
            )
        return ApiAnswer(
            status=answer.status_code,
            body=answer.text[:BODY_CHARS],
            paid=payment.paid,
            settlement=_settlement(answer),
        )

    return [api_price, pay_api]

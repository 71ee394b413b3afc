"""Paying for an API from the chain wallet: x402's EVM ``exact`` scheme (EIP-3009).

``ChainApiPayer(wallet)`` is an ``ApiPayer`` (``fiduciary.wallet.machine_payments``) for the
requirements of the scheme ``exact`` on the wallet's chain (``eip155:<chain id>``) in its
stablecoin (the requirement's ``asset`` is the token's address, its ``extra`` the token's
EIP-712 ``name`` and ``version``). Paying signs an EIP-3009 ``TransferWithAuthorization`` with
the wallet's key: x402's EIP-712 typed data (``build_typed_data_for_signing``) signed by the
wallet's ``Signer`` (x402's ``ClientEvmSigner`` protocol, the key never leaves it), wrapped as
x402's ``ExactEIP3009Payload``. The API's facilitator submits it and pays the gas; this wallet
sends no transaction.

At most once: x402's client scheme draws a random nonce for each signature; this payer derives
it from the payment's ledger key (the request: principal, method, URL, requirement), so every
authorization it could sign for one request carries one nonce, and the token settles a nonce
once (``authorizationState``): a replayed 402, a retried or resumed call (after a SIGKILL
between the signature and the answer) can never move the money twice. Before signing it asks
the chain: a nonce already used means the request was paid; nothing is signed and the answer
names the transaction that settled it (its ``AuthorizationUsed`` log). The validity window is
the chain's: from the latest block's time to that plus the requirement's
``maxTimeoutSeconds`` (at most an hour).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from web3.exceptions import Web3Exception

from ..wallet.machine_payments import Authorization, Payment
from .addresses import checked_recipient
from .errors import ChainError
from .wallet import ChainWallet, _amount, _units

if TYPE_CHECKING:
    from x402.schemas import PaymentRequirements

__all__ = ["ChainApiPayer", "authorization_nonce"]

AUTHORIZATION_USED = "0x" + keccak(text="AuthorizationUsed(address,bytes32)").hex()
# seconds an authorization is valid: the API's maxTimeoutSeconds, at most an hour (an API that
# never settles cannot hold a signed payment open for longer)
MAX_VALIDITY = 3600


def authorization_nonce(key: str) -> str:
    """The EIP-3009 nonce of the payment whose ledger key is ``key`` (32 bytes, 0x-hex)."""
    return "0x" + hashlib.sha256(b"fiduciary x402 eip-3009 nonce\0" + key.encode()).hexdigest()


class ChainApiPayer:
    """The chain wallet as an ``ApiPayer``: EIP-3009 authorizations in its stablecoin."""

    def __init__(self, wallet: ChainWallet) -> None:
        self.wallet = wallet
        self.network = f"eip155:{wallet.config.chain_id}"
        self.contract = to_checksum_address(wallet.config.token)

    def symbol(self, asset: str) -> str:
        symbol = self.wallet.config.token_symbol.upper()
        if asset.upper() != symbol:
            raise ChainError(
                "unknown_asset", f"APIs are paid in {symbol} on {self.network}, not in {asset}"
            )
        return symbol

    def pays(self, requirement: PaymentRequirements, symbol: str) -> bool:
        extra = requirement.extra or {}
        return (
            symbol == self.wallet.config.token_symbol.upper()
            and requirement.asset.lower() == self.contract.lower()
            and extra.get("assetTransferMethod", "eip3009") == "eip3009"
        )

    def units(self, symbol: str, amount: Decimal) -> int:
        return _units(amount, self.wallet.config.token_decimals, symbol)

    def amount_of(self, requirement: PaymentRequirements) -> tuple[str, Decimal] | None:
        symbol = self.wallet.config.token_symbol.upper()
        if not self.pays(requirement, symbol) or not requirement.amount.isdigit():
            return None
        return symbol, _amount(int(requirement.amount), self.wallet.config.token_decimals)

    def usd_value(self, symbol: str, amount: Decimal) -> Decimal | None:
        return self.wallet.usd_value(symbol, amount)

    async def pay(
        self, principal: str, key: str, requirement: PaymentRequirements, *, memo: str, at: datetime
    ) -> Payment:
        from x402.mechanisms.evm.eip712 import build_typed_data_for_signing
        from x402.mechanisms.evm.types import ExactEIP3009Authorization, ExactEIP3009Payload

        extra = requirement.extra or {}
        name, version = extra.get("name"), extra.get("version")
        if not isinstance(name, str) or not isinstance(version, str):
            raise ChainError(
                "bad_payment_request",
                "the API's requirement names no EIP-712 domain (extra.name and extra.version)",
            )
        cfg = self.wallet.config
        # never the zero address nor the token itself (funds lost), as a send is checked
        pay_to = checked_recipient(
            requirement.pay_to, token=cfg.token, token_symbol=cfg.token_symbol
        )
        nonce = authorization_nonce(key)
        me = to_checksum_address(self.wallet.address)
        paid = Authorization(
            network=self.network,
            asset=self.contract,
            symbol=self.wallet.config.token_symbol.upper(),
            amount=_amount(int(requirement.amount), self.wallet.config.token_decimals),
            payer=me,
            pay_to=pay_to,
            nonce=nonce,
        )
        used = await self.wallet.token.functions.authorizationState(me, nonce).call()
        if used:
            settled = await self._settled_by(me, nonce)
            return Payment(None, paid.model_copy(update={"replayed": True, "transaction": settled}))
        now = int((await self.wallet.w3.eth.get_block("latest"))["timestamp"])
        authorization = ExactEIP3009Authorization(
            from_address=me,
            to=paid.pay_to,
            value=requirement.amount,
            valid_after="0",
            valid_before=str(
                now + min(requirement.max_timeout_seconds or MAX_VALIDITY, MAX_VALIDITY)
            ),
            nonce=nonce,
        )
        domain, types, primary, message = build_typed_data_for_signing(
            authorization, self.wallet.config.chain_id, self.contract, name, version
        )
        signature = self.wallet.signer.sign_typed_data(domain, types, primary, message)
        payload = ExactEIP3009Payload(authorization=authorization, signature="0x" + signature.hex())
        record = paid.model_copy(update={"valid_before": int(authorization.valid_before)})
        return Payment(payload.to_dict(), record)

    async def _settled_by(self, payer: str, nonce: str) -> str | None:
        """The transaction whose ``AuthorizationUsed`` log used ``nonce`` of ``payer``."""
        topics = [AUTHORIZATION_USED, "0x" + payer.lower()[2:].rjust(64, "0"), nonce]
        try:
            logs = await self.wallet.w3.eth.get_logs(
                {"address": self.contract, "fromBlock": 0, "toBlock": "latest", "topics": topics}
            )
        except (Web3Exception, ValueError):  # a node that limits the range: unknown, not wrong
            return None
        return None if not logs else "0x" + bytes(logs[0]["transactionHash"]).hex()

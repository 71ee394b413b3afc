"""Sends the person signs: the key stays on their device (seed 000's model). The server holds
the person's address only; ``client_signed_capabilities`` offers ``send_transfer`` executed by
the client: the approval card is the server's (simulated from the person's address), the
client signs and broadcasts the transaction and reports its hash (``submit_result`` with
``{"tx_hash": "0x..."}``). The report is accepted only after the transaction is read back from
the chain and its chain id, sender, contract, calldata and value match the approved call, and
its receipt (with ``confirmations``) says it succeeded; the accepted hash is recorded in the
intent table (one call per transaction: a hash reported twice is refused). A hash that does not
exist, does not match or reverted is refused: the refusal is the call's recorded outcome, the
run is told, and the reporter gets ``result_refused``."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import replace
from decimal import Decimal
from typing import Annotated, Any, Literal, cast

from eth_typing import HexStr
from eth_utils.address import to_checksum_address
from pydantic import BaseModel, Field
from web3.exceptions import TransactionNotFound

from ..capabilities import CallContext, Capability, capability
from . import binding
from .addresses import checked_recipient
from .binding import BoundAddress, BoundChain
from .cards import ChainCards
from .config import ChainConfig
from .errors import ChainError
from .intents import IntentBook
from .keys import Signer
from .wallet import NATIVE_DECIMALS, ChainReceipt, ChainWallet, _units

__all__ = ["ClientTxRefused", "PersonHoldsKey", "client_signed_capabilities", "connect_watching"]

# a hash the client has just broadcast may take a moment to reach the node that is asked
FIND_SECONDS = 3.0
_HASH = re.compile(r"^0x[0-9a-fA-F]{64}$")


class ClientTxRefused(BaseModel):
    """A reported transaction the server did not accept, and why."""

    status: Literal["refused"] = "refused"
    tx_hash: str
    reason: str


class PersonHoldsKey:
    """A ``Signer`` stand-in for an account whose key only the person's device holds."""

    __slots__ = ("address",)

    def __init__(self, address: str) -> None:
        self.address: str = to_checksum_address(checked_recipient(address))

    def sign(self, tx: Any) -> Any:
        raise ChainError("client_signs", "the person's device holds this key: it signs, not here")

    def secrets(self) -> tuple[str, ...]:
        return ()

    def __repr__(self) -> str:
        return f"PersonHoldsKey({self.address})"


async def connect_watching(config: ChainConfig, address: str, intents: IntentBook) -> ChainWallet:
    """A wallet for ``address`` that reads, simulates and checks, and never signs."""
    return await ChainWallet.connect(config, cast(Signer, PersonHoldsKey(address)), intents)


def client_signed_capabilities(wallet: ChainWallet) -> list[Capability]:
    """``balance_check`` and a client-executed ``send_transfer`` over a watching wallet."""
    cfg = wallet.config
    cards = ChainCards(wallet)

    async def amount_of(args: Any, ctx: CallContext) -> Decimal | None:
        value = wallet.usd_value(args.asset, args.amount)
        return None if value is None else value + await cards.gas_usd("send", args)

    async def card(a: Any) -> str:
        value = wallet.usd_value(a.asset, a.amount)
        about = "" if value is None else f" (about ${value:,.2f})"
        return (
            f"Sign on your device: send {a.amount} {a.asset.upper()}{about} to {a.to} on chain "
            f"{cfg.chain_id}; {await cards.facts('send', a)}"
        )

    @capability(kind="read")
    async def balance_check(
        ctx: CallContext,
        address: Annotated[
            str | None, Field(description="A 0x address; omit it for the person's wallet.")
        ] = None,
    ) -> Any:
        """The balances of the person's wallet (or of an address) read from the chain."""
        return await wallet.balances(address)

    @capability(
        kind="execute",
        risk="high",
        executor="client",
        operation="send",
        amount_usd=amount_of,
        flags={"mutating", "requires_balance", "irreversible"},
        describe=card,
    )
    async def send_transfer(
        to: Annotated[
            str, Field(description="The recipient: a 0x address the person gave (EIP-55).")
        ],
        asset: Annotated[str, Field(description="USDC or the native coin.")],
        amount: Annotated[Decimal, Field(gt=0, description='A decimal string, e.g. "12.5".')],
        memo: Annotated[str, Field(max_length=140)] = "",
        chain_id: BoundChain = cfg.chain_id,
        sender: BoundAddress = wallet.address,
        contract: BoundAddress = cfg.token,
    ) -> ChainReceipt | ClientTxRefused:
        """Send an amount to an address: the person's device signs and sends the transaction.
        It cannot be undone."""
        raise ChainError("client_signs", "the person's device performs this send")

    async def check(args: Any, reported: Any, call: str) -> tuple[Any, str | None]:
        raw = reported.get("tx_hash") if isinstance(reported, dict) else reported
        tx_hash = str(raw) if isinstance(raw, str) and _HASH.match(raw) else ""
        try:
            if not tx_hash:
                raise ChainError("bad_report", 'the report is not {"tx_hash": "0x<64 hex>"}')
            receipt = await verified(wallet, args, tx_hash.lower(), call)
        except ChainError as exc:
            why = f"the reported transaction {tx_hash or '(none)'} was refused: {exc.message}"
            return ClientTxRefused(tx_hash=tx_hash, reason=why).model_dump(mode="json"), why
        return receipt.model_dump(mode="json"), None

    return [balance_check, replace(send_transfer, check_result=check)]


def expected_call(wallet: ChainWallet, to: str, asset: str, amount: Decimal) -> dict[str, Any]:
    """The approved send as a transaction does it: to, calldata, value."""
    cfg, symbol = wallet.config, asset.upper()
    recipient = checked_recipient(to, token=cfg.token, token_symbol=cfg.token_symbol)
    if symbol == cfg.token_symbol.upper():
        units = _units(amount, cfg.token_decimals, symbol)
        data = wallet.token.encode_abi("transfer", args=[recipient, units])
        return {"to": cfg.token, "data": data, "value": 0}
    if symbol == cfg.native_symbol.upper():
        return {"to": recipient, "data": "0x", "value": _units(amount, NATIVE_DECIMALS, symbol)}
    raise ChainError("unknown_asset", f"{symbol} is not on this chain")


async def verified(wallet: ChainWallet, args: Any, tx_hash: str, call: str) -> ChainReceipt:
    """The receipt of ``tx_hash`` if it is the approved send, mined and successful; recorded
    as ``call``'s (the approval's id) in the intent table."""
    cfg = wallet.config
    binding.check(wallet, args.chain_id, args.sender, args.contract, cfg.token)
    want = expected_call(wallet, args.to, args.asset, args.amount)
    tx = await _find(wallet, tx_hash)
    data = "0x" + bytes(tx["input"]).hex()
    differs = [
        f"{what} is {got}, the approved call's {expected}"
        for what, got, expected in (
            ("the chain id", int(tx.get("chainId", -1)), cfg.chain_id),
            ("the sender", to_checksum_address(tx["from"]), to_checksum_address(args.sender)),
            ("the contract (to)", _address(tx.get("to")), to_checksum_address(want["to"])),
            ("the calldata", data, str(want["data"]).lower()),
            ("the value", int(tx["value"]), int(want["value"])),
        )
        if got != expected
    ]
    if differs:
        raise ChainError("does_not_match", "; ".join(differs))
    receipt = await _receipt(wallet, tx_hash)
    block = int(receipt["blockNumber"])
    if int(receipt["status"]) != 1:
        raise ChainError("reverted", f"it reverted in block {block}")
    claimed = await wallet.intents.claim(
        f"client:{call}",
        chain_id=cfg.chain_id,
        sender=to_checksum_address(args.sender),
        nonce=int(tx["nonce"]),
        tx_hash=tx_hash,
        block=block,
    )
    if not claimed:
        raise ChainError("already_reported", "it was already reported for another call")
    return ChainReceipt(
        tx_hash=tx_hash,
        chain_id=cfg.chain_id,
        block=block,
        sender=to_checksum_address(args.sender),
        to=checked_recipient(args.to),
        asset=args.asset.upper(),
        amount=args.amount,
        nonce=int(tx["nonce"]),
    )


def _address(value: Any) -> str:
    return "(none: a contract creation)" if value is None else to_checksum_address(value)


async def _find(wallet: ChainWallet, tx_hash: str) -> Any:
    deadline = time.monotonic() + FIND_SECONDS
    while True:
        try:
            return await wallet.w3.eth.get_transaction(HexStr(tx_hash))
        except TransactionNotFound:
            if time.monotonic() > deadline:
                raise ChainError(
                    "not_found", f"no such transaction on chain {wallet.config.chain_id}"
                ) from None
        await asyncio.sleep(wallet.config.poll_interval)  # polling the node: no push here


async def _receipt(wallet: ChainWallet, tx_hash: str) -> Any:
    deadline = time.monotonic() + wallet.config.receipt_timeout
    needed = wallet.config.confirmations - 1
    while True:
        try:
            receipt = await wallet.w3.eth.get_transaction_receipt(HexStr(tx_hash))
        except TransactionNotFound:
            receipt = None
        if receipt is not None and (
            needed == 0 or await wallet.w3.eth.block_number >= receipt["blockNumber"] + needed
        ):
            return receipt
        if time.monotonic() > deadline:
            raise ChainError(
                "no_receipt",
                f"no receipt with {wallet.config.confirmations} confirmation(s) after "
                f"{wallet.config.receipt_timeout:g}s: whether it lands must be checked on chain "
                "(fiduciary chain reconcile)",
            )
        await asyncio.sleep(wallet.config.poll_interval)  # polling the node: no push here

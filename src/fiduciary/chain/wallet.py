"""``ChainWallet``: balances and sends on an EVM node, each send at most once on chain.

A send is built and simulated (``eth_estimateGas``: a transfer the chain would refuse is
refused before signing), then its nonce is reserved, the transaction signed and the intent
committed in one database transaction (``intents``), and only then broadcast. A call resumed
after a crash settles from its intent, never by signing anew: a receipt → done; the hash
pending → wait; the hash unknown and the nonce still free → the same bytes again; the nonce
taken by another transaction → ``ChainOutcomeUnknown``. ``step`` is told each point of a write
("signed", "committed", "broadcast", "receipt", "done"): the fault tests kill the process there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from decimal import ROUND_CEILING, Decimal
from typing import Any, Literal, cast

from eth_abi.abi import decode
from eth_typing import ChecksumAddress, HexStr
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from pydantic import BaseModel, Field
from web3 import AsyncHTTPProvider, AsyncWeb3
from web3.exceptions import ContractLogicError, TransactionNotFound, Web3Exception
from web3.types import RPCEndpoint, TxParams, TxReceipt

from ..exceptions import ConfigurationError
from .addresses import checked_recipient
from .artifacts import abi_of
from .config import ChainConfig
from .effects import Effects, effects
from .errors import ChainError, ChainOutcomeUnknown
from .intents import Intent, IntentBook
from .keys import Signer

__all__ = ["NATIVE_DECIMALS", "ChainBalances", "ChainReceipt", "ChainWallet", "Made", "reason_of"]

Step = Callable[[str], None]
ZERO_ADDRESS = "0x" + "0" * 40
NATIVE_DECIMALS = 18
# the estimate is made on the latest block; mined in the next, a call may write more (a Uniswap
# pair updates its price accumulators only when the block's time moved: two more fresh slots)
GAS_MARGIN = Decimal("1.2")
GAS_HEADROOM = 60_000
# a send's transaction as simulated for its card is signed as is within this many seconds
RECENT_SECONDS = 10.0
RECENT_KEPT = 64
# a transaction still queued this long looks for a lower nonce of the account left unsent
GAP_SECONDS = 1.0


def _unset(value: object) -> bool:
    return value is None


class ChainReceipt(BaseModel):
    """A transfer confirmed on chain."""

    tx_hash: str
    chain_id: int
    block: int
    sender: str
    to: str
    asset: str
    amount: Decimal
    nonce: int
    status: Literal["confirmed"] = "confirmed"
    rebroadcast: bool = False  # the same signed bytes sent again after an interruption
    replayed: bool = False  # settled from the intent recorded before an interruption
    # read from the chain after the receipt, for the post guards (left out when not read:
    # a call settled from its intent, or a node that did not answer)
    token_change: Decimal | None = Field(default=None, exclude_if=_unset)
    token_balance_after: Decimal | None = Field(default=None, exclude_if=_unset)
    amount_out: Decimal | None = Field(default=None, exclude_if=_unset)  # a swap's output


class ChainBalances(BaseModel):
    address: str
    chain_id: int
    balances: dict[str, Decimal]
    savings: dict[str, Decimal] = {}  # in the vault, withdrawable now (own wallet only)


def _no_step(point: str) -> None:
    return None


class ChainWallet:
    """One account's wallet on one chain."""

    def __init__(
        self,
        w3: AsyncWeb3[Any],
        config: ChainConfig,
        signer: Signer,
        intents: IntentBook,
        *,
        step: Step | None = None,
    ) -> None:
        self.w3 = w3
        self.config = config
        self.signer = signer
        self.intents = intents
        self._step = step or _no_step
        self._recent: dict[tuple[str, str, str], tuple[float, dict[str, Any]]] = {}
        self.token = w3.eth.contract(
            address=to_checksum_address(config.token), abi=abi_of("UsdStablecoin")
        )

    @classmethod
    async def connect(
        cls, config: ChainConfig, signer: Signer, intents: IntentBook, *, step: Step | None = None
    ) -> ChainWallet:
        """Connect to ``config.rpc_url`` and check that the node is on ``config.chain_id``."""
        # the chain id is asked once, here, and kept: web3 would otherwise ask it again for
        # every estimate and call it validates (a round trip each, on every send)
        provider = AsyncHTTPProvider(
            config.rpc_url,
            cache_allowed_requests=True,
            cacheable_requests={RPCEndpoint("eth_chainId")},
        )
        w3 = AsyncWeb3(provider)
        try:
            chain_id = await w3.eth.chain_id
        except (Web3Exception, OSError, TimeoutError) as exc:
            await w3.provider.disconnect()
            raise ConfigurationError(
                f"cannot reach the chain node at {config.rpc_url} ({type(exc).__name__})"
            ) from None
        if chain_id != config.chain_id:
            await w3.provider.disconnect()
            raise ConfigurationError(
                f"the node at {config.rpc_url} is on chain {chain_id}, the configuration "
                f"says {config.chain_id}: refusing to sign anything for it"
            )
        return cls(w3, config, signer, intents, step=step)

    async def close(self) -> None:
        await self.w3.provider.disconnect()

    @property
    def address(self) -> str:
        return self.signer.address

    def usd_value(self, asset: str, amount: Decimal) -> Decimal | None:
        price = self.config.usd_prices.get(asset.upper())
        return None if price is None else price * amount

    # -- reads ---------------------------------------------------------------------------

    async def balances(self, address: str | None = None) -> ChainBalances:
        who = to_checksum_address(self._recipient(address) if address else self.address)
        units = await self.token.functions.balanceOf(who).call()
        wei = await self.w3.eth.get_balance(who)
        own = address is None and self.config.vault is not None
        return ChainBalances(
            address=who,
            chain_id=self.config.chain_id,
            balances={
                self.config.token_symbol: _amount(units, self.config.token_decimals),
                self.config.native_symbol: _amount(wei, NATIVE_DECIMALS),
            },
            savings={self.config.token_symbol: await self.savings()} if own else {},
        )

    # -- the write -----------------------------------------------------------------------

    async def send(self, key: str, to: str, asset: str, amount: Decimal) -> ChainReceipt:
        """Send ``amount`` of ``asset`` to ``to``, once per ``key`` whatever happens."""
        recipient = self._recipient(to)
        symbol = asset.upper()
        made = Made(recipient, symbol, amount)
        build = lambda: self._fresh_or_build(recipient, symbol, amount)  # noqa: E731
        return await self.transact(key, build, made)

    async def save(self, key: str, amount: Decimal) -> ChainReceipt:
        """Deposit ``amount`` of the stablecoin into the ERC-4626 vault: an allowance of exactly
        that amount (never unlimited), then the deposit; each its own intent under ``key``."""
        vault = self._vault()
        units = _units(amount, self.config.token_decimals, self.config.token_symbol)
        me = to_checksum_address(self.address)
        symbol = self.config.token_symbol
        if await self.intents.get(f"{key}#approve") is None:  # not yet begun: check first
            held = await self.token.functions.balanceOf(me).call()
            if held < units:
                raise ChainError(
                    "insufficient_funds",
                    f"the wallet holds {_amount(held, self.config.token_decimals)} {symbol}, "
                    f"less than {amount}",
                )
        approve = self.token.encode_abi("approve", args=[vault.address, units])
        await self.transact(
            f"{key}#approve",
            lambda: self.prepare({"to": self.token.address, "value": 0, "data": approve}),
            Made(vault.address, symbol, amount),
        )
        deposit = vault.encode_abi("deposit", args=[units, me])
        return await self.transact(
            f"{key}#deposit",
            lambda: self.prepare({"to": vault.address, "value": 0, "data": deposit}),
            Made(vault.address, symbol, amount),
        )

    async def withdraw(self, key: str, amount: Decimal) -> ChainReceipt:
        """Withdraw ``amount`` of the stablecoin from the vault to the wallet."""
        vault = self._vault()
        units = _units(amount, self.config.token_decimals, self.config.token_symbol)
        me = to_checksum_address(self.address)
        data = vault.encode_abi("withdraw", args=[units, me, me])
        return await self.transact(
            key,
            lambda: self.prepare({"to": vault.address, "value": 0, "data": data}),
            Made(me, self.config.token_symbol, amount),
        )

    async def withdraw_all(self, key: str) -> ChainReceipt:
        """Redeem every share the wallet holds in the vault (``withdraw`` of "all"): the shares
        are counted when the transaction is built, so a resumed call signs nothing new."""
        vault = self._vault()
        me = to_checksum_address(self.address)
        made = Made(me, self.config.token_symbol, Decimal(0))

        async def build() -> dict[str, Any]:
            shares = int(await vault.functions.maxRedeem(me).call())
            if shares == 0:
                raise ChainError("nothing_saved", "the wallet holds no shares in the vault")
            assets = int(await vault.functions.previewRedeem(shares).call())
            made.amount = _amount(assets, self.config.token_decimals)
            data = vault.encode_abi("redeem", args=[shares, me, me])
            return await self.prepare({"to": vault.address, "value": 0, "data": data})

        return await self.transact(key, build, made)

    def fee_usd(self, gas: int, max_fee_per_gas: int) -> Decimal | None:
        """The most ``gas`` at ``max_fee_per_gas`` can cost, in USD (cents, rounded up)."""
        fee = _amount(gas * max_fee_per_gas, NATIVE_DECIMALS)
        usd = self.usd_value(self.config.native_symbol, fee)
        return None if usd is None else usd.quantize(Decimal("0.01"), rounding=ROUND_CEILING)

    async def savings(self) -> Decimal:
        """What the wallet could withdraw from the vault now."""
        units = await self._vault().functions.maxWithdraw(to_checksum_address(self.address)).call()
        return _amount(units, self.config.token_decimals)

    def _vault(self) -> Any:
        if self.config.vault is None:
            raise ChainError("no_vault", "no savings vault is configured on this chain")
        return self.w3.eth.contract(
            address=to_checksum_address(self.config.vault), abi=abi_of("SavingsVault")
        )

    async def transact(
        self, key: str, build: Callable[[], Awaitable[dict[str, Any]]], made: Made
    ) -> ChainReceipt:
        """One transaction per ``key``: built, simulated, signed and recorded once; settled
        from its intent when called again (after a crash: the same ``key``)."""
        intent = await self.intents.get(key)
        fresh = intent is None
        if intent is None:
            tx = await build()
            sender = to_checksum_address(self.address)
            chain_nonce = await self.w3.eth.get_transaction_count(sender, "pending")
            intent = await self.intents.reserve(
                key,
                chain_id=self.config.chain_id,
                sender=sender,
                chain_nonce=chain_nonce,
                sign=lambda nonce: self.signer.sign({**tx, "nonce": nonce}),
                signed=lambda: self._step("signed"),
            )
            self._step("committed")
        return await self._settle(intent, made, fresh=fresh)

    async def recheck(self, key: str, to: str, asset: str, amount: Decimal) -> ChainReceipt:
        """Check a recorded send against the chain again (after a reorg, say): mined and still
        there → its receipt; vanished → the same bytes again (never signed anew) while the
        nonce is free, else outcome unknown."""
        intent = await self.intents.get(key)
        if intent is None:
            raise ChainError("unknown_intent", "no transaction was recorded for this call")
        made = Made(self._recipient(to), asset.upper(), amount)
        if intent.status == "mined":
            if await self._receipt(intent.tx_hash) is not None:
                return made.receipt(self.config.chain_id, intent, replayed=True)
            intent = replace(intent, status="signed", block_number=None)
            await self.intents.mark(key, "signed", detail="vanished from the chain (reorg)")
        return await self._settle(intent, made, fresh=False)

    async def _settle(self, intent: Intent, made: Made, *, fresh: bool) -> ChainReceipt:
        if intent.status == "mined":
            return made.receipt(self.config.chain_id, intent, replayed=True)
        if intent.status in ("reverted", "refused"):
            raise ChainError(intent.status, intent.detail or f"the transaction was {intent.status}")
        if intent.status == "unknown":
            raise ChainOutcomeUnknown(intent.detail or "the outcome of this transfer is unknown")
        rebroadcast = False
        if fresh:
            await self._broadcast(intent)
        elif await self._receipt(intent.tx_hash) is None and not await self._pending(intent):
            await self._nonce_still_free(intent)
            await self._broadcast(intent)
            rebroadcast = True
        self._step("broadcast")
        receipt = await self._wait(intent)
        self._step("receipt")
        block = int(receipt["blockNumber"])
        if int(receipt["status"]) != 1:
            reason = await self._revert_reason(intent, block, int(receipt["gasUsed"]))
            detail = f"the transaction {intent.tx_hash} reverted in block {block}: {reason}"
            await self.intents.mark(intent.key, "reverted", block=block, detail=detail)
            raise ChainError("reverted", detail)
        await self.intents.mark(intent.key, "mined", block=block)
        self._step("done")
        done = replace(intent, status="mined", block_number=block)
        made.mined = receipt
        made.effects = await effects(self.token, receipt, intent.sender, self.config.token_decimals)
        return made.receipt(self.config.chain_id, done, replayed=not fresh, rebroadcast=rebroadcast)

    async def build_send(self, to: str, symbol: str, amount: Decimal) -> dict[str, Any]:
        """The transaction a send would sign (simulated, gas and fees; not the nonce). Kept
        for a few seconds: the send that follows its card signs it without asking again."""
        tx = await self._build(to, symbol, amount)
        self._recent[(to.lower(), symbol, str(amount))] = (time.monotonic(), tx)
        while len(self._recent) > RECENT_KEPT:
            self._recent.pop(next(iter(self._recent)))
        return tx

    async def _fresh_or_build(self, to: str, symbol: str, amount: Decimal) -> dict[str, Any]:
        made = self._recent.pop((to.lower(), symbol, str(amount)), None)
        if made is not None and time.monotonic() - made[0] < RECENT_SECONDS:
            return dict(made[1])
        return await self._build(to, symbol, amount)

    async def _build(self, to: str, symbol: str, amount: Decimal) -> dict[str, Any]:
        cfg = self.config
        checked_recipient(to, token=cfg.token, token_symbol=cfg.token_symbol)
        if symbol == cfg.token_symbol.upper():
            units = _units(amount, cfg.token_decimals, symbol)
            data = self.token.encode_abi("transfer", args=[to, units])
            tx: dict[str, Any] = {"to": self.token.address, "value": 0, "data": data}
        elif symbol == cfg.native_symbol.upper():
            tx = {"to": to, "value": _units(amount, NATIVE_DECIMALS, symbol), "data": "0x"}
        else:
            raise ChainError(
                "unknown_asset",
                f"{symbol} is not on this chain: {cfg.token_symbol} or {cfg.native_symbol}",
            )
        return await self.prepare(tx)

    async def prepare(self, tx: dict[str, Any]) -> dict[str, Any]:
        """``tx`` simulated (``eth_estimateGas``: refused here if the chain would refuse it),
        with its gas limit and EIP-1559 fees; ready to sign but for the nonce."""
        tx = {**tx, "chainId": self.config.chain_id, "type": 2}
        tx["from"] = to_checksum_address(self.address)
        eth = self.w3.eth
        # three independent questions to the node, asked at once (each a round trip)
        estimate, block, priority = await asyncio.gather(
            eth.estimate_gas(cast(TxParams, tx)),
            eth.get_block("latest"),
            eth.max_priority_fee,
            return_exceptions=True,
        )
        if isinstance(estimate, (ContractLogicError, Web3Exception)):
            raise ChainError(
                "simulation_failed",
                f"the chain would refuse this transaction: {_reason(estimate)}",
            )
        for answer in (estimate, block, priority):
            if isinstance(answer, BaseException):
                raise answer
        gas = cast(int, estimate)
        base = int(cast(Any, block).get("baseFeePerGas", 0))
        tip = int(cast(int, priority))
        tx.update(
            gas=int(Decimal(gas) * GAS_MARGIN) + GAS_HEADROOM,
            maxFeePerGas=2 * base + tip,
            maxPriorityFeePerGas=tip,
        )
        del tx["from"]
        return tx

    async def _broadcast(self, intent: Intent) -> None:
        try:
            await self.w3.eth.send_raw_transaction(intent.raw_tx)
        except Web3Exception as exc:
            text = _reason(exc).lower()
            if "already known" in text or "nonce too low" in text:
                return  # the node has it (or mined it): the receipt decides
            detail = f"the node refused the transaction: {_reason(exc)}"
            await self.intents.release(intent.key, detail)
            raise ChainError("refused_by_node", detail) from None
        except (OSError, TimeoutError):
            raise ChainOutcomeUnknown(
                f"the node could not be reached while broadcasting {intent.tx_hash}; the signed "
                "transaction is recorded and a resumed call settles it (never signs again)"
            ) from None

    async def _receipt(self, tx_hash: str) -> TxReceipt | None:
        try:
            return await self.w3.eth.get_transaction_receipt(HexStr(tx_hash))
        except TransactionNotFound:
            return None

    async def _pending(self, intent: Intent) -> bool:
        try:
            await self.w3.eth.get_transaction(HexStr(intent.tx_hash))
        except TransactionNotFound:
            return False
        return True

    async def _nonce_still_free(self, intent: Intent) -> None:
        """The hash is unknown to the node: the same bytes may go again only if no other
        transaction took their nonce (then this one can never be mined)."""
        sender = cast(ChecksumAddress, intent.sender)
        used = await self.w3.eth.get_transaction_count(sender, "latest")
        assert intent.nonce is not None  # a signed intent holds its nonce
        if used > intent.nonce and await self._receipt(intent.tx_hash) is None:
            detail = (
                f"nonce {intent.nonce} of {intent.sender} was taken by another transaction; "
                f"{intent.tx_hash} can never be mined. Whether the transfer happened must be "
                "checked on chain: it is not retried"
            )
            await self.intents.mark(intent.key, "unknown", detail=detail)
            raise ChainOutcomeUnknown(detail)

    async def _wait(self, intent: Intent) -> TxReceipt:
        deadline = time.monotonic() + self.config.receipt_timeout
        needed = self.config.confirmations - 1
        gaps_checked = time.monotonic()
        while True:
            receipt = await self._receipt(intent.tx_hash)
            if receipt is not None and (
                needed == 0 or await self.w3.eth.block_number >= receipt["blockNumber"] + needed
            ):
                return receipt
            if receipt is None and not await self._pending(intent):
                # dropped: replaced by another transaction of that nonce (outcome unknown), or
                # evicted from the node's pool (the same bytes are still good: sent again)
                await self._nonce_still_free(intent)
                await self._broadcast(intent)
            elif receipt is None and time.monotonic() - gaps_checked > GAP_SECONDS:
                gaps_checked = time.monotonic()
                await self._fill_gaps(intent)
            if time.monotonic() > deadline:
                raise ChainOutcomeUnknown(
                    f"{intent.tx_hash} has no receipt with {self.config.confirmations} "
                    f"confirmation(s) after {self.config.receipt_timeout:g}s; it stays recorded "
                    "and a resumed call settles it"
                )
            await asyncio.sleep(self.config.poll_interval)

    async def _fill_gaps(self, intent: Intent) -> None:
        """Our transaction waits in the node's queue behind a lower nonce of the account that
        nobody broadcast: an intent committed by a call that crashed before its broadcast and
        is not resumed yet (its run may wait for this very call to end). Its recorded bytes are
        sent (the same bytes, never signed anew): a gap is filled by whoever waits on it."""
        assert intent.nonce is not None
        sender = cast(ChecksumAddress, intent.sender)
        used = await self.w3.eth.get_transaction_count(sender, "latest")
        if used >= intent.nonce:
            return
        for other in await self.intents.by_sender(intent.chain_id, intent.sender):
            if other.status != "signed" or other.nonce is None or other.key == intent.key:
                continue
            if used <= other.nonce < intent.nonce and not await self._pending(other):
                try:
                    await self.w3.eth.send_raw_transaction(other.raw_tx)
                except Web3Exception:
                    continue  # mined meanwhile, or refused: its own call settles it

    async def _revert_reason(self, intent: Intent, block: int, gas_used: int) -> str:
        tx = await self.w3.eth.get_transaction(HexStr(intent.tx_hash))
        if gas_used >= int(tx["gas"]):
            return f"out of gas (its limit, {tx['gas']}, was all used)"
        call = {"from": intent.sender, "to": tx["to"], "data": tx["input"], "value": tx["value"]}
        try:
            # on the block's state: what made it fail there (a later block may differ)
            await self.w3.eth.call(cast(TxParams, call), block_identifier=block)
        except (ContractLogicError, Web3Exception) as exc:
            return _reason(exc)
        return "no reason given"

    def _recipient(self, to: str) -> str:
        return checked_recipient(to)


class Made:
    """What a send asked for, to state in its receipt."""

    def __init__(self, to: str, asset: str, amount: Decimal) -> None:
        self.to, self.asset, self.amount = to, asset, amount
        # when settled in this process: the receipt, and what it did (read from the chain)
        self.mined: TxReceipt | None = None
        self.effects: Effects | None = None

    def receipt(
        self,
        chain_id: int,
        intent: Intent,
        *,
        replayed: bool,
        rebroadcast: bool = False,
    ) -> ChainReceipt:
        assert intent.nonce is not None
        assert intent.block_number is not None
        effects = self.effects
        return ChainReceipt(
            tx_hash=intent.tx_hash,
            chain_id=chain_id,
            block=intent.block_number,
            sender=intent.sender,
            to=self.to,
            asset=self.asset,
            amount=self.amount,
            nonce=intent.nonce,
            replayed=replayed,
            rebroadcast=rebroadcast,
            token_change=None if effects is None else effects.token_change,
            token_balance_after=None if effects is None else effects.token_balance_after,
        )


def _units(amount: Decimal, decimals: int, symbol: str) -> int:
    scaled = amount.scaleb(decimals)
    if amount <= 0 or scaled != scaled.to_integral_value():
        raise ChainError(
            "bad_amount", f"{symbol} amounts are positive with at most {decimals} decimals"
        )
    return int(scaled)


def _amount(units: int, decimals: int) -> Decimal:
    return Decimal(units).scaleb(-decimals)


def reason_of(exc: Exception) -> str:
    return _reason(exc)


def _reason(exc: Exception) -> str:
    """A node's refusal in words: a custom error of the token (OpenZeppelin's ``ERC20...``)
    decoded with its arguments, else the node's message."""
    data = getattr(exc, "data", None)
    if isinstance(data, str) and data.startswith("0x") and len(data) >= 10:
        decoded = _custom_error(data)
        if decoded is not None:
            return decoded
    message = getattr(exc, "message", None) or (exc.args[0] if exc.args else type(exc).__name__)
    return str(message)[:300]


def _custom_error(data: str) -> str | None:
    for entry in abi_of("UsdStablecoin"):
        if entry.get("type") != "error":
            continue
        types = [i["type"] for i in entry["inputs"]]
        selector = keccak(text=f"{entry['name']}({','.join(types)})")[:4].hex()
        if data[2:10] == selector:
            try:
                values = decode(types, bytes.fromhex(data[10:]))
            except Exception:
                return str(entry["name"])
            shown = ", ".join(
                f"{i['name']}={v}" for i, v in zip(entry["inputs"], values, strict=True)
            )
            return f"{entry['name']}({shown})"
    return None

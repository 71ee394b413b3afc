"""Benchmark: a gated live transfer through fiduciary against the same transfer with raw
web3.py, on one local anvil (started here from node_modules; `make chain-tools` installs it).

- per transfer: an agent run (scripted model, SQLite store, the auto tier) whose one call is
  ``send_transfer`` of 1 USDC, against raw web3.py doing what any careful sender does for the
  same transfer: estimate gas, read the fees and the pending nonce, sign, send, poll for the
  receipt at the same interval. Rounds interleaved, so machine noise hits both alike; medians.
- under load: ``--concurrent`` transfers (50) sent at once by one ``ChainWallet`` (nonces
  reserved in its SQLite intent table), against raw web3.py sending as many at once with nonces
  from a local counter (what a single process can do, and two processes cannot).

    python bench/chain.py [--rounds 20] [--concurrent 50]

Ends with one line of JSON: milliseconds per transfer of each, their ratio (the aim: fiduciary
<= 1.3x raw), and transfers/s under load of each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

from eth_account import Account
from eth_typing import ChecksumAddress, HexStr
from web3 import AsyncHTTPProvider, AsyncWeb3
from web3.exceptions import TransactionNotFound
from web3.types import TxParams

from fiduciary import Agent, Policy, Threshold
from fiduciary.chain.artifacts import abi_of
from fiduciary.chain.capabilities import chain_capabilities
from fiduciary.chain.config import ChainConfig
from fiduciary.chain.deploy import deploy
from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.keys import Signer
from fiduciary.chain.wallet import ChainWallet
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all

ROOT = Path(__file__).resolve().parents[1]
ANVIL = ROOT / "node_modules" / "@foundry-rs" / "anvil-linux-amd64" / "bin" / "anvil"
POLL = 0.005  # both sides poll for receipts at this interval


def _rpc(url: str, method: str, *params: Any) -> Any:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)})
    req = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as response:
        return json.loads(response.read()).get("result")


def _start_anvil() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(ANVIL), "--port", str(port), "--silent"])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            _rpc(url, "eth_chainId")
            return proc, url
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _someone() -> str:
    return str(Account.from_key(secrets.token_bytes(32)).address)


class Raw:
    """The baseline: one account sending the token with web3.py and nothing else."""

    def __init__(self, url: str, config: ChainConfig, key: bytes) -> None:
        self.w3 = AsyncWeb3(AsyncHTTPProvider(url))
        self.account = Account.from_key(key)
        self.token = self.w3.eth.contract(
            address=cast(ChecksumAddress, config.token), abi=abi_of("UsdStablecoin")
        )
        self.chain_id = config.chain_id

    async def build(self, to: str, nonce: int | None = None) -> dict[str, Any]:
        data = self.token.encode_abi("transfer", args=[to, 10**6])
        tx: dict[str, Any] = {
            "to": self.token.address,
            "value": 0,
            "data": data,
            "from": self.account.address,
            "chainId": self.chain_id,
            "type": 2,
        }
        gas = await self.w3.eth.estimate_gas(cast(TxParams, tx))
        base = int((await self.w3.eth.get_block("latest")).get("baseFeePerGas", 0))
        tip = int(await self.w3.eth.max_priority_fee)
        if nonce is None:
            nonce = await self.w3.eth.get_transaction_count(self.account.address, "pending")
        tx.update(
            gas=gas * 12 // 10, maxFeePerGas=2 * base + tip, maxPriorityFeePerGas=tip, nonce=nonce
        )
        del tx["from"]
        return tx

    async def send(self, to: str, nonce: int | None = None) -> None:
        signed = self.account.sign_transaction(await self.build(to, nonce))
        tx_hash = await self.w3.eth.send_raw_transaction(signed.raw_transaction)
        while True:
            try:
                await self.w3.eth.get_transaction_receipt(HexStr(tx_hash.to_0x_hex()))
                return
            except TransactionNotFound:
                await asyncio.sleep(POLL)


async def main(rounds: int, concurrent: int) -> dict[str, Any]:
    proc, url = _start_anvil()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            keys = [secrets.token_bytes(32) for _ in range(2)]
            for key in keys:
                _rpc(url, "anvil_setBalance", Account.from_key(key).address, hex(10**21))
            ours = Signer(Account.from_key(keys[0]))
            config = await deploy(url, ours, mint=Decimal(10_000_000))
            config = ChainConfig(
                rpc_url=url, chain_id=config.chain_id, token=config.token, poll_interval=POLL
            )
            raw = Raw(url, config, keys[1])
            wallet = await ChainWallet.connect(config, ours, SQLiteIntentBook(Path(tmp) / "b.db"))
            # the raw account needs tokens too: one transfer from ours
            await wallet.send("fund-raw", raw.account.address, "USDC", Decimal(1_000_000))
            store = await SQLiteStore.open(Path(tmp) / "b.db")
            policy = Policy(
                thresholds={"send": Threshold(auto_below=Decimal(50), confirm_below=Decimal(1000))}
            )

            def agent_for(to: str) -> Agent:
                script = Script(
                    "pay",
                    [
                        ToolCalls(
                            [Call("send_transfer", {"to": to, "asset": "USDC", "amount": "1"})]
                        ),
                        Reply("sent"),
                    ],
                )
                return Agent(
                    model=ScriptedModel([script]),
                    capabilities=chain_capabilities(wallet),
                    store=store,
                    policy=policy,
                    authorize=allow_all,
                )

            ours_ms: list[float] = []
            raw_ms: list[float] = []
            for i in range(rounds + 2):  # two warm-up rounds
                agent = agent_for(_someone())
                started = time.perf_counter()
                async for _ in agent.run("pay", principal="bench"):
                    pass
                took = (time.perf_counter() - started) * 1000
                started = time.perf_counter()
                await raw.send(_someone())
                raw_took = (time.perf_counter() - started) * 1000
                if i >= 2:
                    ours_ms.append(took)
                    raw_ms.append(raw_took)

            people = [_someone() for _ in range(concurrent)]
            started = time.perf_counter()
            await asyncio.gather(
                *(wallet.send(f"load-{i}", p, "USDC", Decimal(1)) for i, p in enumerate(people))
            )
            ours_load = concurrent / (time.perf_counter() - started)
            first = await raw.w3.eth.get_transaction_count(raw.account.address, "pending")
            started = time.perf_counter()
            await asyncio.gather(*(raw.send(p, first + i) for i, p in enumerate(people)))
            raw_load = concurrent / (time.perf_counter() - started)
            await store.close()
            await wallet.close()
            await raw.w3.provider.disconnect()
    finally:
        proc.terminate()
        proc.wait()
    ours_median, raw_median = statistics.median(ours_ms), statistics.median(raw_ms)
    return {
        "bench": "chain",
        "rounds": rounds,
        "fiduciary_ms_per_transfer": round(ours_median, 2),
        "raw_web3_ms_per_transfer": round(raw_median, 2),
        "ratio": round(ours_median / raw_median, 2),
        "concurrent": concurrent,
        "fiduciary_transfers_per_s": round(ours_load, 1),
        "raw_web3_transfers_per_s": round(raw_load, 1),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=50)
    args = parser.parse_args()
    figures = asyncio.run(main(args.rounds, args.concurrent))
    print(
        f"per transfer: fiduciary {figures['fiduciary_ms_per_transfer']} ms, raw web3.py "
        f"{figures['raw_web3_ms_per_transfer']} ms ({figures['ratio']}x); "
        f"{args.concurrent} at once: fiduciary {figures['fiduciary_transfers_per_s']}/s, "
        f"raw {figures['raw_web3_transfers_per_s']}/s"
    )
    print(json.dumps(figures))

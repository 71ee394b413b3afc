"""``fiduciary demo --chain``: the demo on a local anvil the command starts (from the project's
``node_modules``, installed by ``make chain-tools``). It deploys the stablecoin and the vault,
gives a fresh account 1,000 USDC, and asks a scripted agent to send 250 USDC: the approval card
(with the simulation) is shown and approved, then the transaction's hash and block, the
balances read from the chain, and the reconciliation of the intents with the chain (0
differences). Everything lives for the demo only: the chain, the key and the database."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

from eth_account import Account
from web3 import AsyncHTTPProvider, AsyncWeb3

from ..agent import Agent
from ..events import PendingAction, ToolCallEnd
from ..exceptions import ConfigurationError
from ..policy import Policy, Threshold
from ..redaction import Redactor
from ..stores.sqlite import SQLiteStore
from ..testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect
from .capabilities import chain_capabilities
from .deploy import deploy
from .guards import chain_guards
from .intents import SQLiteIntentBook
from .keys import Signer
from .reconcile import reconcile
from .wallet import ChainWallet

__all__ = ["find_anvil", "run_chain_demo"]

BOB = "0x52908400098527886E0F7030069857D2E4169EE7"  # EIP-55's own test vector: nobody's key
STARTUP_SECONDS = 30.0
MISSING = (
    "anvil is not installed: run `make chain-tools` (npm ci, from package-lock.json){npm}; "
    "or point FIDUCIARY_NODE_MODULES at a node_modules holding @foundry-rs/anvil"
)

Say = Callable[[str], None]
Ask = Callable[[PendingAction], Awaitable[bool]]


def find_anvil(cwd: Path | None = None) -> Path:
    """The anvil binary npm installed, or ``ConfigurationError`` saying how to get it."""
    named = os.environ.get("FIDUCIARY_NODE_MODULES")
    places = (
        [Path(named)]
        if named  # the one place asked for
        else [(cwd or Path.cwd()) / "node_modules", Path(__file__).parents[3] / "node_modules"]
    )
    for modules in places:
        found = sorted(modules.glob("@foundry-rs/anvil-*/bin/anvil"))
        if found:
            return found[0]
    npm = "" if shutil.which("npm") else " — npm itself is missing: install Node.js and npm"
    raise ConfigurationError(MISSING.format(npm=npm))


@contextmanager
def _anvil(binary: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [str(binary), "--host", "127.0.0.1", "--port", str(port), "--silent"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not _answers(url):  # a condition wait: the node answers, dies, or the time is up
            if process.poll() is not None or time.monotonic() > deadline:
                raise ConfigurationError(f"anvil ({binary}) did not start")
            time.sleep(0.05)  # the node is starting: nothing to wait on but its port
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _rpc(url: str, method: str, *params: object) -> object:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)})
    request = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read()).get("result")


def _answers(url: str) -> bool:
    try:
        _rpc(url, "eth_chainId")
    except (urllib.error.URLError, ConnectionError, OSError):
        return False
    return True


async def run_chain_demo(*, say: Say, ask: Ask, cwd: Path | None = None) -> int:
    """The demo on a fresh anvil; 0 when the send landed once and reconciles."""
    binary = find_anvil(cwd)
    with _anvil(binary) as url, tempfile.TemporaryDirectory(prefix="fiduciary-chain-") as tmp:
        say(f"anvil started at {url} ({binary})")
        signer = Signer(Account.from_key(secrets.token_bytes(32)))
        _rpc(url, "anvil_setBalance", signer.address, hex(10 * 10**18))  # 10 ETH for gas
        config = await deploy(url, signer, mint=Decimal(1000))
        say(f"deployed on chain {config.chain_id}: USDC {config.token}, vault {config.vault}")
        say(f"your account {signer.address} holds 1000 USDC and 10 ETH")
        db = Path(tmp) / "fiduciary.sqlite3"
        intents = SQLiteIntentBook(db)
        wallet = await ChainWallet.connect(config, signer, intents)
        store = await SQLiteStore.open(db)
        try:
            return await _send(wallet, store, config.token, say, ask, url, intents)
        finally:
            await store.close()
            await wallet.close()


async def _send(
    wallet: ChainWallet,
    store: SQLiteStore,
    token: str,
    say: Say,
    ask: Ask,
    url: str,
    intents: SQLiteIntentBook,
) -> int:
    send = {"to": BOB, "asset": "USDC", "amount": "250"}
    script = Script("send", [ToolCalls([Call("send_transfer", send)]), Reply("Sent 250 USDC.")])
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=chain_capabilities(wallet),
        guards=chain_guards(wallet.config),
        store=store,
        policy=Policy(
            thresholds={"send": Threshold(auto_below=Decimal(50), confirm_below=Decimal(1000))}
        ),
        authorize=allow_all,
        redactor=Redactor(known_secrets=wallet.signer.secrets()),
    )
    say(f"> send 250 USDC to {BOB}")
    events = await collect(agent.run(f"send 250 USDC to {BOB}", principal="demo-user"))
    pending = [e for e in events if isinstance(e, PendingAction)]
    if not pending:
        say("the send did not wait for approval: unexpected")
        return 1
    card = pending[0]
    say(f"waiting for you (${card.amount_usd:,.2f} counted, the gas included):")
    say(f"  {card.description}")
    if not await ask(card):
        await agent.deny(card.approval_id, by="demo-user", reason="declined at the terminal")
        await collect(agent.resume(events[0].run_id))
        say("declined: nothing was signed or sent")
        return 0
    await agent.approve(card.approval_id, by="demo-user", confirm_amount=card.amount_usd)
    resumed = await collect(agent.resume(events[0].run_id))
    ends = [e for e in resumed if isinstance(e, ToolCallEnd)]
    if not ends or ends[0].is_error:
        say(f"the send failed: {ends[0].output if ends else 'no result'}")
        return 1
    receipt = json.loads(ends[0].output.split("\n\n")[0])
    say(f"sent: transaction {receipt['tx_hash']} in block {receipt['block']}")
    mine, bob = await wallet.balances(), await wallet.balances(BOB)
    say(
        f"balances read from the chain: you {mine.balances['USDC']} USDC, "
        f"{mine.balances['ETH']:.6f} ETH; {BOB} {bob.balances['USDC']} USDC"
    )
    w3 = AsyncWeb3(AsyncHTTPProvider(url))
    try:
        differences = await reconcile(w3, wallet.config, intents, wallet.address)
    finally:
        await w3.provider.disconnect()
    for d in differences:
        say(f"  {d.kind} {d.tx_hash} {d.detail}")
    say(f"reconciled with the chain: {len(differences)} differences")
    return 0 if not differences else 1

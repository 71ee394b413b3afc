"""Payment links paid on chain: a link made through the gates asks for an exact amount (its
reference below the cent), another account pays it with a real ERC-20 transfer, and the
watcher marks it paid once — counted on the chain (balanceOf, the Transfer logs) and in the
books. A transfer of another token or of another amount leaves it open; a payment after cancel
is reported; a watcher SIGKILLed mid-read and started again pays it once."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from eth_utils.address import to_checksum_address

from fiduciary import Agent, Policy
from fiduciary.chain.capabilities import chain_capabilities
from fiduciary.chain.deploy import deploy
from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.invoicing import open_receivables
from fiduciary.chain.keys import load_keystore, write_keystore
from fiduciary.chain.payments import SQLiteReceivables
from fiduciary.chain.wallet import ChainWallet
from fiduciary.chain.watch import PaymentWatcher
from fiduciary.events import PendingAction, ToolCallEnd
from fiduciary.receivables import LineItem
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect
from tests.waiting import eventually

from .anvil import ROOT, rpc
from .conftest import PASSPHRASE, ChainSetup
from .onchain import TRANSFER_TOPIC, token_balance
from .paying import funded_payer, pay, topic

pytestmark = pytest.mark.slow


def incoming_logs(url: str, token: str, to: str) -> list[dict[str, Any]]:
    """The Transfer logs of ``token`` to ``to``, counted by raw JSON-RPC."""
    logs: list[dict[str, Any]] = rpc(
        url,
        "eth_getLogs",
        {"address": token, "fromBlock": "0x0", "toBlock": "latest",
         "topics": [TRANSFER_TOPIC, None, topic(to)]},
    )  # fmt: skip
    return logs


async def test_a_link_made_through_the_gates_is_paid_once_by_its_exact_transfer(
    chain: ChainSetup, tmp_path: Path
) -> None:
    wallet = await ChainWallet.connect(chain.config, chain.signer(), SQLiteIntentBook(chain.db))
    store = await SQLiteStore.open(chain.db)
    books = open_receivables(wallet, chain.db)
    try:
        script = Script(
            "link",
            [
                ToolCalls([Call("create_payment_link",
                                {"asset": "USDC", "amount": "25", "memo": "lunch"})]),
                Reply("made"),
            ],
        )  # fmt: skip
        agent = Agent(
            model=ScriptedModel([script]),
            capabilities=chain_capabilities(wallet, receivables=books),
            store=store,
            policy=Policy(),
            authorize=allow_all,
        )
        events = await collect(agent.run("a link for 25 USDC", principal="alice"))
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        assert pending.description.startswith("Create a payment link asking for 25 USDC on chain")
        await agent.approve(pending.approval_id, by="alice", confirm_amount=pending.amount_usd)
        (end,) = [
            e for e in await collect(agent.resume(events[0].run_id)) if isinstance(e, ToolCallEnd)
        ]
        assert not end.is_error, end.output
        link = json.loads(end.output.split("\n\n")[0])
        assert link["status"] == "open"
        assert link["pay_to"] == wallet.address
        exact = Decimal(link["pay_exactly"])
        assert Decimal(25) < exact < Decimal("25.01")  # the tag: below the cent
        reference = link["reference"]
        first_block = books.cursor()
        assert first_block is not None

        payer = await funded_payer(wallet, chain.url, Decimal(200))
        payer_address = str(Account.from_key(payer).address)
        watcher = PaymentWatcher(wallet.w3, chain.config, books)
        before = token_balance(chain.url, chain.config.token, wallet.address)

        # another token at the same address of the same exact amount: never seen as paying it
        other_key = secrets.token_bytes(32)
        write_keystore(tmp_path / "other.json", other_key, PASSPHRASE, iterations=2)
        rpc(chain.url, "anvil_setBalance", Account.from_key(other_key).address, hex(10**19))
        other_signer = load_keystore(tmp_path / "other.json", passphrase_file=chain.passphrase_file)
        other = await deploy(chain.url, other_signer, mint=Decimal(1000))
        pay(chain.url, other.token, other_key, wallet.address, exact)
        # the exact amount of the right token, to another address: not the wallet's payment
        elsewhere = str(Account.from_key(secrets.token_bytes(32)).address)
        pay(chain.url, chain.config.token, payer, elsewhere, exact)
        # the asked amount without its reference: no link asks it
        plain = pay(chain.url, chain.config.token, payer, wallet.address, Decimal(25))
        found = await watcher.poll()
        assert [(f.outcome, f.tx_hash) for f in found] == [("unmatched", plain)]
        assert books.get(reference, at=agent.clock.now()).status == "open"

        paid = pay(chain.url, chain.config.token, payer, wallet.address, exact)
        found = await watcher.poll()
        assert [(f.outcome, f.reference, f.tx_hash) for f in found] == [("paid", reference, paid)]
        now = books.get(reference, at=agent.clock.now())
        assert (now.status, now.paid_digest, now.paid_by) == ("paid", paid, payer_address)
        # counted on the chain: the wallet holds what arrived, and two Transfers reached it
        after = token_balance(chain.url, chain.config.token, wallet.address)
        assert after - before == Decimal(25) + exact
        assert token_balance(chain.url, chain.config.token, elsewhere) == exact
        logs = incoming_logs(chain.url, chain.config.token, wallet.address)
        assert paid in [log["transactionHash"] for log in logs]

        # the same logs read again (a cursor moved back, a replay): nothing new, paid once
        rewound = SQLiteReceivables(
            chain.db, chain_id=31337, token=books.token, recipient=books.recipient, decimals=6
        )
        replayed = await watcher._logs(first_block, await wallet.w3.eth.block_number)
        assert len(replayed) == len(logs) - 1  # all but the mint, made before the link
        assert rewound.record(replayed, next_block=0, at=agent.clock.now()) == []
        assert [f.outcome for f in books.incoming()] == ["unmatched", "paid"]

        # paid again, then a link cancelled and paid late: both reported, neither swallowed
        again = pay(chain.url, chain.config.token, payer, wallet.address, exact)
        (found_again,) = await watcher.poll()
        assert (found_again.outcome, found_again.reference) == ("again", reference)
        assert books.get(reference, at=agent.clock.now()).payments_after_close == [again]
    finally:
        await store.close()
        await wallet.close()


async def test_a_payment_after_cancel_is_reported_not_counted(
    chain: ChainSetup, backend: tuple[str, str]
) -> None:
    wallet = await ChainWallet.connect(chain.config, chain.signer(), SQLiteIntentBook(chain.db))
    kind, where = backend
    books = (
        open_receivables(wallet, where)
        if kind == "sqlite"
        else open_receivables(wallet, postgres=where)
    )
    assert (
        type(books).__name__
        == {"sqlite": "SQLiteReceivables", "postgres": "PostgresReceivables"}[kind]
    )
    try:
        start = await wallet.w3.eth.block_number + 1
        made = [
            books.create("alice", "link", asset="USDC", amount=Decimal(10), memo="", due=None,
                         line_items=[], key=f"k{i}", at=_now(), from_block=start)
            for i in range(2)
        ]  # fmt: skip
        assert made[0].pay_exactly != made[1].pay_exactly  # same amount, other references
        cancelled = books.cancel("alice", "link", made[0].reference, at=_now())
        assert cancelled.status == "cancelled"
        payer = await funded_payer(wallet, chain.url, Decimal(50))
        late = pay(chain.url, chain.config.token, payer, wallet.address, made[0].pay_exactly)
        (found,) = await PaymentWatcher(wallet.w3, chain.config, books).poll()
        assert (found.outcome, found.reference, found.tx_hash) == ("late", made[0].reference, late)
        still = books.get(made[0].reference, at=_now())
        assert (still.status, still.payments_after_close) == ("cancelled", [late])
        assert books.get(made[1].reference, at=_now()).status == "open"
    finally:
        await wallet.close()


def _now() -> datetime:
    return datetime.now(UTC)


def _item() -> LineItem:
    return LineItem(description="design work", quantity=Decimal(3), unit_price=Decimal("12.5"))


async def test_a_payment_counts_once_it_is_confirmations_deep(chain: ChainSetup) -> None:
    config = replace(chain.config, confirmations=3)  # the watcher's; the wallet's send waits 1
    wallet = await ChainWallet.connect(chain.config, chain.signer(), SQLiteIntentBook(chain.db))
    books = open_receivables(wallet, chain.db)
    try:
        start = await wallet.w3.eth.block_number + 1
        link = books.create("alice", "link", asset="USDC", amount=Decimal(5), memo="", due=None,
                            line_items=[], key="k", at=_now(), from_block=start)  # fmt: skip
        payer = await funded_payer(wallet, chain.url, Decimal(10))
        paid = pay(chain.url, config.token, payer, wallet.address, link.pay_exactly)
        watcher = PaymentWatcher(wallet.w3, config, books)
        assert await watcher.poll() == []  # mined, 1 confirmation of the 3 asked
        assert books.get(link.reference, at=_now()).status == "open"
        rpc(chain.url, "anvil_mine", "0x2")
        (found,) = await watcher.poll()
        assert (found.outcome, found.tx_hash) == ("paid", paid)
        assert books.get(link.reference, at=_now()).status == "paid"
    finally:
        await wallet.close()


def _watch(chain: ChainSetup, address: str, kill: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "FIDUCIARY_CHAIN_KILL_AT"}
    if kill is not None:
        env["FIDUCIARY_CHAIN_KILL_AT"] = kill
    return subprocess.run(
        [sys.executable, "-m", "tests.chain.watcher", str(chain.config_path), str(chain.db),
         address],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _cli_watch(chain: ChainSetup, address: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fiduciary", "chain", "watch", "--once", "--address", address,
         "--config", str(chain.config_path), "--db", str(chain.db)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "FIDUCIARY_CHAIN_RPC"},
    )  # fmt: skip


def test_a_watcher_killed_mid_way_and_started_again_pays_each_link_once(
    chain: ChainSetup,
) -> None:
    async def setup() -> tuple[str, list[Any], bytes]:
        wallet = await ChainWallet.connect(chain.config, chain.signer(), SQLiteIntentBook(chain.db))
        try:
            books = open_receivables(wallet, chain.db)
            start = await wallet.w3.eth.block_number + 1
            links = [
                books.create("alice", "invoice", asset="USDC", amount=None, memo="", due=None,
                             line_items=[_item()], key=f"inv{i}", at=_now(), from_block=start)
                for i in range(2)
            ]  # fmt: skip
            payer = await funded_payer(wallet, chain.url, Decimal(200))
            return wallet.address, links, payer
        finally:
            await wallet.close()

    address, links, payer = asyncio.run(setup())
    books = SQLiteReceivables(
        chain.db,
        chain_id=31337,
        token=to_checksum_address(chain.config.token),
        recipient=address,
        decimals=6,
    )
    first = pay(chain.url, chain.config.token, payer, address, links[0].pay_exactly)
    killed = _watch(chain, address, "read")  # the logs read, nothing recorded
    assert killed.returncode == -9, killed.stderr
    assert books.get(links[0].reference, at=_now()).status == "open"
    again = _watch(chain, address, None)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == [["paid", links[0].reference, first]]

    second = pay(chain.url, chain.config.token, payer, address, links[1].pay_exactly)
    killed = _watch(chain, address, "recorded")  # committed, killed before it said so
    assert killed.returncode == -9, killed.stderr
    cli = _cli_watch(chain, address)  # the next watcher: the command itself
    assert cli.returncode == 0, cli.stderr
    assert "paid" not in cli.stdout  # nothing left to record: the killed one had
    for link, tx in zip(links, (first, second), strict=True):
        now = books.get(link.reference, at=_now())
        assert (now.status, now.paid_digest) == ("paid", tx)
    assert [f.outcome for f in books.incoming()] == ["paid", "paid"]
    logs = incoming_logs(chain.url, chain.config.token, address)
    assert sum(int(log["data"], 16) for log in logs) == int(
        (links[0].pay_exactly + links[1].pay_exactly + 1000).scaleb(6)
    )  # the mint at deploy, then the two payments: on chain, each once
    assert token_balance(chain.url, chain.config.token, address) == Decimal(1000) - 200 + (
        links[0].pay_exactly + links[1].pay_exactly
    )

    late = pay(chain.url, chain.config.token, payer, address, links[0].pay_exactly)
    cli = _cli_watch(chain, address)
    assert cli.returncode == 0, cli.stderr
    assert f"AGAIN: {links[0].reference} was already paid" in cli.stdout
    assert late in cli.stdout


async def test_the_watch_command_keeps_watching_and_reports_each_payment(
    chain: ChainSetup, tmp_path: Path
) -> None:
    wallet = await ChainWallet.connect(chain.config, chain.signer(), SQLiteIntentBook(chain.db))
    books = open_receivables(wallet, chain.db)
    out = tmp_path / "watch.out"
    try:
        start = await wallet.w3.eth.block_number + 1
        link = books.create("alice", "link", asset="USDC", amount=Decimal(3), memo="", due=None,
                            line_items=[], key="k", at=_now(), from_block=start)  # fmt: skip
        payer = await funded_payer(wallet, chain.url, Decimal(10))
        with out.open("w") as sink:
            watching = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "fiduciary", "chain", "watch", "--address",
                wallet.address, "--config", str(chain.config_path), "--db", str(chain.db),
                "--interval", "0.2",
                cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
                env={k: v for k, v in os.environ.items() if k != "FIDUCIARY_CHAIN_RPC"},
            )  # fmt: skip
            try:
                paid = pay(chain.url, chain.config.token, payer, wallet.address, link.pay_exactly)
                await eventually(
                    lambda: paid in out.read_text(), what="the payment reported", timeout=60,
                    state=out.read_text,
                )  # fmt: skip
            finally:
                watching.terminate()
                await asyncio.wait_for(watching.wait(), timeout=30)
        assert f"paid {link.reference}: {link.pay_exactly} USDC from " in out.read_text()
        assert books.get(link.reference, at=_now()).status == "paid"
    finally:
        await wallet.close()

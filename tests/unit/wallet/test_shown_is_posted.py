"""Every figure of the demo's balance tables is what the ledger's postings hold: interest and
rewards accrued since the last posting are shown apart, never added in."""

from __future__ import annotations

import re
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from fiduciary.server.schemas import Balances
from fiduciary.server.served import wallet_agent
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.wallet import PaperWallet
from fiduciary.wallet.assets import ASSETS
from fiduciary.wallet.demo import DEMO_PRINCIPAL
from tests.waiting import wait_for

from ..cli.support import fiduciary

pytestmark = pytest.mark.timeout(300)

BOOKS = ("available", "savings", "debt", "rewards")
Books = dict[tuple[str, str], Decimal]


def posted(db: Path) -> Books:
    """(asset, book) → the sum of the demo principal's postings (debt as a positive amount)."""
    connection = sqlite3.connect(db)
    try:
        rows = connection.execute(
            "SELECT asset, book, SUM(units) FROM wallet_postings WHERE owner = ? "
            "GROUP BY asset, book",
            (DEMO_PRINCIPAL,),
        ).fetchall()
    finally:
        connection.close()
    books = {(a, b): ASSETS[a].from_units(int(u)) for a, b, u in rows}
    return {(a, b): -v if b == "debt" else v for (a, b), v in books.items() if v}


def shown(stdout: str, title: str) -> Books:
    """(asset, book) → the figure the table titled ``title`` shows (its "-" cells left out)."""
    table = stdout[stdout.index(title) :]
    table = table[: table.index("total $")]
    figures: Books = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) != 6 or cells[0] not in ASSETS:
            continue  # a border, the header, or a row of changes
        for book, cell in zip(BOOKS, cells[1:5], strict=True):
            if cell != "-":
                figure = cell.split(" (")[0]  # a change since before may follow
                figures[(cells[0], book)] = Decimal(figure.replace(",", ""))
    assert figures, table
    return figures


def accrued_rewards(db: Path) -> Decimal:
    with PaperWallet(db) as wallet:
        return wallet.positions(DEMO_PRINCIPAL).accrual.rewards


def wait_for_accrued_rewards(db: Path) -> None:
    """Until some rewards accrued on the savings since the last write (unposted): a condition,
    polled, bounded."""
    wait_for(lambda: accrued_rewards(db) != 0, what="rewards to accrue", timeout=60)


def test_the_demos_tables_show_the_ledger_and_the_accrual_apart(tmp_path: Path) -> None:
    db = tmp_path / "demo.sqlite3"
    first = fiduciary("demo", "--yes", "--db", db, columns=200)
    assert first.returncode == 0, first.stderr
    assert shown(first.stdout, "Balances after") == posted(db)
    wait_for_accrued_rewards(db)
    before = posted(db)

    again = fiduciary("demo", "--yes", "--db", db, columns=200)

    assert again.returncode == 0, again.stderr
    assert shown(again.stdout, "Balances before") == before  # not the accrual added in
    said = " ".join(again.stdout.split())
    # interest on savings may be listed before the rewards, once enough time has passed
    accrued = re.search(
        r"not in the ledger yet \(posted by the next write\): ([^.]*(?:\.\d+[^.]*)*)\.", said
    )
    assert accrued is not None, said
    assert re.search(r"(?:^|, )[\d.]+ SUI of rewards$", accrued.group(1)), accrued.group(1)
    assert shown(again.stdout, "Balances after") == posted(db)


async def test_the_web_consoles_balances_are_the_ledgers_and_the_accrual_apart(
    tmp_path: Path,
) -> None:
    db = tmp_path / "demo.sqlite3"
    assert fiduciary("demo", "--yes", "--db", db).returncode == 0
    wait_for_accrued_rewards(db)
    store = SQLiteStore(db)
    try:
        hook = wallet_agent(store).balances
        assert hook is not None
        shown_now = hook(DEMO_PRINCIPAL)
    finally:
        await store.close()
    assert isinstance(shown_now, Balances)
    books = {
        (key.split(" ")[0], key.split(" ")[1] if " " in key else "available"): amount
        for key, amount in shown_now.balances.items()
        if "accrued" not in key
    }
    assert books == posted(db)
    assert shown_now.balances["SUI rewards accrued (not posted)"] > 0

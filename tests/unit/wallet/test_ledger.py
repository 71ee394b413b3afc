"""The ledger: balanced, append-only, chained, exact, once per key."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from fiduciary import ManualClock
from fiduciary.exceptions import StoreError
from fiduciary.wallet import Deposit, PaperWallet
from fiduciary.wallet.errors import LedgerError, WalletError
from fiduciary.wallet.ledger import Ledger, Sign, base58

AT = datetime(2026, 1, 1, tzinfo=UTC)


def rule(owner: str, book: str) -> Sign:
    return "free" if owner.startswith("@") else "nonneg"


@pytest.fixture
def ledger() -> Any:
    opened = Ledger(sign_rule=rule)
    yield opened
    opened.close()


def fund(ledger: Ledger, key: str, who: str, amount: str) -> None:
    with ledger.batch() as batch:
        draft = batch.draft(key=key, request_digest=key, kind="fund", principal=who, at=AT)
        draft.move("USDC", Decimal(amount), ("@faucet", "grants"), (who, "available"))
        draft.seal(f"fund {who}")


Entry = tuple[str, str, Any]  # owner, book, amount (USDC)


def post(ledger: Ledger, *entries: Entry, at: datetime = AT, key: str = "k") -> None:
    """One transaction of USDC legs, sealed (and so checked)."""
    with ledger.batch() as batch:
        draft = batch.draft(key=key, request_digest=key, kind="x", principal="ann", at=at)
        for owner, book, amount in entries:
            draft.post(owner, book, "USDC", amount)
        draft.seal("test")


def test_base58_matches_the_known_encoding() -> None:
    assert base58(b"hello world") == "StV1DL6CwTryKyV"
    assert base58(b"\0\0\x01") == "112"


def test_a_balanced_transaction_is_posted_and_balances_are_its_sums(ledger: Ledger) -> None:
    fund(ledger, "k1", "ann", "10.5")
    fund(ledger, "k2", "ann", "0.25")
    with ledger.batch(commit=False) as view:
        assert view.balance("ann", "available", "USDC") == Decimal("10.75")
        assert view.balance("@faucet", "grants", "USDC") == Decimal("-10.75")
        assert view.balances("ann") == {("available", "USDC"): Decimal("10.75")}
    report = ledger.verify()
    assert report.ok, report.problems
    assert (report.transactions, report.postings) == (2, 4)


def test_an_unbalanced_transaction_is_refused_and_nothing_is_written(ledger: Ledger) -> None:
    with pytest.raises(LedgerError, match="do not balance"):
        post(ledger, ("ann", "available", Decimal("5")))
    assert ledger.verify().transactions == 0


def test_a_balance_that_must_not_go_negative_cannot(ledger: Ledger) -> None:
    fund(ledger, "k1", "ann", "1")
    with pytest.raises(LedgerError, match="ann/available at -1"):
        post(ledger, ("ann", "available", Decimal("-2")), ("bob", "available", Decimal("2")))
    with ledger.batch(commit=False) as view:
        assert view.balance("ann", "available", "USDC") == Decimal("1")
        assert view.balance("bob", "available", "USDC") == Decimal("0")


@pytest.mark.parametrize("amount", [1.5, float("inf"), True])
def test_a_float_never_reaches_the_ledger(ledger: Ledger, amount: Any) -> None:
    with pytest.raises(LedgerError):
        post(ledger, ("ann", "available", amount), ("@faucet", "grants", -Decimal(1)))
    assert ledger.verify().transactions == 0


def test_an_amount_finer_than_the_asset_is_refused(ledger: Ledger) -> None:
    tiny = Decimal("0.0000001")
    with pytest.raises(LedgerError, match="finer than 6"):
        post(ledger, ("ann", "available", tiny), ("@faucet", "grants", -tiny))


def test_a_key_posts_once(ledger: Ledger) -> None:
    fund(ledger, "same", "ann", "1")
    with pytest.raises(WalletError) as caught:
        fund(ledger, "same", "ann", "1")
    assert caught.value.code == "idempotency_conflict"
    assert ledger.verify().transactions == 1


def test_the_schema_itself_refuses_a_second_posting_under_a_key(ledger: Ledger) -> None:
    fund(ledger, "k1", "ann", "1")
    conn = ledger.read().conn
    insert_tx = (
        "INSERT INTO wallet_transactions (digest, prev_digest, idempotency_key, request_digest, "
        "kind, principal, label, at) VALUES (?, '', ?, 'r', 'x', 'ann', 'x', '2026')"
    )
    with pytest.raises(sqlite3.IntegrityError, match="idempotency_key"):
        conn.execute(insert_tx, ("d-dup", "k1"))
    conn.execute("BEGIN")
    try:
        tx_id = conn.execute(insert_tx, ("d-new", "k-new")).lastrowid
        with pytest.raises(sqlite3.IntegrityError, match="idempotency_key"):
            conn.execute(
                "INSERT INTO wallet_postings (tx_id, leg, idempotency_key, owner, book, asset, "
                "units, amount) VALUES (?, 1, 'k1', 'ann', 'available', 'USDC', 1, '0.000001')",
                (tx_id,),
            )
    finally:
        conn.execute("ROLLBACK")
    assert ledger.verify().transactions == 1


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE wallet_postings SET units = 0",
        "DELETE FROM wallet_postings",
        "UPDATE wallet_transactions SET label = 'x'",
        "DELETE FROM wallet_transactions",
    ],
)
def test_the_ledger_is_append_only(ledger: Ledger, sql: str) -> None:
    fund(ledger, "k1", "ann", "1")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        ledger.read().conn.execute(sql)


def test_verify_finds_tampering(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path, sign_rule=rule)
    fund(ledger, "k1", "ann", "1")
    fund(ledger, "k2", "ann", "2")
    ledger.close()
    raw = sqlite3.connect(path)
    raw.execute("DROP TRIGGER wallet_postings_no_update")
    raw.execute("UPDATE wallet_postings SET amount = '5.000000', units = 5000000 WHERE leg = 2")
    raw.commit()
    raw.close()
    reopened = Ledger(path, sign_rule=rule)
    problems = reopened.verify().problems
    reopened.close()
    assert any("does not match its body" in p for p in problems)
    assert any("sum to" in p for p in problems)


def test_digests_chain_each_transaction_to_the_previous(ledger: Ledger) -> None:
    fund(ledger, "k1", "ann", "1")
    fund(ledger, "k2", "ann", "1")
    first, second = ledger.read().transactions(newest_first=False)
    assert first.prev_digest == ""
    assert second.prev_digest == first.digest
    assert ledger.verify().head == second.digest


def test_a_preview_batch_leaves_nothing(ledger: Ledger) -> None:
    with ledger.batch(commit=False) as batch:
        draft = batch.draft(key="k", request_digest="k", kind="x", principal="ann", at=AT)
        draft.move("USDC", Decimal("1"), ("@faucet", "g"), ("ann", "available"))
        draft.seal("previewed")
        assert batch.balance("ann", "available", "USDC") == Decimal("1")
    assert ledger.verify().transactions == 0


def test_a_draft_left_open_is_a_bug(ledger: Ledger) -> None:
    with pytest.raises(LedgerError, match="neither sealed nor dropped"), ledger.batch() as batch:
        batch.draft(key="k", request_digest="k", kind="x", principal="ann", at=AT)
    assert ledger.verify().transactions == 0


def test_naive_times_and_closed_ledgers_are_refused(ledger: Ledger) -> None:
    one = Decimal(1)
    with pytest.raises(LedgerError, match="timezone-aware"):
        post(ledger, ("ann", "available", one), ("@f", "g", -one), at=datetime(2026, 1, 1))
    ledger.close()
    with pytest.raises(StoreError, match="closed"), ledger.batch():
        pass


def test_a_wallet_file_is_shared_and_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "wallet.sqlite3"
    clock = ManualClock()
    with PaperWallet(path, clock=clock) as first, PaperWallet(path, clock=clock) as second:
        first.execute("ann", Deposit("USDC", Decimal("20")), key="k1")
        # the other connection (another process, say) sees the posting and its key
        replay = second.execute("ann", Deposit("USDC", Decimal("20")), key="k1")
        assert replay.replayed
        assert second.positions("ann").savings["USDC"] == Decimal("1520")
    with PaperWallet(path, clock=clock) as again:
        assert again.positions("ann").savings["USDC"] == Decimal("1520")
        assert again.verify().ok

"""PaperWallet's writes: each does what it says, refuses what it cannot do, posts once."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from fiduciary import ConfigurationError, ManualClock
from fiduciary.wallet import Deposit, PaperWallet, Send, Swap, WalletConfig
from fiduciary.wallet.addresses import address_of
from fiduciary.wallet.assets import get_asset
from fiduciary.wallet.errors import LedgerError, WalletError

from .conftest import available, saved, small_config, tx_count

EXTERNAL = "0x" + "ab" * 20


def refused(wallet: PaperWallet, code: str, op: Any, who: str = "ann") -> str:
    wallet.open(who)
    before = tx_count(wallet)
    with pytest.raises(WalletError) as caught:
        wallet.execute(who, op, key="refused")
    assert caught.value.code == code, caught.value.message
    assert tx_count(wallet) == before  # nothing posted
    return caught.value.message


# --- opening ------------------------------------------------------------------------------------


def test_a_wallet_opens_once_with_the_starting_balances(wallet: PaperWallet) -> None:
    wallet.open("ann")
    wallet.open("ann")
    report = wallet.balances("ann")
    assert report.address == address_of("ann") == wallet.address_of("ann")
    assert report.whose == "yours"
    assert {h.asset: h.amount for h in report.available} == {
        "ETH": Decimal("0.5"),
        "SUI": Decimal("150"),
        "USDC": Decimal("1000"),
    }
    assert {h.asset: h.amount for h in report.savings} == {"USDC": Decimal("1500")}
    assert [e.kind for e in wallet.history("ann")] == ["open"]


def test_system_account_names_cannot_be_principals(wallet: PaperWallet) -> None:
    for bad in ("@lending", "@pool:SUI-USDC", ""):
        with pytest.raises(ConfigurationError):
            wallet.open(bad)
    with pytest.raises(ValueError, match="give a principal or an address"):
        wallet.balances()


def test_addresses_are_stable_and_distinct() -> None:
    assert address_of("ann") == address_of("ann")
    assert address_of("ann") != address_of("bob")
    assert len(address_of("ann")) == 42
    assert address_of("ann").startswith("0x")


def test_a_float_in_the_configuration_is_refused() -> None:
    with pytest.raises(LedgerError, match="float"):
        WalletConfig(starting_balances={"USDC": 10.5})  # type: ignore[dict-item]


# --- deposits -----------------------------------------------------------------------------------


def test_deposit(wallet: PaperWallet) -> None:
    receipt = wallet.execute("ann", Deposit("usdc", Decimal("20")), key="k1")
    assert receipt.kind == "save"
    assert receipt.label == "Saved 20.00 USDC at 4.80% APY"
    assert {(c.book, c.amount) for c in receipt.changes} == {
        ("available", Decimal("-20")),
        ("savings", Decimal("20")),
    }
    assert {(c.book, c.amount) for c in receipt.balances} == {
        ("available", Decimal("980")),
        ("savings", Decimal("1520")),
    }
    assert not receipt.replayed


@pytest.mark.parametrize(
    ("op", "code"),
    [
        (Deposit("USDC", Decimal("1000.000001")), "insufficient_funds"),
        (Deposit("DOGE", Decimal("1")), "unknown_asset"),
        (Deposit("ETH", Decimal("0.1")), "unsupported_asset"),
        (Deposit("USDC", Decimal("0")), "invalid_amount"),
        (Deposit("USDC", Decimal("1.0000001")), "invalid_amount"),
        (Deposit("USDC", 1.5), "invalid_amount"),  # type: ignore[arg-type]
    ],
)
def test_deposit_refusals(wallet: PaperWallet, op: Deposit, code: str) -> None:
    refused(wallet, code, op)


# --- sends --------------------------------------------------------------------------------------


def test_send_to_an_external_address(wallet: PaperWallet) -> None:
    receipt = wallet.execute(
        "ann", Send(EXTERNAL.upper().replace("0X", "0x"), "USDC", Decimal("75"), "rent"), key="k1"
    )
    assert receipt.label == "Sent 75.00 USDC to 0xabab…abab"
    assert receipt.details["to"] == EXTERNAL
    assert available(wallet, "ann", "USDC") == Decimal("925")
    outside = wallet.balances(address=EXTERNAL)
    assert outside.whose == "an external address"
    assert [(h.asset, h.amount) for h in outside.available] == [("USDC", Decimal("75"))]


def test_send_to_another_principal_credits_them(wallet: PaperWallet) -> None:
    wallet.open("bob")
    wallet.execute("ann", Send(address_of("bob"), "SUI", Decimal("2.5")), key="k1")
    assert available(wallet, "bob", "SUI") == Decimal("152.5")
    received = wallet.history("bob")[0]
    assert received.kind == "send (received)"
    assert [(c.book, c.asset, c.amount) for c in received.changes] == [
        ("available", "SUI", Decimal("2.5"))
    ]
    view = wallet.balances("ann", address=address_of("bob"))
    assert view.whose == "another paper wallet"


def test_send_to_a_contact_by_name(wallet: PaperWallet) -> None:
    wallet.save_contact("ann", "Land Lord", EXTERNAL, key="c1")
    receipt = wallet.execute("ann", Send("land lord", "USDC", Decimal("1")), key="k1")
    assert receipt.details["contact"] == "Land Lord"
    assert receipt.label.endswith("(Land Lord)")


@pytest.mark.parametrize(
    ("to", "amount", "code"),
    [
        ("Dave", "1", "unknown_recipient"),
        ("0x1234", "1", "invalid_address"),
        ("0x" + "g" * 40, "1", "invalid_address"),
        (address_of("ann"), "1", "own_address"),
        (EXTERNAL, "1000.01", "insufficient_funds"),
    ],
)
def test_send_refusals(wallet: PaperWallet, to: str, amount: str, code: str) -> None:
    refused(wallet, code, Send(to, "USDC", Decimal(amount)))


def test_a_memo_is_short(wallet: PaperWallet) -> None:
    refused(wallet, "invalid_amount", Send(EXTERNAL, "USDC", Decimal("1"), "x" * 141))


# --- swaps --------------------------------------------------------------------------------------


def test_swap_with_a_quote(wallet: PaperWallet, clock: ManualClock) -> None:
    quote = wallet.quote("ann", "USDC", "SUI", Decimal("15"))
    clock.advance(10)
    receipt = wallet.execute(
        "ann", Swap("USDC", "SUI", Decimal("15"), Decimal("0.01"), quote.quote_id), key="k1"
    )
    out = Decimal(receipt.details["amount_out"])
    min_out = get_asset("SUI").quantize(quote.amount_out * Decimal("0.99"))
    assert Decimal(receipt.details["min_out"]) == min_out
    assert out >= min_out
    assert available(wallet, "ann", "SUI") == Decimal("150") + out
    assert available(wallet, "ann", "USDC") == Decimal("985")
    assert receipt.details["quote_id"] == quote.quote_id


def test_an_expired_quote_is_refused(wallet: PaperWallet, clock: ManualClock) -> None:
    quote = wallet.quote("ann", "USDC", "SUI", Decimal("15"))
    clock.advance(61)
    message = refused(
        wallet, "quote_expired", Swap("USDC", "SUI", Decimal("15"), None, quote.quote_id)
    )
    assert "ask for a new quote" in message


def test_a_quote_binds_its_swap_and_its_principal(wallet: PaperWallet) -> None:
    quote = wallet.quote("ann", "USDC", "SUI", Decimal("15"))
    refused(wallet, "quote_mismatch", Swap("USDC", "SUI", Decimal("16"), None, quote.quote_id))
    refused(wallet, "quote_mismatch", Swap("USDC", "ETH", Decimal("15"), None, quote.quote_id))
    refused(
        wallet, "unknown_quote", Swap("USDC", "SUI", Decimal("15"), None, quote.quote_id), "bob"
    )
    refused(wallet, "unknown_quote", Swap("USDC", "SUI", Decimal("15"), None, "q_nope"))


def test_slippage_is_enforced(wallet: PaperWallet, clock: ManualClock) -> None:
    # find a moment when SUI gets dearer within the quote's life: fewer SUI than quoted
    for _ in range(200):
        start = wallet.price("SUI")
        clock.advance(30)
        if wallet.price("SUI") > start * Decimal("1.0001"):
            clock.advance(-30)
            break
    else:  # pragma: no cover - the seeded path has such moments
        pytest.fail("no rising minute in the price path")
    quote = wallet.quote("ann", "USDC", "SUI", Decimal("100"))
    clock.advance(30)
    message = refused(
        wallet, "slippage_exceeded", Swap("USDC", "SUI", Decimal("100"), Decimal(0), quote.quote_id)
    )
    assert "nothing was swapped" in message
    receipt = wallet.execute(
        "ann", Swap("USDC", "SUI", Decimal("100"), Decimal("0.01"), quote.quote_id), key="k1"
    )
    assert Decimal(receipt.details["amount_out"]) < quote.amount_out


def test_swap_limits(wallet: PaperWallet) -> None:
    refused(wallet, "slippage_limit", Swap("USDC", "SUI", Decimal("1"), Decimal("0.06")))
    refused(wallet, "insufficient_funds", Swap("USDC", "SUI", Decimal("1000.01")))
    refused(wallet, "same_asset", Swap("USDC", "usdc", Decimal("1")))
    refused(wallet, "unknown_asset", Swap("USDC", "DOGE", Decimal("1")))


def test_a_swap_that_moves_the_pool_too_far_is_refused(clock: ManualClock) -> None:
    with PaperWallet(
        clock=clock, config=small_config(starting_balances={"USDC": Decimal("90000")})
    ) as wallet:
        message = refused(
            wallet, "price_impact", Swap("USDC", "NAVX", Decimal("50000"), Decimal("0.05"))
        )
        assert "swap a smaller amount" in message


# --- idempotency --------------------------------------------------------------------------------


def test_a_replayed_key_returns_the_receipt_and_posts_nothing(wallet: PaperWallet) -> None:
    first = wallet.execute("ann", Send(EXTERNAL, "USDC", Decimal("10")), key="k1")
    count = tx_count(wallet)
    again = wallet.execute("ann", Send(EXTERNAL, "USDC", Decimal("10")), key="k1")
    assert again.replayed
    assert again.digest == first.digest
    assert tx_count(wallet) == count
    assert available(wallet, "ann", "USDC") == Decimal("990")


def test_a_replay_succeeds_even_when_it_could_not_run_now(wallet: PaperWallet) -> None:
    wallet.execute("ann", Send(EXTERNAL, "USDC", Decimal("600")), key="k1")
    wallet.execute("ann", Send(EXTERNAL, "USDC", Decimal("400")), key="k2")
    again = wallet.execute("ann", Send(EXTERNAL, "USDC", Decimal("600")), key="k1")
    assert again.replayed
    assert available(wallet, "ann", "USDC") == Decimal("0")


def test_a_key_with_another_request_is_refused(wallet: PaperWallet) -> None:
    wallet.execute("ann", Send(EXTERNAL, "USDC", Decimal("10")), key="k1")
    for who, op in [
        ("ann", Send(EXTERNAL, "USDC", Decimal("11"))),
        ("bob", Send(EXTERNAL, "USDC", Decimal("10"))),
    ]:
        wallet.open(who)
        count = tx_count(wallet)
        with pytest.raises(WalletError) as caught:
            wallet.execute(who, op, key="k1")
        assert caught.value.code == "idempotency_conflict"
        assert tx_count(wallet) == count


def test_a_write_needs_a_key(wallet: PaperWallet) -> None:
    with pytest.raises(ValueError, match="idempotency key"):
        wallet.execute("ann", Deposit("USDC", Decimal("1")), key="")


# --- previews -----------------------------------------------------------------------------------


def test_a_preview_posts_nothing_and_says_what_would_happen(wallet: PaperWallet) -> None:
    wallet.open("ann")
    count = tx_count(wallet)
    preview = wallet.preview("ann", Deposit("USDC", Decimal("20")))
    assert preview.receipt.label == "Saved 20.00 USDC at 4.80% APY"
    assert preview.health_before.health_factor is None
    assert tx_count(wallet) == count
    assert saved(wallet, "ann", "USDC") == Decimal("1500")
    with pytest.raises(WalletError) as caught:
        wallet.preview("ann", Deposit("USDC", Decimal("5000")))
    assert caught.value.code == "insufficient_funds"


# --- contacts, history, explanations ------------------------------------------------------------


def test_contacts(wallet: PaperWallet) -> None:
    saved_once = wallet.save_contact(
        "ann", "  Bob  Smith ", EXTERNAL.upper().replace("0X", "0x"), key="c1"
    )
    assert (saved_once.name, saved_once.address) == ("Bob Smith", EXTERNAL)
    assert wallet.save_contact("ann", "bob smith", EXTERNAL, key="c2").name == "Bob Smith"
    with pytest.raises(WalletError) as taken:
        wallet.save_contact("ann", "Bob Smith", "0x" + "cd" * 20, key="c3")
    assert taken.value.code == "contact_exists"
    for name, address, code in [
        ("", EXTERNAL, "invalid_contact"),
        ("0xBob", EXTERNAL, "invalid_contact"),
        ("x" * 41, EXTERNAL, "invalid_contact"),
        ("Carol", "carol.sui", "invalid_address"),
    ]:
        with pytest.raises(WalletError) as caught:
            wallet.save_contact("ann", name, address, key=f"bad-{name}")
        assert caught.value.code == code
    wallet.save_contact("ann", "Alice", "0x" + "cd" * 20, key="c4")
    assert [c.name for c in wallet.contacts("ann")] == ["Alice", "Bob Smith"]
    assert wallet.contacts("bob") == []


def test_history_and_explain(wallet: PaperWallet, clock: ManualClock) -> None:
    wallet.open("ann")
    clock.advance(timedelta(days=30))
    receipt = wallet.execute("ann", Send(EXTERNAL, "USDC", Decimal("12.5"), "lunch"), key="k1")
    entries = wallet.history("ann", limit=1)
    assert [e.digest for e in entries] == [receipt.digest]
    assert wallet.history("ann", kind="open")[0].kind == "open"
    from fiduciary.wallet.reports import explain

    told = explain(wallet, "ann", receipt.digest[:8])
    assert told.verified
    assert told.summary[0] == "Sent 12.50 USDC to 0xabab…abab."
    assert f"Recipient: {EXTERNAL}." in told.summary
    assert "Memo: lunch." in told.summary
    assert any("supply interest" in line for line in told.summary)  # booked in the same tx
    assert {leg.account for leg in told.legs} >= {"you/available", EXTERNAL}
    for bad in ("abc", "zzzzzzzz"):
        with pytest.raises(WalletError) as caught:
            explain(wallet, "ann", bad)
        assert caught.value.code == "unknown_transaction"
    with pytest.raises(WalletError):
        explain(wallet, "bob", receipt.digest)  # not bob's

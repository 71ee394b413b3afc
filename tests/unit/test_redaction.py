"""Secrets never survive ``redact`` / ``redact_text``; ordinary data does."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from fiduciary.exceptions import ConfigurationError
from fiduciary.redaction import MAX_DEPTH, REDACTED, Redactor, redact, redact_text

# Realistic-looking (fake) credentials, one per shape.
OPENAI_KEY = "sk-proj-4fJ9kLmN2pQrStUvWxYz0123456789abcd"
ANTHROPIC_KEY = "sk-ant-api03-Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf9Ed8Cb7Aa-_xyz"
GITHUB_PAT_CLASSIC = "ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R"
GITHUB_OAUTH = "gho_16C7e42F292c6912E7710c838347Ae178B4a"
GITHUB_PAT_FINE = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123"
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SLACK_TOKEN = "xoxb-2048-1234567890-AbCdEfGhIjKlMnOpQrStUvWx"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
STRIPE_KEY = "sk_live_51HxYzAbCdEfGhIjKlMnOpQr"
PEM_BODY = "MIIEowIBAAKCAQEA7bq2v0Ew9k3XhR1sLq9pZ"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    f"{PEM_BODY}\n"
    "Qm9zcy1sZXZlbC1zZWNyZXQtbWF0ZXJpYWwtaGVyZQ==\n"
    "-----END RSA PRIVATE KEY-----"
)
BASIC_CREDENTIALS = "YWxpY2U6czNjcjN0LXBhc3M="  # base64("alice:s3cr3t-pass")
BEARER_TOKEN = "ya29.a0AfH6SMBx3kQ7-opaque_token"
PASSWORD = "hunter2-Correct-Horse"
MNEMONIC = "abandon ability able about above absent absorb abstract absurd abuse access accident"


# --------------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------------

SENSITIVE_KEYS = [
    "cookie",
    "Set-Cookie",
    "passkey",
    "passphrase",
    "token",
    "access_token",
    "refreshToken",
    "X-Auth-Token",
    "api_key",
    "apiKey",
    "X-API-Key",
    "api key",
    "Authorization",
    "proxy-authorization",
    "password",
    "db.password",
    "PASSWORD",
    "passwd",
    "secret",
    "webhook_secret",
    "private_key",
    "privateKey",
    "session_id",
    "sessionId",
    "JSESSIONID",
    "credential",
    "aws_credentials",
    "mnemonic",
    "seed_phrase",
    "Seed Phrase",
    "client_secret",
    "clientSecret",
    "signature",
    "tx-signature",
]


@pytest.mark.parametrize("key", SENSITIVE_KEYS)
@pytest.mark.parametrize(
    "value",
    ["opaque-value-123", 123456, 1.5, True, None, {"nested": "x"}, ["a", "b"], ""],
)
def test_sensitive_key_value_is_replaced_whatever_its_type(key: str, value: Any) -> None:
    assert redact({key: value, "amount": "12.50"}) == {key: REDACTED, "amount": "12.50"}


@pytest.mark.parametrize(
    "key",
    [
        "amount",
        "asset",
        "address",
        "to",
        "memo",
        "key",
        "public_key",
        "keyboard",
        "session",
        "signed",
        "description",
        "id",
    ],
)
def test_ordinary_keys_keep_their_values(key: str) -> None:
    value = {"inner": ["USDC", 12, 0.5, None, True]}
    assert redact({key: value}) == {key: value}


def test_nested_structures_and_lists() -> None:
    payload = {
        "result": {
            "accounts": [
                {"id": "acc_1", "balance": "100.00", "credentials": {"user": "u", "pw": "p"}},
                {"id": "acc_2", "balance": "5.25", "auth": [{"api_key": "k1"}, {"note": "ok"}]},
            ],
            "meta": ({"session_id": "s-1"}, {"page": 2}),
        }
    }
    assert redact(payload) == {
        "result": {
            "accounts": [
                {"id": "acc_1", "balance": "100.00", "credentials": REDACTED},
                {"id": "acc_2", "balance": "5.25", "auth": [{"api_key": REDACTED}, {"note": "ok"}]},
            ],
            "meta": ({"session_id": REDACTED}, {"page": 2}),
        }
    }


def test_redact_returns_a_copy_and_never_mutates_its_input() -> None:
    payload: dict[str, Any] = {"a": [{"password": "x"}], "b": {"c": "d"}}
    snapshot = json.dumps(payload)
    out = redact(payload)
    assert json.dumps(payload) == snapshot
    assert out is not payload
    assert out["b"] is not payload["b"]
    out["b"]["c"] = "changed"
    assert payload["b"]["c"] == "d"


# -- the ticker rule ---------------------------------------------------------------------------


@pytest.mark.parametrize("ticker", ["USDC", "ETH", "WETH", "BTC", "OP", "1INCH", "stETH", "USDC.e"])
def test_token_key_with_a_ticker_value_is_kept(ticker: str) -> None:
    assert redact({"token": ticker, "amount": "10"}) == {"token": ticker, "amount": "10"}
    assert redact({"Token": ticker}) == {"Token": ticker}


@pytest.mark.parametrize(
    "value",
    [
        GITHUB_PAT_CLASSIC,
        "dGhpcyBpcyBhIHNlY3JldA",
        "123456",  # an OTP is not a ticker
        "usdc",  # tickers are upper-case
        "ABCDEFGHIJKLM",  # 13 characters
        "USD C",
        REDACTED,
        {"symbol": "USDC", "address": "0xA0b8"},
        ["USDC", "ghp_notaticker"],
        42,
        None,
    ],
)
def test_token_key_with_anything_but_a_ticker_is_redacted(value: Any) -> None:
    assert redact({"token": value}) == {"token": REDACTED}


@pytest.mark.parametrize("key", ["access_token", "tokenizer", "token_secret", "refresh_token"])
def test_the_ticker_exemption_is_only_for_the_exact_key_token(key: str) -> None:
    assert redact({key: "USDC"}) == {key: REDACTED}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("token_symbol", "USDC"),
        ("token_address", "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
        ("token_in", "SUI"),
        ("tokenOut", "USDC"),
        ("token_decimals", 6),
        ("token_prices", {"SUI": "1.20"}),
        ("tokens", ["USDC", "SUI", "stETH"]),
    ],
)
def test_asset_descriptors_named_token_are_kept(key: str, value: Any) -> None:
    assert redact({key: value}) == {key: value}


def test_asset_descriptors_are_still_scrubbed_inside() -> None:
    leaked = {"token_list": [{"symbol": "USDC", "api_key": "k-123456789"}]}
    assert redact(leaked) == {"token_list": [{"symbol": "USDC", "api_key": REDACTED}]}


# -- the token-count rule ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "tokens",
        "input_tokens",
        "output_tokens",
        "max_tokens",
        "cache_read_input_tokens",
        "totalTokens",
        "token_count",
        "tokens_used",
        "max_tokens_to_sample",
    ],
)
def test_token_counts_are_kept(key: str) -> None:
    assert redact({key: 1234}) == {key: 1234}
    assert redact({key: None}) == {key: None}


@pytest.mark.parametrize("value", ["1234", "sk-something", True, 12.5, [1, 2], {"n": 1}])
def test_token_count_names_with_non_int_values_are_redacted(value: Any) -> None:
    assert redact({"max_tokens": value}) == {"max_tokens": REDACTED}


def test_count_names_do_not_shield_other_fragments() -> None:
    assert redact({"secret_tokens": 5, "usage": {"input_tokens": 7}}) == {
        "secret_tokens": REDACTED,
        "usage": {"input_tokens": 7},
    }


def test_model_usage_block_survives_untouched() -> None:
    usage = {
        "input_tokens": 1523,
        "output_tokens": 211,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 1024,
    }
    assert redact({"usage": usage}) == {"usage": usage}


# --------------------------------------------------------------------------------------------
# Free text
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Authorization schemes, also as headers.
        (f"Authorization: Bearer {BEARER_TOKEN}", "Authorization: Bearer [REDACTED]"),
        (f"authorization: bearer {JWT}", "authorization: bearer [REDACTED]"),
        (
            f"curl -H 'Authorization: Bearer {BEARER_TOKEN}' https://api.example.com/v1/accounts",
            "curl -H 'Authorization: Bearer [REDACTED]' https://api.example.com/v1/accounts",
        ),
        (f"sent header BEARER {BEARER_TOKEN} upstream", "sent header BEARER [REDACTED] upstream"),
        (f"Authorization: Basic {BASIC_CREDENTIALS}", "Authorization: Basic [REDACTED]"),
        (f"retry with basic {BASIC_CREDENTIALS} then", "retry with basic [REDACTED] then"),
        # URL user-info.
        (
            "DATABASE_URL=postgres://ledger:Sup3r-S3cret@db.internal:5432/ledger",
            "DATABASE_URL=postgres://[REDACTED]@db.internal:5432/ledger",
        ),
        (
            "clone https://x-access-token:abc123@github.com/acme/repo.git",
            "clone https://[REDACTED]@github.com/acme/repo.git",
        ),
        # Signed URLs: AWS SigV4.
        (
            "https://statements.s3.amazonaws.com/2024/05.pdf?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20240501%2Fus-east-1%2Fs3%2Faws4_request"
            "&X-Amz-Date=20240501T120000Z&X-Amz-Expires=900"
            "&X-Amz-Security-Token=IQoJb3JpZ2luX2VjEJr"
            "&X-Amz-SignedHeaders=host&X-Amz-Signature=9f2c4e7a1b",
            "https://statements.s3.amazonaws.com/2024/05.pdf?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            "&X-Amz-Credential=[REDACTED]&X-Amz-Date=20240501T120000Z&X-Amz-Expires=900"
            "&X-Amz-Security-Token=[REDACTED]&X-Amz-SignedHeaders=host&X-Amz-Signature=[REDACTED]",
        ),
        # Google Cloud Storage.
        (
            "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256"
            "&X-Goog-Credential=svc%40proj.iam.gserviceaccount.com%2F20240501"
            "&X-Goog-Signature=5a1f00",
            "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256"
            "&X-Goog-Credential=[REDACTED]&X-Goog-Signature=[REDACTED]",
        ),
        # CloudFront.
        (
            "https://d111111abcdef8.cloudfront.net/r.csv?Expires=1714560000"
            "&Policy=eyJTdGF0ZW1lbnQiOlt7fV19&Signature=Nql641NHEUkUaXQH~a&Key-Pair-Id=K2JCJMDEHXQW5F",
            "https://d111111abcdef8.cloudfront.net/r.csv?Expires=1714560000"
            "&Policy=[REDACTED]&Signature=[REDACTED]&Key-Pair-Id=[REDACTED]",
        ),
        # Azure SAS: the SAS fields go only because `sig` is there.
        (
            "https://acct.blob.core.windows.net/exports/tx.csv?sv=2022-11-02&ss=b&srt=o&sp=r"
            "&se=2024-05-01T13:00:00Z&st=2024-05-01T12:00:00Z&spr=https&sr=b&sig=AbC%2Bd%3D",
            "https://acct.blob.core.windows.net/exports/tx.csv?sv=[REDACTED]&ss=[REDACTED]"
            "&srt=[REDACTED]&sp=[REDACTED]&se=[REDACTED]&st=[REDACTED]&spr=[REDACTED]"
            "&sr=[REDACTED]&sig=[REDACTED]",
        ),
        # Generic credential parameters, in the query and in the fragment.
        (
            "https://api.example.com/v1/export?format=csv&api_key=k_live_123&page=2",
            "https://api.example.com/v1/export?format=csv&api_key=[REDACTED]&page=2",
        ),
        (
            "https://example.com/cb?apikey=abc&password=pw&secret=s&token=t0k3n-abc",
            "https://example.com/cb?apikey=[REDACTED]&password=[REDACTED]&secret=[REDACTED]"
            "&token=[REDACTED]",
        ),
        (
            "https://wallet.example/cb#access_token=ya29.abc&expires_in=3600",
            "https://wallet.example/cb#access_token=[REDACTED]&expires_in=3600",
        ),
        # `key` goes only next to a signature.
        (
            "https://maps.example.com/static?center=1,2&key=XYZ123&signature=c2lnbmF0dXJl",
            "https://maps.example.com/static?center=1,2&key=[REDACTED]&signature=[REDACTED]",
        ),
        # Key/value pairs in text.
        (
            '{"api_key": "abc123def456", "user": "alice"}',
            '{"api_key": "[REDACTED]", "user": "alice"}',
        ),
        (
            '{\\"password\\": \\"hunter2\\", \\"user\\": \\"alice\\"}',
            '{\\"password\\": \\"[REDACTED]\\", \\"user\\": \\"alice\\"}',
        ),
        ("{'client_secret': 'cs_123', 'id': 7}", "{'client_secret': '[REDACTED]', 'id': 7}"),
        ('{"pin_password": 4321, "n": 1}', '{"pin_password": "[REDACTED]", "n": 1}'),
        ("login?user=alice&password=hunter2&next=/", "login?user=alice&password=[REDACTED]&next=/"),
        ("PASSWORD=hunter2 ./deploy.sh", "PASSWORD=[REDACTED] ./deploy.sh"),
        ("secret: correct horse battery staple\nuser: alice", "secret: [REDACTED]\nuser: alice"),
        ("db:\n  password: p@ss w0rd!\n  port: 5432", "db:\n  password: [REDACTED]\n  port: 5432"),
        (f"  mnemonic: {MNEMONIC}", "  mnemonic: [REDACTED]"),
        (f"my seed phrase: {MNEMONIC}", "my seed phrase: [REDACTED]"),
        ("Cookie: sid=31d4d96e407aad42; theme=dark", "Cookie: [REDACTED]"),
        ("Your API key: 7f3a9c21e8b4", "Your API key: [REDACTED]"),
        ('note: "the password: hunter2"', 'note: "the password: [REDACTED]"'),
        # Well-known key shapes.
        (f"OPENAI_API={OPENAI_KEY}", "OPENAI_API=[REDACTED]"),
        (f"using {ANTHROPIC_KEY} for the call", "using [REDACTED] for the call"),
        (f"pushed with {GITHUB_PAT_CLASSIC}.", "pushed with [REDACTED]."),
        (f"oauth {GITHUB_OAUTH}", "oauth [REDACTED]"),
        (f"pat {GITHUB_PAT_FINE} ok", "pat [REDACTED] ok"),
        (f"aws key {AWS_KEY_ID} in us-east-1", "aws key [REDACTED] in us-east-1"),
        (f"slack {SLACK_TOKEN}", "slack [REDACTED]"),
        (f"session jwt {JWT} expired", "session jwt [REDACTED] expired"),
        (f"stripe {STRIPE_KEY}", "stripe [REDACTED]"),
        (f"key file:\n{PEM}\nend of file", "key file:\n[REDACTED]\nend of file"),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA",
            "[REDACTED]",
        ),
    ],
)
def test_text_shapes(text: str, expected: str) -> None:
    assert redact_text(text) == expected
    assert redact_text(expected) == expected


@pytest.mark.parametrize(
    "secret",
    [
        OPENAI_KEY,
        ANTHROPIC_KEY,
        GITHUB_PAT_CLASSIC,
        GITHUB_OAUTH,
        GITHUB_PAT_FINE,
        AWS_KEY_ID,
        SLACK_TOKEN,
        JWT,
        STRIPE_KEY,
    ],
)
@pytest.mark.parametrize(
    "template",
    [
        "{}",
        "value={}",
        "prefix {} suffix",
        '{{"result": "{}"}}',
        "(see: {})",
        "line one\n{}\nline three",
    ],
)
def test_key_shapes_are_found_anywhere(secret: str, template: str) -> None:
    out = redact_text(template.format(secret))
    assert secret not in out
    assert REDACTED in out


# -- false positives -------------------------------------------------------------------------

ORDINARY_TEXTS = [
    "Transfer 1,250.00 USDC from checking to Alice's savings account on Tuesday.",
    "The token price rose 5% today; the basic plan costs $10/month.",
    "Bearer bonds and bearer instruments are payable to whoever holds them.",
    "Sent 0.5 ETH to 0x742d35Cc6634C0532925a3b844Bc454e4438f44e in tx "
    "0x5c504ed432cb51138bcf09aa5e8a410dd4a1e204ef84bfed1be16dfba1b22060.",
    "Balance: 10,234.55 USD; pending: -12.00 USD; fee 0.30%.",
    '{"usage": {"input_tokens": 123, "output_tokens": 45, "max_tokens": 1024}}',
    '{"token": "USDC", "amount": "25.00", "chain": "base"}',
    "token: WETH",
    "Docs at https://docs.example.com/api/v2/payments?page=2&sort=desc#section-3",
    "https://example.com/search?q=risk-free+rate&sv=1&sp=r&key=abc",
    "Our Asia-Pacific desk handles the task-list for risk-adjusted returns.",
    "Open https://medium.com/@alice/why-stablecoins-5f3a and api.example.com",
    "Signature required on delivery.",
    "password reset email sent to alice@example.com",
    "2024-05-01T12:00:00Z",
    "",
]


@pytest.mark.parametrize("text", ORDINARY_TEXTS)
def test_ordinary_text_is_untouched(text: str) -> None:
    assert redact_text(text) == text


def test_ordinary_tool_result_is_untouched() -> None:
    result = {
        "account": {"id": "acc_7Hq2", "name": "Household", "currency": "USD"},
        "balance": Decimal("10234.55"),
        "transactions": [
            {
                "id": f"tx_{i}",
                "amount": str(Decimal("12.34") * i),
                "counterparty": "0x742d35Cc6634C0532925a3b844Bc454e4438f44e",
                "asset": "USDC",
                "token": "USDC",
                "memo": "Groceries at the corner shop",
                "at": "2024-05-01T12:00:00Z",
            }
            for i in range(5)
        ],
        "usage": {"input_tokens": 10, "output_tokens": 2},
        "next": "https://api.example.com/v1/transactions?cursor=abc&limit=50",
    }
    assert redact(result) == result


# --------------------------------------------------------------------------------------------
# Redactor options
# --------------------------------------------------------------------------------------------


def test_known_secrets_are_replaced_in_any_shape() -> None:
    held = "Zq7-unguessable.vendor_key/8812+x"
    redactor = Redactor(known_secrets=[held])
    payload = {
        "message": f"upstream said: invalid key {held}!",
        "echo": {"headers": [f"X-Vendor: {held}"]},
        held: "used as a key",
        "json": json.dumps({"k": held}),
        "url": "https://vendor.example/v1?k=" + re.sub("/", "%2F", re.sub(r"\+", "%2B", held)),
    }
    out = json.dumps(redactor.redact(payload))
    assert held not in out
    assert "Zq7-unguessable" not in out
    assert "upstream said: invalid key [REDACTED]!" in out


def test_known_secrets_json_escaped_form() -> None:
    held = 'pa"ss\\word-42'
    redactor = Redactor(known_secrets=[held])
    escaped = json.dumps({"note": f"used {held}"})
    assert "ss\\\\word" in escaped
    out = redactor.redact_text(escaped)
    assert "word-42" not in out


def test_short_known_secrets_are_ignored() -> None:
    redactor = Redactor(known_secrets=["abc", "12345"])
    assert redactor.redact_text("abc 12345 abcdef") == "abc 12345 abcdef"


def test_known_secrets_do_not_change_the_default_redactor() -> None:
    Redactor(known_secrets=["only-in-that-redactor"])
    assert redact_text("only-in-that-redactor") == "only-in-that-redactor"


def test_extra_keys_apply_to_dicts_and_text() -> None:
    redactor = Redactor(extra_keys=["pin_code", "routing"])
    assert redactor.redact({"pinCode": 1234, "Routing Number": "021000021", "x": 1}) == {
        "pinCode": REDACTED,
        "Routing Number": REDACTED,
        "x": 1,
    }
    assert redactor.redact_text("pin-code=9911 ok") == "pin-code=[REDACTED] ok"
    assert redact({"pinCode": 1234}) == {"pinCode": 1234}


def test_extra_keys_must_not_be_trivially_short() -> None:
    with pytest.raises(ConfigurationError):
        Redactor(extra_keys=["id"])


def test_extra_patterns_accept_strings_and_compiled_patterns() -> None:
    redactor = Redactor(extra_patterns=[r"\bACCT-\d{6}\b", re.compile(r"\b\d{3}-\d{2}-\d{4}\b")])
    text = "account ACCT-123456, ssn 078-05-1120, amount 12.00"
    assert redactor.redact_text(text) == "account [REDACTED], ssn [REDACTED], amount 12.00"
    assert redactor.redact_text(redactor.redact_text(text)) == redactor.redact_text(text)


def test_extra_patterns_that_match_the_marker_or_nothing_stay_idempotent() -> None:
    redactor = Redactor(extra_patterns=[r"[A-Z]{4,}", r"x*"])
    once = redactor.redact_text("HELLO world")
    assert once == "[REDACTED] world"
    assert redactor.redact_text(once) == once


def test_module_functions_use_a_default_redactor() -> None:
    text = f"Authorization: Bearer {BEARER_TOKEN}"
    assert redact_text(text) == Redactor().redact_text(text)
    assert redact({"password": "x"}) == Redactor().redact({"password": "x"})


# --------------------------------------------------------------------------------------------
# Inputs of every kind
# --------------------------------------------------------------------------------------------


class Wallet(BaseModel):
    label: str
    private_key: str
    balance: Decimal


class Transfer(BaseModel):
    to: str
    amount: Decimal
    memo: str
    wallet: Wallet
    headers: dict[str, str]


def test_pydantic_models_are_dumped_in_json_mode() -> None:
    transfer = Transfer(
        to="0x742d35Cc6634C0532925a3b844Bc454e4438f44e",
        amount=Decimal("12.50"),
        memo=f"paid with {GITHUB_PAT_CLASSIC}",
        wallet=Wallet(label="hot", private_key="0x" + "ab" * 32, balance=Decimal("1")),
        headers={"Authorization": f"Bearer {BEARER_TOKEN}", "Accept": "application/json"},
    )
    assert redact(transfer) == {
        "to": "0x742d35Cc6634C0532925a3b844Bc454e4438f44e",
        "amount": "12.50",
        "memo": "paid with [REDACTED]",
        "wallet": {"label": "hot", "private_key": REDACTED, "balance": "1"},
        "headers": {"Authorization": REDACTED, "Accept": "application/json"},
    }
    assert redact([transfer])[0]["wallet"]["private_key"] == REDACTED


@dataclasses.dataclass
class Credentials:
    user: str
    password: str


def test_other_python_values() -> None:
    when = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    out = redact(
        {
            "tuple": ("a", {"secret": 1}),
            "set": {"x"},
            "bytes": f"Bearer {BEARER_TOKEN}".encode(),
            "dataclass": Credentials(user="alice", password="pw"),
            "when": when,
            "decimal": Decimal("1.10"),
            "int_key": {1: "one"},
        }
    )
    assert out == {
        "tuple": ("a", {"secret": REDACTED}),
        "set": ["x"],
        "bytes": "Bearer [REDACTED]",
        "dataclass": {"user": "alice", "password": REDACTED},
        "when": when,
        "decimal": Decimal("1.10"),
        "int_key": {1: "one"},
    }


def test_scalars_pass_through() -> None:
    for value in (None, True, 0, -7, 1.5, Decimal("0.01"), "plain"):
        assert redact(value) == value
    assert redact(f"token={GITHUB_PAT_CLASSIC}") == "token=[REDACTED]"


def test_cycles_and_deep_nesting_do_not_raise() -> None:
    cyclic: list[Any] = ["a"]
    cyclic.append(cyclic)
    assert redact(cyclic) == ["a", REDACTED]

    deep: Any = "leaf"
    for _ in range(MAX_DEPTH * 3):
        deep = {"k": [deep]}
    out = redact(deep)
    assert json.dumps(out)
    assert redact(out) == out


class Exploding:
    def __str__(self) -> str:
        raise RuntimeError("boom")


class BadModel:
    def model_dump(self, *, mode: str) -> Any:
        raise ValueError("cannot serialise")


def test_values_that_cannot_be_inspected_are_replaced() -> None:
    assert redact({"a": Exploding(), "b": 1}) == REDACTED
    assert redact(BadModel()) == REDACTED


def test_nan_and_infinity_do_not_raise() -> None:
    out = redact({"x": float("nan"), "y": float("inf")})
    assert out["y"] == float("inf")
    assert out["x"] != out["x"]


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------

TEXT_FRAGMENTS = [
    " ",
    "\n",
    '"',
    "'",
    "\\",
    '\\"',
    ":",
    "=",
    "&",
    "?",
    "#",
    "@",
    "/",
    ",",
    "[",
    "]",
    "{",
    "}",
    REDACTED,
    "token",
    "Token",
    "tokens",
    "password",
    "api_key",
    "seed phrase",
    "Authorization",
    "Cookie",
    "Bearer ",
    "basic ",
    "https://",
    "user:pw@host",
    "sig",
    "key",
    "se",
    "USDC",
    "123",
    "abcdefgh12",
    "sk-",
    "sk-ant-api03-aaaaaaaaaaaaaaaaaaaa",
    "ghp_",
    "AKIA",
    "eyJ",
    "eyJhbGciOi.eyJzdWIi.sig",
    "xoxb-",
    "-----BEGIN PRIVATE KEY-----",
    "-----END PRIVATE KEY-----",
    "YWxpY2U6cHc=",
]

tricky_text = st.lists(
    st.one_of(st.sampled_from(TEXT_FRAGMENTS), st.text(max_size=4)), max_size=24
).map("".join)
keys = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["token", "max_tokens", "password", "api-key", "memo", "Authorization"]),
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | tricky_text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(keys, children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_redact_is_idempotent_and_never_raises(value: Any) -> None:
    once = redact(value)
    assert redact(once) == once
    json.dumps(once)


@settings(max_examples=500, deadline=None)
@given(tricky_text)
def test_redact_text_is_idempotent_and_never_raises(text: str) -> None:
    once = redact_text(text)
    assert isinstance(once, str)
    assert redact_text(once) == once


@settings(max_examples=200, deadline=None)
@given(tricky_text, st.sampled_from(["Zq7-unguessable", "[REDACTED", "ED][RE", "a[REDA"]))
def test_known_secrets_stay_idempotent(text: str, secret: str) -> None:
    redactor = Redactor(known_secrets=[secret])
    once = redactor.redact_text(text + secret + text)
    assert redactor.redact_text(once) == once


# --------------------------------------------------------------------------------------------
# Canary: a tool result full of secrets in every shape
# --------------------------------------------------------------------------------------------


def test_canary_tool_result_leaks_nothing() -> None:
    secrets = {
        "bearer": BEARER_TOKEN,
        "basic": BASIC_CREDENTIALS,
        "url_password": "Pg-P4ssw0rd-771",
        "amz_sig": "d1f0a5e2b3c4",
        "amz_cred": "AKIAJ7Q2EXAMPLE0000Z",
        "sas_sig": "Xy9%2Fsas%3D",
        "api_key_value": "q8w7e6r5t4y3",
        "password_value": PASSWORD,
        "yaml_secret": "yaml-only-secret-value",
        "mnemonic": MNEMONIC,
        "openai": OPENAI_KEY,
        "anthropic": ANTHROPIC_KEY,
        "github": GITHUB_PAT_CLASSIC,
        "github_fine": GITHUB_PAT_FINE,
        "aws": AWS_KEY_ID,
        "slack": SLACK_TOKEN,
        "jwt": JWT,
        "stripe": STRIPE_KEY,
        "pem": PEM_BODY,
        "cookie": "31d4d96e407aad42",
        "session": "sess-0a9b8c7d",
        "sig": "0x1b2c3d4e5f",
        "opaque_token": "opaque-token-value-99",
        "held": "host-held-literal-secret",
    }
    s = secrets
    tool_result = {
        "status": "ok",
        "request": {
            "url": f"https://svc:{s['url_password']}@api.bank.example/v2/transfers",
            "headers": {
                "Authorization": f"Bearer {s['bearer']}",
                "Cookie": f"sid={s['cookie']}",
                "X-Request-Id": "req_123",
            },
            "raw_headers": f"Authorization: Basic {s['basic']}\r\nCookie: sid={s['cookie']}",
        },
        "response": {
            "statement_url": (
                "https://bank.s3.amazonaws.com/s.pdf?X-Amz-Algorithm=AWS4-HMAC-SHA256"
                f"&X-Amz-Credential={s['amz_cred']}%2F20240501%2Fus-east-1%2Fs3%2Faws4_request"
                f"&X-Amz-Signature={s['amz_sig']}"
            ),
            "export_url": f"https://a.blob.core.windows.net/c/x.csv?sv=2022-11-02&sig={s['sas_sig']}",
            "body": json.dumps(
                {"api_key": s["api_key_value"], "password": s["password_value"], "ok": True}
            ),
            "debug": [
                f"config:\n  secret: {s['yaml_secret']}\n  mnemonic: {s['mnemonic']}",
                f"env OPENAI_API_KEY={s['openai']} ANTHROPIC={s['anthropic']}",
                f"git push https://{s['github']}@github.com/acme/ops.git",
                f"fine-grained {s['github_fine']}",
                f"aws {s['aws']} slack {s['slack']} jwt {s['jwt']} stripe {s['stripe']}",
                PEM,
                f"upstream echoed {s['held']} back",
            ],
            "wallet": {"mnemonic": s["mnemonic"], "sessionId": s["session"]},
            "tx": {"hash": "0x5c504ed432cb51138bcf09aa5e8a410dd4a1e204", "signature": s["sig"]},
            "auth": {"token": s["opaque_token"], "token_type": "bearer"},
            "asset": {"token": "USDC", "amount": "25.00"},
            "usage": {"input_tokens": 321, "output_tokens": 12},
        },
    }
    redactor = Redactor(known_secrets=[s["held"]])
    dumped = json.dumps(redactor.redact(tool_result))
    for name, secret in secrets.items():
        assert secret not in dumped, name
    for word in MNEMONIC.split()[1:]:
        assert word not in dumped
    # ... while the ordinary parts survive.
    out = redactor.redact(tool_result)
    assert out["response"]["asset"] == {"token": "USDC", "amount": "25.00"}
    assert out["response"]["usage"] == {"input_tokens": 321, "output_tokens": 12}
    assert out["request"]["headers"]["X-Request-Id"] == "req_123"
    assert out["response"]["tx"]["hash"] == "0x5c504ed432cb51138bcf09aa5e8a410dd4a1e204"
    assert "api.bank.example/v2/transfers" in out["request"]["url"]
    assert redactor.redact(out) == out

"""The @capability decorator: what a declaration turns into, and what it refuses."""

from __future__ import annotations

import hashlib
import json
import threading
from decimal import Decimal
from typing import Annotated, Any
from uuid import uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError

from fiduciary import (
    CallContext,
    Capability,
    ConfigurationError,
    Executor,
    Kind,
    ManualClock,
    Principal,
    Replay,
    Risk,
    capability,
)
from fiduciary.capabilities import args_digest, canonical_json


def make_ctx(cap: Capability, *, tool_use_id: str = "toolu_1") -> CallContext:
    return CallContext(
        run_id=uuid4(),
        principal=Principal("alice"),
        tool_use_id=tool_use_id,
        capability=cap.name,
        idempotency_key="key",
        clock=ManualClock(),
    )


def dumped(cap: Capability, raw: dict[str, Any]) -> dict[str, Any]:
    """The validated input of a call, as JSON: what the gates and the key see."""
    return cap.input_model.model_validate(raw).model_dump(mode="json")


class Quote(BaseModel):
    symbol: str
    usd: Decimal


class SendArgs(BaseModel):
    to: str
    amount: Decimal
    memo: str = ""


# --- declaration --------------------------------------------------------------------------


def test_bare_decorator_declares_a_low_risk_read() -> None:
    @capability
    async def balance(account: str = "main") -> dict[str, str]:
        """The balance of an account."""
        return {"account": account}

    assert isinstance(balance, Capability)
    assert balance.name == "balance"
    assert balance.kind is Kind.READ
    assert not balance.is_write
    assert balance.risk is Risk.LOW
    assert balance.replay is Replay.SAFE
    assert balance.executor is Executor.SERVER
    assert balance.flags == frozenset()
    assert balance.version == 1
    assert balance.operation is None
    assert balance.amount_usd is None
    assert balance.tier is None


def test_decorator_with_options() -> None:
    @capability(
        name="send-usd",
        kind="execute",
        risk="high",
        flags=["irreversible", "mutating"],
        operation="send",
        modifiable_fields=("amount",),
        max_result_chars=500,
        timeout=5.0,
        version=3,
        executor="client",
        tier="explicit",
    )
    async def send(to: str, amount: Decimal) -> None:
        """Send USD."""

    assert send.name == "send-usd"
    assert send.kind is Kind.EXECUTE
    assert send.is_write
    assert send.risk is Risk.HIGH
    assert send.flags == frozenset({"irreversible", "mutating"})
    assert send.operation == "send"
    assert send.modifiable_fields == ("amount",)
    assert send.max_result_chars == 500
    assert send.timeout == 5.0
    assert send.version == 3
    assert send.executor is Executor.CLIENT
    assert send.tier == "explicit"
    assert send.replay is Replay.NEVER


def test_unknown_kind_is_rejected() -> None:
    with pytest.raises(ValueError, match="spend"):

        @capability(kind="spend")
        async def f() -> None:
            """Nothing."""


# --- handlers -----------------------------------------------------------------------------


async def test_async_handler_receives_validated_fields() -> None:
    @capability
    async def convert(amount: Decimal, currency: str = "EUR") -> dict[str, str]:
        """Convert an amount."""
        return {"amount": str(amount * 2), "currency": currency, "type": type(amount).__name__}

    args = convert.input_model.model_validate({"amount": "1.5"})
    result = await convert.invoke(args, make_ctx(convert))
    assert result == {"amount": "3.0", "currency": "EUR", "type": "Decimal"}


async def test_sync_handler_runs_in_a_worker_thread() -> None:
    threads: list[int] = []

    @capability
    def blocking(n: int) -> int:
        """A blocking computation."""
        threads.append(threading.get_ident())
        return n + 1

    assert (
        await blocking.invoke(blocking.input_model.model_validate({"n": 41}), make_ctx(blocking))
        == 42
    )
    assert threads
    assert threads[0] != threading.get_ident()


async def test_a_sync_handler_declared_non_blocking_runs_on_the_loop() -> None:
    threads: list[int] = []

    @capability(blocking=False)
    def add_one(n: int, ctx: CallContext) -> int:
        """A quick computation."""
        threads.append(threading.get_ident())
        assert ctx.tool_use_id == "toolu_1"
        return n + 1

    args = add_one.input_model.model_validate({"n": 41})
    assert not add_one.blocking
    assert await add_one.invoke(args, make_ctx(add_one)) == 42
    assert threads == [threading.get_ident()]


def test_only_a_sync_handler_can_be_declared_non_blocking() -> None:
    with pytest.raises(ConfigurationError, match="blocking=False is for sync handlers"):

        @capability(blocking=False)
        async def quick() -> int:
            """Async already."""
            return 1


def test_the_context_of_a_call_has_one_cancellation_event() -> None:
    @capability
    def noop() -> None:
        """Nothing."""

    ctx = make_ctx(noop)
    assert not ctx.cancelled.is_set()
    ctx.cancelled.set()
    assert ctx.cancelled.is_set()  # the same event each time it is asked for


# --- the input model ----------------------------------------------------------------------


def test_input_model_from_signature() -> None:
    @capability
    async def transfer(
        to: Annotated[str, Field(description="Recipient account id")],
        amount: Annotated[Decimal, Field(description="USD to move", gt=0)],
        memo: str = "",
        urgent: bool = False,
    ) -> None:
        """Move money."""

    schema = transfer.input_schema()
    assert "title" not in schema
    assert set(schema["properties"]) == {"to", "amount", "memo", "urgent"}
    assert sorted(schema["required"]) == ["amount", "to"]
    assert schema["properties"]["to"]["description"] == "Recipient account id"
    assert schema["properties"]["amount"]["description"] == "USD to move"
    assert schema["properties"]["memo"]["default"] == ""
    assert dumped(transfer, {"to": "bob", "amount": "5"}) == {
        "to": "bob",
        "amount": "5",
        "memo": "",
        "urgent": False,
    }
    with pytest.raises(ValidationError):
        transfer.input_model.model_validate({"to": "bob"})
    with pytest.raises(ValidationError):  # the Field constraint is enforced
        transfer.input_model.model_validate({"to": "bob", "amount": "0"})


def test_a_model_made_extra_argument_is_ignored() -> None:
    @capability(kind="execute")
    async def send(to: str, amount: Decimal) -> None:
        """Send USD."""

    args = send.input_model.model_validate({"to": "eve", "amount": "9", "user_approved": True})
    assert args.model_dump(mode="json") == {"to": "eve", "amount": "9"}
    assert "user_approved" not in send.input_schema()["properties"]


async def test_single_model_parameter_is_the_input_model() -> None:
    seen: list[SendArgs] = []

    @capability(kind="execute")
    async def send(request: SendArgs) -> str:
        """Send USD."""
        seen.append(request)
        return request.to

    assert send.input_model is SendArgs
    assert sorted(send.input_schema()["required"]) == ["amount", "to"]
    args = send.input_model.model_validate({"to": "bob", "amount": "3"})
    assert await send.invoke(args, make_ctx(send)) == "bob"
    assert seen == [SendArgs(to="bob", amount=Decimal("3"))]


async def test_explicit_input_model() -> None:
    @capability(kind="execute", input_model=SendArgs, modifiable_fields=["memo"])
    async def send(request: SendArgs, ctx: CallContext) -> str:
        """Send USD."""
        return f"{request.to}:{request.amount}:{ctx.tool_use_id}"

    @capability(input_model=Quote)
    def quote(q) -> str:  # type: ignore[no-untyped-def]
        """An un-annotated parameter receives the explicit model."""
        return f"{q.symbol}={q.usd}"

    assert send.input_model is SendArgs
    assert quote.input_model is Quote
    args = SendArgs(to="bob", amount=Decimal("2"))
    assert await send.invoke(args, make_ctx(send, tool_use_id="t9")) == "bob:2:t9"
    assert await quote.invoke(Quote(symbol="ETH", usd=Decimal("3")), make_ctx(quote)) == "ETH=3"


def test_model_parameter_must_be_the_only_input() -> None:
    with pytest.raises(ConfigurationError, match="only input"):

        @capability
        async def mixed(request: SendArgs, note: str) -> None:
            """Mixed."""

    with pytest.raises(ConfigurationError, match="only input"):

        @capability
        async def mixed_first(note: str, request: SendArgs) -> None:
            """Mixed."""

    with pytest.raises(ConfigurationError, match="input_model"):

        @capability(input_model=SendArgs)
        async def nowhere(ctx: CallContext) -> None:
            """The explicit model has no parameter to go to."""


def test_var_args_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match=r"\*args"):

        @capability
        async def anything(**kwargs: Any) -> None:
            """Anything."""


async def test_call_context_injected_by_annotation() -> None:
    seen: list[CallContext] = []

    @capability
    async def whoami(prefix: str, context: CallContext) -> str:
        """Who runs this call."""
        seen.append(context)
        return prefix + context.principal.actor_id

    assert set(whoami.input_schema()["properties"]) == {"prefix"}
    ctx = make_ctx(whoami)
    assert await whoami.invoke(whoami.input_model.model_validate({"prefix": "@"}), ctx) == "@alice"
    assert seen == [ctx]


async def test_unannotated_ctx_is_the_context_not_an_input() -> None:
    @capability
    async def whoami(prefix: str, ctx) -> str:  # type: ignore[no-untyped-def]
        """Who runs this call."""
        return f"{prefix}{ctx.principal.actor_id}"

    assert whoami.input_schema()["required"] == ["prefix"]
    args = whoami.input_model.model_validate({"prefix": "@"})
    assert await whoami.invoke(args, make_ctx(whoami)) == "@alice"


# --- the output model ---------------------------------------------------------------------


def test_output_model_drops_extra_fields() -> None:
    @capability
    async def quote() -> Quote:
        """A quote."""
        return Quote(symbol="ETH", usd=Decimal("1"))

    raw = {"symbol": "ETH", "usd": "3100.5", "internal_note": "never shown"}
    assert quote.dump_output(raw) == {"symbol": "ETH", "usd": "3100.5"}
    assert quote.dump_output(Quote(symbol="BTC", usd=Decimal("2"))) == {"symbol": "BTC", "usd": "2"}
    with pytest.raises(ValidationError):
        quote.dump_output({"symbol": "ETH"})


def test_output_list_of_models() -> None:
    @capability
    async def quotes() -> list[Quote]:
        """Several quotes."""
        return []

    raw = [{"symbol": "A", "usd": "1", "secret": "x"}, Quote(symbol="B", usd=Decimal("2"))]
    assert quotes.dump_output(raw) == [{"symbol": "A", "usd": "1"}, {"symbol": "B", "usd": "2"}]


def test_output_dict_none_and_unannotated() -> None:
    @capability
    async def counts() -> dict[str, int]:
        """Counts."""
        return {}

    @capability(kind="execute")
    async def fire() -> None:
        """Returns nothing."""

    @capability
    async def loose():  # type: ignore[no-untyped-def]
        """No return annotation: anything JSON-able goes."""

    assert counts.dump_output({"a": "3"}) == {"a": 3}
    with pytest.raises(ValidationError):
        counts.dump_output({"a": "three"})
    assert fire.dump_output(None) is None
    with pytest.raises(ValidationError):
        fire.dump_output({"unexpected": True})
    assert loose.dump_output({"d": Decimal("1.5"), "n": [1]}) == {"d": "1.5", "n": [1]}


# --- description --------------------------------------------------------------------------


def test_description_from_docstring_or_option() -> None:
    @capability
    async def documented() -> None:
        """First line.

        More detail, dedented.
        """

    @capability(description="  Given explicitly.  ")
    async def given_explicitly() -> None:
        """Ignored docstring."""

    assert documented.description == "First line.\n\nMore detail, dedented."
    assert given_explicitly.description == "Given explicitly."


def test_a_capability_without_description_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="docstring"):

        @capability
        async def silent() -> None:
            pass


# --- replay, flags, fields, names ---------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "replay"),
    [
        (Kind.READ, Replay.SAFE),
        (Kind.PREVIEW, Replay.SAFE),
        (Kind.PROPOSE, Replay.NEVER),
        (Kind.APPROVE, Replay.NEVER),
        (Kind.EXECUTE, Replay.NEVER),
    ],
)
def test_replay_defaults_by_kind(kind: Kind, replay: Replay) -> None:
    @capability(kind=kind)
    async def op() -> None:
        """An operation."""

    assert op.replay is replay
    assert op.is_write is (kind not in (Kind.READ, Kind.PREVIEW))


def test_replay_can_be_declared() -> None:
    @capability(kind="execute", replay="safe")
    async def set_label(label: str) -> None:
        """Idempotent by nature."""

    @capability(kind="read", replay=Replay.NEVER)
    async def draw_random() -> None:
        """Not repeatable."""

    assert set_label.replay is Replay.SAFE
    assert draw_random.replay is Replay.NEVER


def test_irreversible_write_cannot_be_replay_safe() -> None:
    with pytest.raises(ConfigurationError, match="irreversible"):

        @capability(kind="execute", flags={"irreversible"}, replay="safe")
        async def send(to: str) -> None:
            """Send."""

    @capability(kind="execute", flags={"irreversible"})
    async def send_default(to: str) -> None:
        """Send."""

    assert send_default.replay is Replay.NEVER


def test_modifiable_fields_must_be_input_fields() -> None:
    with pytest.raises(ConfigurationError, match="recipient"):

        @capability(kind="execute", modifiable_fields=["amount", "recipient"])
        async def send(to: str, amount: Decimal) -> None:
            """Send."""


@pytest.mark.parametrize("name", ["", "has space", "dot.name", "slash/name", "café", "x" * 65])
def test_invalid_names(name: str) -> None:
    async def handler() -> None:
        """Anything."""

    if name:
        with pytest.raises(ConfigurationError, match="name"):
            capability(name=name)(handler)
    handler.__name__ = name
    with pytest.raises(ConfigurationError, match="name"):
        capability(handler)


@pytest.mark.parametrize("name", ["a", "send-usd", "get_balance_v2", "x" * 64])
def test_valid_names(name: str) -> None:
    @capability(name=name)
    async def handler() -> None:
        """Anything."""

    assert handler.name == name


# --- idempotency keys ---------------------------------------------------------------------


def send_capability(version: int = 1) -> Capability:
    @capability(kind="execute", version=version)
    async def send(to: str, amount: Decimal, memo: str = "") -> None:
        """Send USD."""

    return send


def test_default_key_is_run_call_name_version_and_input_digest() -> None:
    send = send_capability(version=2)
    ctx = make_ctx(send, tool_use_id="toolu_42")
    args = send.input_model.model_validate({"to": "bob", "amount": 5, "user_approved": True})
    validated = {"amount": "5", "memo": "", "to": "bob"}
    assert args.model_dump(mode="json") == validated
    expected_text = '{"amount":"5","memo":"","to":"bob"}'
    assert canonical_json(validated) == expected_text
    digest = hashlib.sha256(expected_text.encode()).hexdigest()
    assert send.make_key(args, ctx) == f"{ctx.run_id}:toolu_42:send:v2:{digest}"


def test_default_key_depends_on_validated_input_only() -> None:
    send = send_capability()
    ctx = make_ctx(send)

    def key(raw: dict[str, Any]) -> str:
        return send.make_key(send.input_model.model_validate(raw), ctx)

    base = key({"to": "bob", "amount": "5"})
    assert key({"amount": 5, "to": "bob", "memo": ""}) == base
    assert key({"to": "bob", "amount": "5", "note_from_model": "approved"}) == base
    assert key({"to": "bob", "amount": "6"}) != base
    assert key({"to": "carol", "amount": "5"}) != base
    other_call = send.make_key(
        send.input_model.model_validate({"to": "bob", "amount": "5"}),
        make_ctx(send, tool_use_id="toolu_2"),
    )
    assert other_call != base
    assert (
        send_capability(version=2).make_key(
            send.input_model.model_validate({"to": "bob", "amount": "5"}), ctx
        )
        != base
    )


def test_custom_key_function() -> None:
    calls: list[tuple[Any, CallContext]] = []

    def order_key(args: Any, ctx: CallContext) -> str:
        calls.append((args, ctx))
        return f"order:{args.order_id}"

    @capability(kind="execute", idempotency_key=order_key)
    async def place_order(order_id: str) -> None:
        """Place an order."""

    ctx = make_ctx(place_order)
    args = place_order.input_model.model_validate({"order_id": "A-1"})
    # a custom key is scoped to the principal: two people never share a ledger entry
    assert place_order.make_key(args, ctx) == "alice:order:A-1"
    assert calls == [(args, ctx)]


# --- amounts and descriptions -------------------------------------------------------------


async def test_amount_sync_async_and_absent() -> None:
    def sync_amount(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(args.amount) * 2

    async def async_amount(args: Any, ctx: CallContext) -> Decimal | None:
        return None if args.amount == "0" else Decimal(args.amount)

    @capability(kind="execute", amount_usd=sync_amount)
    async def doubled(amount: str) -> None:
        """Doubled."""

    @capability(kind="execute", amount_usd=async_amount)
    async def awaited(amount: str) -> None:
        """Awaited."""

    @capability(kind="execute")
    async def unpriced(amount: str) -> None:
        """No amount function."""

    def run(cap: Capability, amount: str) -> Any:
        return cap.amount(cap.input_model.model_validate({"amount": amount}), make_ctx(cap))

    assert await run(doubled, "2.5") == Decimal("5.0")
    assert await run(awaited, "7") == Decimal("7")
    assert await run(awaited, "0") is None
    assert await run(unpriced, "7") is None


@pytest.mark.parametrize("value", [12.5, 12, "12.5", Decimal("NaN"), Decimal("Infinity")])
async def test_amount_must_be_a_finite_decimal(value: Any) -> None:
    @capability(kind="execute", amount_usd=lambda args, ctx: value)
    async def pay(amount: str) -> None:
        """Pay."""

    args = pay.input_model.model_validate({"amount": "12.5"})
    with pytest.raises(ConfigurationError, match="Decimal"):
        await pay.amount(args, make_ctx(pay))


async def test_description_of() -> None:
    send = send_capability()
    args = send.input_model.model_validate({"to": "bob", "amount": "1234.5"})
    assert await send.description_of(args, None) == "send(to=bob, amount=1234.5, memo=)"
    assert await send.description_of(args, Decimal("1234.5")) == (
        "send(to=bob, amount=1234.5, memo=), about $1,234.50"
    )

    @capability(kind="execute", describe=lambda a: f"Pay {a.to} ${a.amount}")
    async def pay(to: str, amount: Decimal) -> None:
        """Pay."""

    pay_args = pay.input_model.model_validate({"to": "carol", "amount": "3"})
    assert await pay.description_of(pay_args, Decimal("3")) == "Pay carol $3"

    async def card(a: Any) -> str:  # a card that asks something slow is awaited
        return f"Pay {a.to}, asked"

    slow = capability(kind="execute", describe=card)(pay.handler)
    assert await slow.description_of(pay_args, None) == "Pay carol, asked"


# --- digests ------------------------------------------------------------------------------


def test_args_digest_is_sha256_of_canonical_json() -> None:
    args = {"b": [1, {"y": 2, "x": 1}], "a": "é"}
    text = canonical_json(args)
    assert text == '{"a":"é","b":[1,{"x":1,"y":2}]}'
    assert args_digest(args) == hashlib.sha256(text.encode()).hexdigest()
    assert args_digest({"a": 1}) != args_digest({"a": 2})
    assert args_digest({"a": 1}) != args_digest({"a": "1"})


@given(st.dictionaries(st.text(), st.one_of(st.integers(), st.text(), st.booleans(), st.none())))
def test_args_digest_stable_under_key_order(args: dict[str, Any]) -> None:
    reordered = dict(reversed(list(args.items())))
    assert args_digest(reordered) == args_digest(args)
    assert json.loads(canonical_json(args)) == args

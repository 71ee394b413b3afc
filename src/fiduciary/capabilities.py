"""Capabilities: typed tools with a kind, a risk, a replay policy and flags.

A capability is the only way a model touches the world. ``@capability`` turns a typed function
(async or sync) into a ``Capability``: its input model comes from the signature (or an explicit
pydantic model), its output from the return annotation, its description from the docstring.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, Generic, Literal, TypeAlias, get_args, get_origin, get_type_hints, overload
from uuid import UUID

from pydantic import BaseModel, ConfigDict, TypeAdapter, create_model
from typing_extensions import TypeVar

from .clock import Clock
from .exceptions import CapabilityError, ConfigurationError
from .steps import CardStep, Step, StepBooks

__all__ = [
    "CallContext",
    "Capability",
    "Executor",
    "Kind",
    "Principal",
    "Replay",
    "Risk",
    "args_digest",
    "canonical_json",
    "capability",
    "out_of_range",
    "principal_of",
]

# Numbers a model may pass, and amounts a capability may price a call at: anything beyond is
# refused at validation (a 1e999 would otherwise break every cent-rounding downstream).
MAX_NUMBER = Decimal("1e18")
MIN_NUMBER = Decimal("1e-30")
MAX_AMOUNT_USD = Decimal("1e15")


def out_of_range(value: Any, path: str = "") -> str | None:
    """The first number in ``value`` (validated arguments) that no amount could be: not finite,
    or of magnitude 10^18 and above, or below 10^-30 (zero aside). None: every number is sane."""
    if isinstance(value, dict):
        for key, item in value.items():
            found = out_of_range(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = out_of_range(item, f"{path}[{index}]")
            if found is not None:
                return found
    elif isinstance(value, (Decimal, float)) and not isinstance(value, bool):
        number = Decimal(value)
        if not number.is_finite() or (number != 0 and not MIN_NUMBER <= abs(number) < MAX_NUMBER):
            return f"{path or 'a number'} is out of range (at most 18 digits before the point)"
    return None


class Kind(StrEnum):
    READ = "read"
    PREVIEW = "preview"
    PROPOSE = "propose"
    APPROVE = "approve"
    EXECUTE = "execute"

    @property
    def is_write(self) -> bool:
        # a module constant: ``Kind.READ`` is a lookup through the enum's metaclass each time
        return self not in _READ_KINDS


_READ_KINDS = frozenset({Kind.READ, Kind.PREVIEW})


class Risk(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class Replay(StrEnum):
    SAFE = "safe"
    NEVER = "never"
    # ledgered like never, but a call interrupted while started is handed back to its handler
    # (same idempotency key), which settles it from its own durable record: for backends that
    # keep one (a signed chain transaction is broadcast again, never signed twice)
    RESUME = "resume"


class Executor(StrEnum):
    SERVER = "server"
    CLIENT = "client"
    # the person answers (``fiduciary.questions``): the run waits ``awaiting_input``
    PERSON = "person"


@dataclass(frozen=True, slots=True)
class Principal:
    """On whose behalf a run acts: an actor id and the scopes it holds."""

    actor_id: str
    scopes: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.actor_id:
            raise ConfigurationError("a principal needs a non-empty actor_id")


def principal_of(value: Principal | str) -> Principal:
    """A principal given as one, or as its actor id (with no scopes)."""
    return value if isinstance(value, Principal) else Principal(value)


ProgressFn: TypeAlias = Callable[[str, float | None], Awaitable[None]]


async def _no_progress(message: str, pct: float | None) -> None:
    return None


# what ``CallContext.deps`` holds: a bare ``CallContext`` is ``CallContext[None]``
DepsT = TypeVar("DepsT", default=None)


@dataclass(slots=True)
class CallContext(Generic[DepsT]):
    """What a handler receives besides its input.

    ``deps``: the application's own dependencies for the run (``Agent(deps_type=...)``,
    ``run(..., deps=...)``; fiduciary.deps), never recorded. A handler that declares
    ``ctx: CallContext[MyDeps]`` has ``ctx.deps`` typed ``MyDeps`` (mypy checks it)."""

    run_id: UUID
    principal: Principal
    tool_use_id: str
    capability: str
    idempotency_key: str
    clock: Clock
    # the ledger rows of a call's steps (``fiduciary.steps``): set by the gates
    step_books: StepBooks | None = field(default=None, repr=False)
    _progress: ProgressFn = _no_progress
    _cancelled: threading.Event | None = field(default=None, repr=False)
    deps: DepsT = None  # type: ignore[assignment]  # (None: the run was given none)

    @property
    def cancelled(self) -> threading.Event:
        """Set when the call is cancelled or times out: async handlers are also cancelled,
        while a sync handler running in a thread should check it and stop. Made when first
        asked for (most calls never do); a lock keeps two threads from making two."""
        event = self._cancelled
        if event is None:
            with _MAKING:
                if self._cancelled is None:
                    self._cancelled = threading.Event()
                event = self._cancelled
        return event

    async def progress(self, message: str, pct: float | None = None) -> None:
        """Report progress of a long call; it reaches clients as a ``tool_progress`` event."""
        await self._progress(message, pct)


_MAKING = threading.Lock()


def canonical_json(value: Any) -> str:
    """The one JSON text of a value that digests and keys are computed from."""
    return _CANONICAL.encode(value)


# what json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
# default=str) builds at each call, built once
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
)


def args_digest(args: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a call's arguments: what an approval binds to."""
    return hashlib.sha256(canonical_json(args).encode()).hexdigest()


AmountFn: TypeAlias = Callable[[Any, CallContext], "Decimal | Awaitable[Decimal | None] | None"]
# a card's text; awaitable when it asks something slow (a node), asked only for a shown card
DescribeFn: TypeAlias = Callable[[Any], "str | Awaitable[str]"]
KeyFn: TypeAlias = Callable[[Any, CallContext], str]
# a client-executed call's report, checked before it is recorded (``submit_result``), given
# the call's arguments, the report and the approval's id: the result to record and, when
# refused, why (the refusal is recorded too: the run is told)
ResultCheckFn: TypeAlias = Callable[[Any, Any, str], "Awaitable[tuple[Any, str | None]]"]
Tier: TypeAlias = Literal["auto", "confirm", "explicit", "deny"]
# fresh arguments for a pending call whose inputs went stale (a swap's quote), made from the
# old ones: the person asks for them from the card (``Agent.regenerate``)
RegenerateFn: TypeAlias = Callable[[Any, CallContext], "Any | Awaitable[Any]"]
# when the price a call's arguments rest on was quoted (None: unknown), shown as its age
# the steps of a call made of steps (``fiduciary.steps``), made from its arguments
StepsFn: TypeAlias = Callable[[Any, CallContext], Sequence[Step]]
QuotedAtFn: TypeAlias = Callable[[Any, CallContext], "datetime | Awaitable[datetime | None] | None"]


@dataclass(frozen=True, slots=True, eq=False)
class Capability:
    """A declared tool. Build it with ``@capability``; the fields are read by the gates."""

    name: str
    description: str
    handler: Callable[..., Any]
    input_model: type[BaseModel]
    output_adapter: TypeAdapter[Any]
    kind: Kind
    risk: Risk
    replay: Replay
    flags: frozenset[str]
    operation: str | None
    amount_usd: AmountFn | None
    modifiable_fields: tuple[str, ...]
    max_result_chars: int | None
    timeout: float
    version: int
    executor: Executor
    idempotency_key: KeyFn | None
    tier: Tier | None
    describe: DescribeFn | None
    # an over-budget result replaced by this summary of it (the truncation marker stays)
    summarize_on_truncate: Callable[[Any], str] | None
    _call_style: Literal["fields", "model"]
    _is_async: bool
    _ctx_param: str | None
    # False: a sync handler declared non-blocking, called on the event loop (no thread)
    blocking: bool = True
    # client-executed only: what the client reports is checked (and may be refused) before
    # it is recorded, e.g. a transaction hash read back from a chain (``fiduciary.chain``)
    check_result: ResultCheckFn | None = None
    # the T of a handler's ``ctx: CallContext[T]`` (None: it declares none), checked against
    # the agent's ``deps_type`` when the agent is built
    deps_type: Any = None
    # reads re-run, with no arguments, after a call of this capability succeeds: their fresh
    # results reach the model and the person as ordinary read calls (``refresh_of``)
    refresh: tuple[str, ...] = ()
    # a pending call's arguments made anew from the old ones (a fresh quote): see ``regenerate``
    regenerate: RegenerateFn | None = None
    quoted_at: QuotedAtFn | None = None
    steps: StepsFn | None = None

    @property
    def is_write(self) -> bool:
        return self.kind.is_write

    async def regenerated(self, args: BaseModel, ctx: CallContext) -> dict[str, Any]:
        """Fresh arguments for a pending call (``regenerate``), as JSON, validated."""
        if self.regenerate is None:
            raise ConfigurationError(f"{self.name} declares no regenerate")
        fresh = self.regenerate(args, ctx)
        if inspect.isawaitable(fresh):
            fresh = await fresh
        model = self.input_model.model_validate(
            fresh.model_dump(mode="json") if isinstance(fresh, BaseModel) else fresh
        )
        return model.model_dump(mode="json")

    def card_steps(self, args: BaseModel, ctx: CallContext) -> list[CardStep] | None:
        """The steps a card shows (``steps``), or None for a call of one step."""
        return None if self.steps is None else [s.shown() for s in self.steps(args, ctx)]

    async def quote_time(self, args: BaseModel, ctx: CallContext) -> datetime | None:
        """When the price this call rests on was quoted (``quoted_at``), or None."""
        if self.quoted_at is None:
            return None
        at = self.quoted_at(args, ctx)
        return await at if inspect.isawaitable(at) else at

    @property
    def concurrent(self) -> bool:
        """Runs beside the other reads of its turn: a read (a question to the person waits,
        in the serial path, like a write)."""
        return not self.kind.is_write and self.executor is not Executor.PERSON

    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the input, as offered to a model."""
        schema = self.input_model.model_json_schema()
        schema.pop("title", None)
        return schema

    async def description_of(self, args: BaseModel, amount_usd: Decimal | None) -> str:
        """A one-line, human-readable account of what a call will do, for the person (asked
        only when a person will see it: a ``describe`` may await a slow source)."""
        if self.describe is not None:
            text = self.describe(args)
            return await text if inspect.isawaitable(text) else text
        shown = ", ".join(f"{k}={v}" for k, v in args.model_dump(mode="json").items())
        text = f"{self.name}({shown})"
        return f"{text}, about ${amount_usd:,.2f}" if amount_usd is not None else text

    def make_key(self, args: BaseModel, ctx: CallContext, *, digest: str | None = None) -> str:
        """The server-made idempotency key of a call (never one the model supplied).

        A capability's own key function is scoped to the principal, so that two people's calls
        can never share a ledger entry (and one never receives the other's recorded result).
        ``digest``: the ``args_digest`` of ``args`` as JSON, when the caller has it already.
        """
        if self.idempotency_key is not None:
            return f"{ctx.principal.actor_id}:{self.idempotency_key(args, ctx)}"
        if digest is None:
            digest = args_digest(args.model_dump(mode="json"))
        return f"{ctx.run_id}:{ctx.tool_use_id}:{self.name}:v{self.version}:{digest}"

    async def amount(self, args: BaseModel, ctx: CallContext) -> Decimal | None:
        if self.amount_usd is None:
            return None
        value = self.amount_usd(args, ctx)
        if inspect.isawaitable(value):
            value = await value
        if value is None:
            return None
        if not isinstance(value, Decimal) or not value.is_finite():
            raise ConfigurationError(
                f"{self.name}: amount_usd must return a finite Decimal or None"
            )
        if abs(value) >= MAX_AMOUNT_USD:  # no call moves this much: refuse it, do not price it
            raise CapabilityError(
                "amount_out_of_range",
                f"the amount of this {self.name} call is beyond what any call may move "
                f"(${MAX_AMOUNT_USD:,.0f} or more)",
            )
        return value

    async def invoke(self, args: BaseModel, ctx: CallContext) -> Any:
        """Call the handler and return its raw result: a sync handler runs in a worker thread
        unless it is declared non-blocking (``blocking=False``)."""
        if self._call_style == "model":
            call_args: tuple[Any, ...] = (args,)
            kwargs: dict[str, Any] = {}
        else:
            call_args = ()
            kwargs = args.__dict__.copy()  # the fields (the input model ignores extras)
        if self._ctx_param is not None:
            kwargs[self._ctx_param] = ctx
        if self._is_async:
            return await self.handler(*call_args, **kwargs)
        if not self.blocking:
            return self.handler(*call_args, **kwargs)
        _ = ctx.cancelled  # made here, on the loop's thread, before the handler's may ask
        return await asyncio.to_thread(self.handler, *call_args, **kwargs)

    def dump_output(self, raw: Any) -> Any:
        """Validate a handler's result against the output model; extra fields are dropped."""
        value = self.output_adapter.validate_python(raw, from_attributes=True)
        return self.output_adapter.dump_python(value, mode="json")


_WRITE_DEFAULT_TIMEOUT = 30.0


@overload
def capability(fn: Callable[..., Any], /) -> Capability: ...


@overload
def capability(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    kind: Kind | str = Kind.READ,
    risk: Risk | str = Risk.LOW,
    replay: Replay | str | None = None,
    flags: Iterable[str] = (),
    operation: str | None = None,
    amount_usd: AmountFn | None = None,
    modifiable_fields: Iterable[str] = (),
    max_result_chars: int | None = None,
    timeout: float = _WRITE_DEFAULT_TIMEOUT,
    version: int = 1,
    executor: Executor | str = Executor.SERVER,
    input_model: type[BaseModel] | None = None,
    idempotency_key: KeyFn | None = None,
    tier: Tier | None = None,
    describe: DescribeFn | None = None,
    summarize_on_truncate: Callable[[Any], str] | None = None,
    blocking: bool = True,
    refresh: Iterable[str] = (),
    regenerate: RegenerateFn | None = None,
    quoted_at: QuotedAtFn | None = None,
    steps: StepsFn | None = None,
) -> Callable[[Callable[..., Any]], Capability]: ...


def capability(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    kind: Kind | str = Kind.READ,
    risk: Risk | str = Risk.LOW,
    replay: Replay | str | None = None,
    flags: Iterable[str] = (),
    operation: str | None = None,
    amount_usd: AmountFn | None = None,
    modifiable_fields: Iterable[str] = (),
    max_result_chars: int | None = None,
    timeout: float = _WRITE_DEFAULT_TIMEOUT,
    version: int = 1,
    executor: Executor | str = Executor.SERVER,
    input_model: type[BaseModel] | None = None,
    idempotency_key: KeyFn | None = None,
    tier: Tier | None = None,
    describe: DescribeFn | None = None,
    summarize_on_truncate: Callable[[Any], str] | None = None,
    blocking: bool = True,
    refresh: Iterable[str] = (),
    regenerate: RegenerateFn | None = None,
    quoted_at: QuotedAtFn | None = None,
    steps: StepsFn | None = None,
) -> Capability | Callable[[Callable[..., Any]], Capability]:
    """Declare a capability. Use bare (``@capability``) or with options (``@capability(kind=...)``).

    The handler takes its input either as keyword arguments (one per field, the input model is
    built from the signature) or as a single pydantic model parameter (``input_model``, or a
    parameter annotated with a ``BaseModel`` subclass). A parameter annotated ``CallContext``
    receives the call's context. ``replay`` defaults to ``safe`` for read/preview and ``never``
    otherwise; ``resume`` is ``never`` whose handler settles a call a crash interrupted itself
    (it is called again with the same ``ctx.idempotency_key`` and must not act twice).

    A sync handler runs in a worker thread, so that it cannot stall the event loop. One that
    never blocks (no I/O, no lock, no sleep: it computes and returns at once) may say so with
    ``blocking=False``: it is then called on the event loop, saving the thread round trip. It
    is trusted to return quickly: its ``timeout`` cannot interrupt it.

    ``refresh`` names reads (of the same agent, taking no required argument) to re-run after a
    call succeeds (``refresh=["balance_check"]`` on a send): each is recorded as an ordinary
    read call whose ``tool_call_start`` says which call it refreshes, and its result reaches
    the model with the write's.

    ``regenerate`` makes fresh arguments for a pending call from its old ones (a new quote
    for a swap whose quote went stale): the person asks for it from the card, the old approval
    ends ``superseded`` and the call waits for a new one (``Agent.regenerate``). ``quoted_at``
    says when the price the arguments rest on was quoted; the card shows its age. ``steps``
    declares a call made of steps, shown on one card and run each through the ledger
    (``fiduciary.steps``; it needs ``replay="resume"``).
    """

    def build(func: Callable[..., Any]) -> Capability:
        built = _build(
            func,
            name=name,
            description=description,
            kind=Kind(kind),
            risk=Risk(risk),
            replay=replay,
            flags=frozenset(flags),
            operation=operation,
            amount_usd=amount_usd,
            modifiable_fields=tuple(modifiable_fields),
            max_result_chars=max_result_chars,
            timeout=timeout,
            version=version,
            executor=Executor(executor),
            input_model=input_model,
            idempotency_key=idempotency_key,
            tier=tier,
            describe=describe,
            summarize_on_truncate=summarize_on_truncate,
            blocking=blocking,
            refresh=(refresh,) if isinstance(refresh, str) else tuple(refresh),
        )
        if steps is not None and built.replay is not Replay.RESUME:
            raise ConfigurationError(f"{built.name}: a call made of steps needs replay='resume'")
        return replace(built, regenerate=regenerate, quoted_at=quoted_at, steps=steps)

    if fn is not None:
        return build(fn)
    return build


def _build(
    func: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    kind: Kind,
    risk: Risk,
    replay: Replay | str | None,
    flags: frozenset[str],
    operation: str | None,
    amount_usd: AmountFn | None,
    modifiable_fields: tuple[str, ...],
    max_result_chars: int | None,
    timeout: float,
    version: int,
    executor: Executor,
    input_model: type[BaseModel] | None,
    idempotency_key: KeyFn | None,
    tier: Tier | None,
    describe: DescribeFn | None,
    summarize_on_truncate: Callable[[Any], str] | None = None,
    blocking: bool = True,
    refresh: tuple[str, ...] = (),
) -> Capability:
    cap_name = name or func.__name__
    bare = cap_name.replace("_", "").replace("-", "")
    if not (bare.isascii() and bare.isalnum()) or len(cap_name) > 64:
        raise ConfigurationError(f"capability name {cap_name!r}: use letters, digits, _ or -")
    try:
        hints = get_type_hints(func, include_extras=True)
    except Exception as exc:  # unresolvable annotations are a programming error
        raise ConfigurationError(f"{cap_name}: cannot resolve type hints: {exc}") from exc
    sig = inspect.signature(func)
    ctx_param: str | None = None
    deps_type: Any = None
    fields: dict[str, Any] = {}
    model_param: str | None = None
    for pname, param in sig.parameters.items():
        annotation = hints.get(pname, Any)
        if annotation is CallContext or (pname == "ctx" and pname not in hints):
            ctx_param = pname
            continue
        if get_origin(annotation) is CallContext:  # CallContext[T]: its deps are a T
            ctx_param, deps_type = pname, get_args(annotation)[0]
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationError(f"{cap_name}: *args/**kwargs cannot be a model's input")
        is_model = inspect.isclass(annotation) and issubclass(annotation, BaseModel)
        if model_param is None and (input_model is not None or is_model):
            if fields:
                raise ConfigurationError(f"{cap_name}: a model parameter must be the only input")
            model_param = pname
            if input_model is None:
                input_model = annotation
            continue
        if model_param is not None:
            raise ConfigurationError(f"{cap_name}: a model parameter must be the only input")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (annotation, default)

    call_style: Literal["fields", "model"]
    if input_model is not None:
        call_style = "model"
        if fields or model_param is None:
            raise ConfigurationError(
                f"{cap_name}: an explicit input_model needs one parameter to receive it"
            )
        model = input_model
    else:
        call_style = "fields"
        model = create_model(
            _camel(cap_name) + "Input",
            __config__=ConfigDict(extra="ignore"),  # a model-made "user_approved" is ignored
            **fields,
        )
    returns = hints.get("return", Any)
    output_adapter: TypeAdapter[Any] = TypeAdapter(returns)

    resolved_replay = (
        Replay(replay) if replay is not None else (Replay.NEVER if kind.is_write else Replay.SAFE)
    )
    for f in modifiable_fields:
        if f not in model.model_fields:
            raise ConfigurationError(f"{cap_name}: modifiable field {f!r} is not an input field")
    if kind.is_write and resolved_replay is Replay.SAFE and "irreversible" in flags:
        raise ConfigurationError(f"{cap_name}: an irreversible write cannot be replay='safe'")
    is_async = inspect.iscoroutinefunction(func)
    if not blocking and is_async:
        raise ConfigurationError(
            f"{cap_name}: blocking=False is for sync handlers (an async one runs on the loop)"
        )
    if cap_name in refresh or len(set(refresh)) != len(refresh):
        raise ConfigurationError(f"{cap_name}: refresh names other reads, each once")
    doc = description or inspect.getdoc(func) or ""
    if not doc:
        raise ConfigurationError(f"{cap_name}: give the capability a docstring or a description")
    return Capability(
        name=cap_name,
        description=doc.strip(),
        handler=func,
        input_model=model,
        output_adapter=output_adapter,
        kind=kind,
        risk=risk,
        replay=resolved_replay,
        flags=flags,
        operation=operation,
        amount_usd=amount_usd,
        modifiable_fields=modifiable_fields,
        max_result_chars=max_result_chars,
        timeout=timeout,
        version=version,
        executor=executor,
        idempotency_key=idempotency_key,
        tier=tier,
        describe=describe,
        summarize_on_truncate=summarize_on_truncate,
        _call_style=call_style,
        _is_async=is_async,
        _ctx_param=ctx_param,
        blocking=blocking,
        deps_type=deps_type,
        refresh=refresh,
    )


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("-", "_").split("_"))


def as_capabilities(items: Iterable[Capability | Callable[..., Any]]) -> list[Capability]:
    """Accept capabilities or plain functions (wrapped as low-risk reads)."""
    out: list[Capability] = []
    for item in items:
        out.append(item if isinstance(item, Capability) else capability(item))
    return out

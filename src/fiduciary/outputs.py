"""Typed output: a run's answer validated against a type, and its record in the log.

``Agent(output_type=T)`` (or ``run(..., output_type=T)``) with ``T`` a pydantic model, a
dataclass, a ``TypedDict`` or a scalar (``int``, ``Decimal``, ``list[str]``, ...): the model is
offered one more tool, ``final_result``, whose arguments are a ``T`` — as Pydantic AI's default
*tool output* does: every provider that calls tools can answer that way, and a scripted model
scripts it as any call (``Call("final_result", {...})``). A type whose JSON schema is not an
object is wrapped: the tool takes ``{"response": <T>}``. For ``str`` no tool is offered: the
answer's text is the output. A plain-text answer is accepted too when its text is a valid ``T``
as JSON.

An answer that does not validate goes back to the model with the errors (the output call's
result, or a note on its turn, ``turn_complete.output_error``), at most ``output_retries``
times for each user message; then the run fails (``run_failed``, reason ``invalid_output``).
A valid answer ends the run: ``run_completed.output`` holds it as JSON (redacted, as every
event is), and ``OutputSpec.load`` turns that record back into a ``T``.

``run_started.output_type`` records the type's *name* (``output_type_name``: ``module.Name``)
and ``output_retries`` the retries, never a schema: a process that resumes the run must know a
type of that name — the agent's own ``output_type``, or one given to its ``run`` in that
process — else it refuses the run, touching nothing (``RunError("agent_mismatch")``). A worker
or a server that drives runs of several types is given an agent per type, or the type as the
agent's ``output_type``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import JsonValue, TypeAdapter, ValidationError, create_model

from .events import RunCompleted, RunStarted
from .exceptions import ConfigurationError, RunError
from .models.base import ToolSpec
from .stores.base import RunRecord, Store

__all__ = [
    "DEFAULT_OUTPUT_RETRIES",
    "OUTPUT_TOOL",
    "Invalid",
    "OutputSpec",
    "OutputTypes",
    "Valid",
    "output_type_name",
    "recorded_output",
]

T = TypeVar("T")

OUTPUT_TOOL = "final_result"
DEFAULT_OUTPUT_RETRIES = 1

_DESCRIPTION = (
    "Give your final answer: call this once, alone in your turn, when you have it. Its "
    "arguments are the answer; they are checked, and if they are not valid you are told why."
)
_TEXT_REFUSED = (
    "Your answer must be given by calling {tool} (its arguments are the answer), not as text."
)
_NOT_ALONE = (
    "Call {tool} alone, in a turn of its own, once the results of your other calls are back."
)
_MAX_ERRORS = 10


def output_type_name(output_type: Any) -> str:
    """The name a run records for its output type: ``module.QualName`` for a class defined
    outside the builtins, the type's own name for a builtin (``int``), its repr otherwise
    (``list[int]``)."""
    if isinstance(output_type, type):
        module = output_type.__module__
        if module == "builtins":
            return output_type.__qualname__
        return f"{module}.{output_type.__qualname__}"
    return repr(output_type)


@dataclass(frozen=True, slots=True)
class Valid(Generic[T]):
    """An answer that validated: the typed value, and its JSON record."""

    value: T
    record: JsonValue


@dataclass(frozen=True, slots=True)
class Invalid:
    """An answer that did not validate: what the model is told."""

    message: str


class OutputSpec(Generic[T]):
    """What a run's answer must be: the type, how it is asked for, how it is recorded."""

    __slots__ = ("_arguments", "adapter", "name", "output_type", "retries", "tool")

    def __init__(self, output_type: type[T] | Any, *, retries: int = DEFAULT_OUTPUT_RETRIES):
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigurationError("output_retries must be an integer >= 0")
        try:
            adapter: TypeAdapter[T] = TypeAdapter(output_type)
            schema = adapter.json_schema()
        except Exception as exc:  # pydantic cannot build a schema for it: a programming error
            raise ConfigurationError(
                f"output_type {output_type!r} cannot be validated by pydantic: {exc}"
            ) from exc
        self.output_type = output_type
        self.name = output_type_name(output_type)
        self.retries = retries
        self.adapter = adapter
        self.tool: ToolSpec | None = None
        # the final-answer tool's arguments: T itself when its schema is an object, else
        # {"response": T} (a tool's input schema must be an object)
        self._arguments: TypeAdapter[Any] | None = None
        if output_type is str:
            return  # the answer's text is the output
        if schema.get("type") != "object":
            wrapper = create_model("FinalResult", response=(output_type, ...))
            self._arguments = TypeAdapter(wrapper)
            schema = self._arguments.json_schema()
        schema.pop("title", None)
        description = _DESCRIPTION
        doc = getattr(output_type, "__doc__", None)
        if isinstance(output_type, type) and doc and doc != type(output_type).__doc__:
            description = f"{description} The answer: {' '.join(doc.split())}"[:1024]
        # (no effect: a provider that refuses tools with effects may offer it, as a read)
        self.tool = ToolSpec(OUTPUT_TOOL, description, schema, kind="read")

    def __repr__(self) -> str:
        return f"OutputSpec({self.name}, retries={self.retries})"

    # --- the model's answer -------------------------------------------------------------
    def from_call(self, arguments: dict[str, Any] | None) -> Valid[T] | Invalid:
        """The arguments of a ``final_result`` call (None: they were not a JSON object)."""
        if arguments is None:
            return Invalid("The arguments of final_result were not a JSON object.")
        try:
            if self._arguments is not None:
                value = self._arguments.validate_python(arguments).response
            else:
                value = self.adapter.validate_python(arguments)
        except ValidationError as exc:
            return Invalid(_errors(exc, wrapped=self._arguments is not None))
        return Valid(value, self.dump(value))

    def from_text(self, text: str) -> Valid[T] | Invalid:
        """A turn that ended with text and no call: the text itself is the answer for ``str``;
        for another type, when it is a valid one as JSON (in a code fence or not)."""
        if self.tool is None:
            value = self.adapter.validate_python(text)
            return Valid(value, self.dump(value))
        body = _unfenced(text)
        refused = _TEXT_REFUSED.format(tool=OUTPUT_TOOL)
        if body:
            try:
                value = self.adapter.validate_json(body)
            except ValidationError as exc:
                if all(e.get("type") != "json_invalid" for e in exc.errors()):
                    # JSON, but not a valid answer: what is wrong with it, too
                    return Invalid(f"{refused}\n{_errors(exc, wrapped=False)}")
            else:
                return Valid(value, self.dump(value))
        return Invalid(refused)

    @staticmethod
    def not_alone() -> Invalid:
        """A ``final_result`` call beside other calls (or a second one) is not the answer."""
        return Invalid(_NOT_ALONE.format(tool=OUTPUT_TOOL))

    # --- the record -----------------------------------------------------------------------
    def dump(self, value: T) -> JsonValue:
        """The value as JSON (Decimal as a string, datetime in ISO form)."""
        dumped: JsonValue = json.loads(self.adapter.dump_json(value))
        return dumped

    def load(self, record: JsonValue) -> T:
        """A recorded output back as a ``T`` (in any process that knows the type)."""
        return self.adapter.validate_json(json.dumps(record))


def _unfenced(text: str) -> str:
    body = text.strip()
    if body.startswith("```") and body.endswith("```") and len(body) >= 6:
        body = body[3:-3]
        first, _, rest = body.partition("\n")
        if first.strip().isalpha() or not first.strip():  # ```json
            body = rest
    return body.strip()


def _errors(exc: ValidationError, *, wrapped: bool) -> str:
    """Pydantic's errors as the model is told them: where and what, never the input itself
    (it could hold what the model must not be shown again, and it has it)."""
    lines: list[str] = []
    for error in exc.errors(include_url=False, include_input=False)[:_MAX_ERRORS]:
        loc = list(error.get("loc", ()))
        if wrapped and loc[:1] == ["response"]:
            loc = loc[1:]
        where = ".".join(str(part) for part in loc) or "(the answer)"
        lines.append(f"- {where}: {error.get('msg', 'invalid')}")
    more = exc.error_count() - _MAX_ERRORS
    if more > 0:
        lines.append(f"- and {more} more")
    return (
        "The answer is not valid:\n"
        + "\n".join(lines)
        + "\nCorrect it and call final_result again."
    )


class OutputTypes:
    """The output types an agent knows: its own (``Agent(output_type=...)``, the default of
    its runs) and every one given to its ``run`` in this process, by name."""

    __slots__ = ("_default_retries", "_known", "default")

    def __init__(
        self,
        output_type: Any = None,
        *,
        retries: int = DEFAULT_OUTPUT_RETRIES,
        names: Iterable[str] = (),
    ):
        if OUTPUT_TOOL in names:
            raise ConfigurationError(
                f"{OUTPUT_TOOL} is the name of a typed answer's tool: give the capability another"
            )
        self.default: OutputSpec[Any] | None = None
        self._known: dict[str, OutputSpec[Any]] = {}
        if output_type is not None:
            self.default = self._learn(OutputSpec(output_type, retries=retries))
        elif isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigurationError("output_retries must be an integer >= 0")
        self._default_retries = retries if self.default is None else self.default.retries

    def _learn(self, spec: OutputSpec[Any]) -> OutputSpec[Any]:
        known = self._known.get(spec.name)
        if known is not None and known.output_type is not spec.output_type:
            raise ConfigurationError(
                f"two output types are named {spec.name}: give them distinct names"
            )
        self._known[spec.name] = spec
        return spec

    def adopt(self, other: OutputTypes) -> None:
        """Know the types ``other`` knows too (a replay agent: the types of the agent whose
        run it replays, the ones given to its ``run`` in this process included)."""
        for spec in other._known.values():
            self._learn(spec)

    def for_new(self, output_type: Any, retries: int | None) -> OutputSpec[Any] | None:
        """The spec of a new run: the one asked for, else the agent's (None: plain text)."""
        if output_type is None:
            if retries is None or self.default is None:
                return self.default
            return self._learn(OutputSpec(self.default.output_type, retries=retries))
        wanted = self._default_retries if retries is None else retries
        known = self._known.get(output_type_name(output_type))
        if known is not None and known.output_type is output_type and known.retries == wanted:
            return known  # (its adapter and schema are built once)
        return self._learn(OutputSpec(output_type, retries=wanted))

    def refusal(self, started: RunStarted) -> str | None:
        """Why this agent cannot drive the run: its output type is unknown here (None: it
        is known, or the run has none)."""
        try:
            self.of_run(started)
        except LookupError as exc:
            return str(exc)
        return None

    async def output_of(self, store: Store, run: RunRecord) -> Any:
        """A completed run's answer as a value of its output type (None: it has none)."""
        record = await recorded_output(store, run)
        if record is None:
            return None
        first = await store.read_events(run.run_id, limit=1)
        started = first[0] if first and isinstance(first[0], RunStarted) else None
        try:
            spec = self.of_run(started)
        except LookupError as exc:
            raise RunError("agent_mismatch", f"run {run.run_id} {exc}") from None
        return record if spec is None else spec.load(record)

    def of_run(self, started: RunStarted | None) -> OutputSpec[Any] | None:
        """The spec a run recorded (None: it has none); ``LookupError`` when this process does
        not know a type of that name."""
        if started is None or started.output_type is None:
            return None
        known = self._known.get(started.output_type)
        if known is None:
            raise LookupError(
                f"its answers are typed {started.output_type}, an output type this agent does not "
                "know (give the agent that output_type)"
            )
        retries = started.output_retries
        if retries is None or retries == known.retries:
            return known
        return OutputSpec(known.output_type, retries=retries)

    @staticmethod
    def started_fields(spec: OutputSpec[Any] | None) -> dict[str, Any]:
        """What ``run_started`` records of a run's output type (nothing for plain text)."""
        if spec is None:
            return {}
        return {"output_type": spec.name, "output_retries": spec.retries}


async def recorded_output(store: Store, run: RunRecord) -> JsonValue:
    """The JSON answer of a completed run's latest completion (None: it has none)."""
    if run.status != "completed" or run.last_seq < 1:
        return None
    last = await store.read_events(run.run_id, after_seq=run.last_seq - 1, limit=1)
    if last and isinstance(last[0], RunCompleted):
        return last[0].output
    return None

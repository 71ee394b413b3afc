"""External MCP tools as fiduciary capabilities: ``await mcp_capabilities(server, ...)``.

Every tool of the server becomes a ``Capability`` that passes every gate. **A tool is a write**
(kind ``execute``, replay ``never``: through the ledger and the policy, and so, unmapped, held
for a person) unless the host declares it a read (``reads``), or the server marks it
``readOnlyHint`` *and* the host trusts that server's hints (``trust_read_only_hint``).
``operations`` maps a tool to the policy's operation and to the argument holding its USD amount
(``{"transfer": ToolPolicy("send", amount="amount")}``).

The input is validated against the tool's own JSON schema (with ``jsonschema``) at the gates'
validation step, before anything is sent. The output (text and structured content) goes back
through the gates like any capability's: redacted, cut to the result budget, audited. A write
whose transport times out or loses the server is ``outcome_unknown`` and never retried; a read
is cached for ``cache_seconds`` by name and argument digest. A server that dies or hangs is
reconnected with backoff (``_connection``); its tools refuse at once meanwhile.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from types import TracebackType
from typing import Any, ClassVar

import jsonschema
from pydantic import BaseModel, ConfigDict, model_validator

from ..capabilities import Capability, Kind, Risk, args_digest, capability
from ..context.skills import Skill
from ..exceptions import CapabilityError, ConfigurationError
from ._connection import Connection, McpServer
from ._sdk import mcp_types

__all__ = ["McpServer", "McpToolset", "ToolPolicy", "mcp_capabilities"]

DEFAULT_TIMEOUT = 30.0
DEFAULT_CACHE_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """How the policy sees one tool: its ``operation`` (thresholds, deny lists) and the
    argument that holds its amount in USD (``amount``), and optionally a fixed ``tier``."""

    operation: str | None = None
    amount: str | None = None
    risk: Risk = Risk.HIGH


class McpToolset(Sequence[Capability]):
    """The capabilities made from one or more MCP servers, and their live connections.

    A sequence of capabilities (pass it to ``Agent(capabilities=[*toolset, ...])``); close it
    with ``aclose()`` or use it as ``async with``."""

    def __init__(self, capabilities: list[Capability], connections: list[Connection]) -> None:
        self._caps = capabilities
        self._connections = connections
        self.origin: dict[str, str] = {}  # capability name -> server name
        self.skill_servers: frozenset[str] | None = None  # whose prompts are skills (None: all)

    def __len__(self) -> int:
        return len(self._caps)

    def __getitem__(self, index: Any) -> Any:
        return self._caps[index]

    def __iter__(self) -> Iterator[Capability]:
        return iter(self._caps)

    @classmethod
    def combine(cls, toolsets: Sequence[McpToolset]) -> McpToolset:
        """One toolset of several; a capability name two servers share is refused, naming both."""
        caps: list[Capability] = []
        origin: dict[str, str] = {}
        for toolset in toolsets:
            for cap in toolset:
                server = toolset.origin.get(cap.name, "?")
                if cap.name in origin:
                    raise _collision(cap.name, origin[cap.name], server)
                origin[cap.name] = server
                caps.append(cap)
        combined = cls(caps, [c for t in toolsets for c in t._connections])
        combined.origin = origin
        return combined

    @property
    def names(self) -> list[str]:
        return [c.name for c in self._caps]

    def connection(self, server: str) -> Connection:
        for conn in self._connections:
            if conn.server.name == server:
                return conn
        raise KeyError(server)

    async def skills(self) -> list[Skill]:
        """The servers' prompts that need no arguments, as skills (their text is the body;
        the name made lower-case with hyphens, after the server's prefix)."""
        found: list[Skill] = []
        for conn in self._connections:
            if self.skill_servers is not None and conn.server.name not in self.skill_servers:
                continue
            for prompt, text in await conn.prompts():
                named = conn.server.prefix + prompt.name
                name = re.sub(r"[^a-z0-9]+", "-", named.lower()).strip("-")[:64].strip("-")
                description = (prompt.description or prompt.title or prompt.name).strip()
                if name and text.strip():
                    found.append(Skill(name, description[:1024], text.strip()))
        return found

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self._connections))

    async def __aenter__(self) -> McpToolset:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def mcp_capabilities(
    server: McpServer | Iterable[McpServer],
    *,
    prefix: str | None = None,
    reads: Collection[str] = (),
    trust_read_only_hint: bool = False,
    operations: Mapping[str, ToolPolicy | str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 - the calls' bound, not this await's
    cache_seconds: float = DEFAULT_CACHE_SECONDS,
    max_result_chars: int | None = None,
    connect_timeout: float = 15.0,
) -> McpToolset:
    """Connect to ``server`` (or several) and return their tools as capabilities.

    ``prefix`` (else each server's own) is put before the tool names; two servers offering
    the same name without a prefix are refused with a ``ConfigurationError`` naming both.
    ``reads`` and ``operations`` name tools as the server does (without the prefix).
    """
    servers = [server] if isinstance(server, McpServer) else list(server)
    if not servers:
        raise ConfigurationError("mcp_capabilities needs at least one server")
    if timeout <= 0 or cache_seconds < 0:
        raise ConfigurationError("timeout must be positive and cache_seconds not negative")
    mapped = {k: ToolPolicy(v) if isinstance(v, str) else v for k, v in (operations or {}).items()}
    connections = [Connection(s, connect_timeout=connect_timeout) for s in servers]
    try:
        await asyncio.gather(*(c.start() for c in connections))
    except BaseException:
        await asyncio.gather(*(c.aclose() for c in connections))
        raise
    caps: list[Capability] = []
    origin: dict[str, str] = {}
    try:
        for conn in connections:
            cache = _ReadCache(cache_seconds)
            head = conn.server.prefix if prefix is None else prefix
            for tool in conn.tools:
                cap = _tool_capability(
                    conn,
                    tool,
                    name=_capability_name(head + tool.name),
                    is_read=_is_read(tool, reads, trust_read_only_hint),
                    policy=mapped.get(tool.name),
                    timeout=timeout,
                    cache=cache,
                    max_result_chars=max_result_chars,
                )
                if cap.name in origin:
                    raise _collision(cap.name, origin[cap.name], conn.server.name)
                origin[cap.name] = conn.server.name
                caps.append(cap)
    except BaseException:
        await asyncio.gather(*(c.aclose() for c in connections))
        raise
    toolset = McpToolset(caps, connections)
    toolset.origin = origin
    return toolset


def _collision(name: str, first: str, second: str) -> ConfigurationError:
    return ConfigurationError(
        f"the tool name {name!r} is offered by two MCP servers, {first!r} and {second!r}: "
        "give one of them a prefix"
    )


def _is_read(tool: mcp_types.Tool, reads: Collection[str], trust_hint: bool) -> bool:
    if tool.name in reads:
        return True
    hinted = tool.annotations is not None and tool.annotations.read_only_hint is True
    return trust_hint and hinted


_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")


def _capability_name(name: str) -> str:
    return _NOT_NAME.sub("_", name)[:64]


class _ReadCache:
    """Results of reads for a few seconds, by tool and argument digest (the seed's cache)."""

    def __init__(self, seconds: float, now: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.now = now
        self._entries: dict[tuple[str, str], tuple[float, Any]] = {}

    def get(self, tool: str, digest: str) -> Any | None:
        hit = self._entries.get((tool, digest))
        if hit is None or hit[0] < self.now():
            return None
        return hit[1]

    def put(self, tool: str, digest: str, value: Any) -> None:
        if self.seconds <= 0:
            return
        if len(self._entries) > 1000:  # bounded: expired entries go first, then the oldest
            now = self.now()
            self._entries = {k: v for k, v in self._entries.items() if v[0] >= now}
            while len(self._entries) > 1000:
                del self._entries[next(iter(self._entries))]
        self._entries[(tool, digest)] = (self.now() + self.seconds, value)


class _McpInput(BaseModel):
    """An MCP tool's arguments: any JSON object its schema accepts (checked on validation)."""

    model_config = ConfigDict(extra="allow")
    tool_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    validator: ClassVar[Any] = None

    @model_validator(mode="before")
    @classmethod
    def _check_schema(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError("the arguments must be a JSON object")
        # kept as the server receives them: JSON numbers, not the Decimals fiduciary parsed, so
        # the arguments recorded (and approved) validate again as they are (an approval's check)
        data = _to_wire(data)
        errors = sorted(cls.validator.iter_errors(data), key=lambda e: list(e.path))
        if errors:
            shown = "; ".join(
                f"{'.'.join(str(p) for p in e.path) or '(input)'}: {e.message}" for e in errors[:5]
            )
            raise ValueError(shown)
        return data

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return dict(cls.tool_schema)


def _input_model(tool: mcp_types.Tool) -> type[_McpInput]:
    schema = dict(tool.input_schema or {"type": "object"})
    schema.setdefault("type", "object")
    schema.pop("title", None)
    checker = jsonschema.validators.validator_for(schema)
    try:
        checker.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigurationError(f"the MCP tool {tool.name!r} has an invalid input schema") from exc
    model: type[_McpInput] = type(
        f"McpInput_{_capability_name(tool.name)}", (_McpInput,), {"__module__": __name__}
    )
    model.tool_schema = schema
    model.validator = checker(schema)
    return model


def _to_wire(value: Any) -> Any:
    """Arguments as the MCP server expects them: exact decimals become JSON numbers."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _to_wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_wire(v) for v in value]
    return value


def _amount_of(field: str) -> Callable[[Any, Any], Decimal | None]:
    def amount(args: BaseModel, ctx: Any) -> Decimal | None:
        value = args.model_dump().get(field)
        if value is None or isinstance(value, bool):
            return None
        try:
            return Decimal(str(value))
        except InvalidOperation:
            return None

    return amount


def _tool_capability(
    conn: Connection,
    tool: mcp_types.Tool,
    *,
    name: str,
    is_read: bool,
    policy: ToolPolicy | None,
    timeout: float,
    cache: _ReadCache,
    max_result_chars: int | None,
) -> Capability:
    model = _input_model(tool)
    remote = tool.name

    async def call_mcp_tool(args: _McpInput) -> dict[str, Any]:
        wire = _to_wire(args.model_dump())
        digest = args_digest(wire)
        if is_read:
            cached = cache.get(remote, digest)
            if cached is not None:
                return dict(cached, cached=True)
        result = await conn.call(remote, wire, seconds=timeout, is_write=not is_read)
        output = _output(result)
        if result.is_error:
            # the tool itself answered with an error: it refused, it did not act
            raise CapabilityError(
                "mcp_tool_error", output.get("text") or f"{remote} reported an error"
            )
        if is_read:
            cache.put(remote, digest, output)
        return output

    description = (tool.description or tool.title or remote).strip()
    description += f" (MCP server {conn.server.name})"
    return capability(
        name=name,
        description=description,
        kind=Kind.READ if is_read else Kind.EXECUTE,
        risk=Risk.LOW if is_read else (policy.risk if policy else Risk.HIGH),
        flags=frozenset({"mcp"}),
        operation=policy.operation if policy else None,
        amount_usd=_amount_of(policy.amount) if policy and policy.amount else None,
        timeout=timeout + 1.0,  # the call's own timeout answers first, as outcome unknown
        input_model=model,
        max_result_chars=max_result_chars,
    )(call_mcp_tool)


def _output(result: mcp_types.CallToolResult) -> dict[str, Any]:
    texts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            texts.append(block.text)
        else:
            texts.append(f"[{block.type} content omitted]")
    out: dict[str, Any] = {"text": "\n".join(texts)}
    if result.structured_content is not None:
        out["structured"] = result.structured_content
    return out

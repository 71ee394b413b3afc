"""fiduciary's capabilities to any MCP client: over stdio, and as a streamable-HTTP ASGI app.

``tools/list`` is the agent's whitelist (descriptions, input schemas, a read-only hint for reads).
``tools/call`` is a run through the gates (``bridge``); a write waiting for a person is also
offered to the person at the client when it supports elicitation (``elicit``). Runs and
approvals are resources (``fiduciary://runs/{id}``, ``fiduciary://approvals/{id}``), each
principal seeing only its own; fiduciary's documentation is two more, ``docs://guide`` and
``docs://api`` (``docs``), for every caller and every source of tools. Skills are prompts
(``skill-<name>``): the ones given, and the agent's own. ``build_server`` also serves other
tools (``Tools``): the claude CLI provider's ``proposals``, whose calls run nothing.

Who is asking: over stdio, the principal given on the command line; over HTTP, the principal of
the API key in ``Authorization: Bearer`` (the server's ``KeyStore``). The HTTP app is stateless
(every request authenticated on its own; no session to take over) and answers JSON.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from contextlib import AsyncExitStack, suppress
from typing import Any, Protocol
from uuid import UUID

from .._version import __version__
from ..capabilities import Principal
from ..context.skills import Skill
from ..dual_control import as_voted
from ..exceptions import FiduciaryError
from ._sdk import MCPError, mcp_types
from .bridge import CallOutcome, McpGateway
from .docs import API_URI, GUIDE_URI, api_text, doc_resources, guide_text
from .elicit import ApprovalAsker, elicits_forms
from .origins import Origins, forbidden_origin, origin_of, served_url

__all__ = [
    "INSTRUCTIONS",
    "Caller",
    "GatewayTools",
    "McpHttpApp",
    "Tools",
    "build_server",
    "mcp_route",
    "serve_stdio",
]

RUNS_READ = "runs:read"
RUNS_WRITE = "runs:write"
APPROVALS_DECIDE = "approvals:decide"
_KEY_SCOPE = "fiduciary.mcp.key"
_CONSOLE_SCOPE = "fiduciary.mcp.console_url"
_INVALID_PARAMS = -32602
_RUN = "fiduciary://runs/"
_APPROVAL = "fiduciary://approvals/"
_TEMPLATES = (
    mcp_types.ResourceTemplate(
        uri_template=_RUN + "{run_id}",
        name="run",
        description="A run of yours: its status, title and events.",
        mime_type="application/json",
    ),
    mcp_types.ResourceTemplate(
        uri_template=_APPROVAL + "{approval_id}",
        name="approval",
        description="An approval of yours: the action, its arguments and digest, its status.",
        mime_type="application/json",
    ),
)


INSTRUCTIONS = (
    "Every tool runs through fiduciary's gates. A write may answer pending_approval: a person "
    "decides it in the console (or here, if this client can ask them); then call the same tool "
    "with the same arguments again for its outcome. Nothing you send approves it. How the "
    "gates decide, and every tool's schema: the resources docs://guide and docs://api."
)


class Caller:
    """Who a request acts for, and what its key allows (stdio: everything, as the flag says);
    ``console_url``: where this caller's links to the console point (None: the gateway's)."""

    def __init__(
        self,
        principal: Principal,
        scopes: frozenset[str] | None = None,
        *,
        console_url: str | None = None,
    ) -> None:
        self.principal = principal
        self.scopes = scopes
        self.console_url = console_url

    def allows(self, scope: str) -> bool:
        return self.scopes is None or scope in self.scopes or "admin" in self.scopes

    def require(self, scope: str) -> None:
        if not self.allows(scope):
            raise MCPError(_INVALID_PARAMS, f"this needs an API key with the scope {scope}")


class Tools(Protocol):
    """What a server offers as tools: ``McpGateway`` (the agent's capabilities, every call a
    run through the gates), or anything else that lists tools and answers calls."""

    def listed(self) -> list[mcp_types.Tool]: ...

    async def call(
        self, ctx: Any, caller: Caller, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult: ...


class GatewayTools:
    """The agent's whitelist as tools; a pending write's approval is also offered through
    elicitation where the client supports it (``elicit``)."""

    def __init__(self, gateway: McpGateway) -> None:
        self.gateway = gateway
        self.asker = ApprovalAsker(gateway)

    def listed(self) -> list[mcp_types.Tool]:
        return [
            mcp_types.Tool(
                name=cap.name,
                description=cap.description,
                input_schema=_object_schema(cap.input_schema()),
                annotations=mcp_types.ToolAnnotations(
                    read_only_hint=not cap.is_write,
                    destructive_hint=cap.is_write,
                    idempotent_hint=not cap.is_write,
                ),
            )
            for cap in self.gateway.capabilities()
        ]

    async def call(
        self, ctx: Any, caller: Caller, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        caller.require(RUNS_WRITE)
        who = caller.principal
        answer: CallOutcome | mcp_types.InputRequiredResult
        try:
            answer = await self.gateway.call(
                who, params.name, dict(params.arguments or {}), console_url=caller.console_url
            )
            if (
                answer.status == "pending_approval"
                and caller.allows(APPROVALS_DECIDE)
                and elicits_forms(ctx)
            ):
                answer = await self.asker.offer(ctx, who, params, answer)
        except FiduciaryError as exc:
            return _tool_error(f"{type(exc).__name__}: {exc}")
        if isinstance(answer, mcp_types.InputRequiredResult):
            return answer
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(text=answer.text)],
            structured_content=answer.structured(),
            is_error=answer.is_error,
        )


def build_server(
    source: McpGateway | Tools,
    *,
    principal: Principal | None = None,
    skills: Sequence[Skill] = (),
    instructions: str = INSTRUCTIONS,
) -> Any:
    """The low-level SDK server. ``principal``: the fixed one (stdio); else per HTTP request.
    Runs and approvals are resources when ``source`` is a gateway."""
    from mcp.server import Server

    given = {s.name: s for s in skills}

    def prompts() -> dict[str, Skill]:
        # the skills given, and the agent's own (its configured MCP servers' prompts among them)
        mine = gateway.agent.skills if gateway is not None else {}
        return {f"skill-{n}": s for n, s in {**mine, **given}.items()}

    gateway = source if isinstance(source, McpGateway) else None
    tools = GatewayTools(source) if isinstance(source, McpGateway) else source

    def caller(ctx: Any) -> Caller:
        if principal is not None:
            return Caller(principal)
        request = getattr(ctx, "request", None)
        scope = {} if request is None else request.scope
        key = scope.get(_KEY_SCOPE)
        if key is None:  # the ASGI layer lets no request through without one
            raise MCPError(_INVALID_PARAMS, "unauthenticated")
        return Caller(
            Principal(key.principal, frozenset(key.scopes)),
            frozenset(key.scopes),
            console_url=scope.get(_CONSOLE_SCOPE),
        )

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=tools.listed())

    async def call_tool(
        ctx: Any, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        return await tools.call(ctx, caller(ctx), params)

    async def list_resources(ctx: Any, params: Any) -> mcp_types.ListResourcesResult:
        resources = doc_resources()  # the docs: anyone's; runs and approvals: the caller's
        who = caller(ctx)
        if gateway is not None and who.allows(RUNS_READ):
            resources += await _resources(gateway, who.principal.actor_id)
        return mcp_types.ListResourcesResult(resources=resources)

    async def list_resource_templates(
        ctx: Any, params: Any
    ) -> mcp_types.ListResourceTemplatesResult:
        return mcp_types.ListResourceTemplatesResult(resource_templates=list(_TEMPLATES))

    async def read_resource(
        ctx: Any, params: mcp_types.ReadResourceRequestParams
    ) -> mcp_types.ReadResourceResult:
        uri = str(params.uri)
        who = caller(ctx)
        if uri in (GUIDE_URI, API_URI):
            text = guide_text() if uri == GUIDE_URI else api_text(tools.listed())
            return _text_resource(uri, "text/markdown", text)
        if gateway is None:
            raise MCPError(_INVALID_PARAMS, f"no resource {uri[:200]}")
        who.require(RUNS_READ)
        body = await _resource(gateway, who.principal.actor_id, uri)
        return _text_resource(uri, "application/json", body)

    async def list_prompts(ctx: Any, params: Any) -> mcp_types.ListPromptsResult:
        return mcp_types.ListPromptsResult(
            prompts=[
                mcp_types.Prompt(name=n, description=s.description) for n, s in prompts().items()
            ]
        )

    async def get_prompt(
        ctx: Any, params: mcp_types.GetPromptRequestParams
    ) -> mcp_types.GetPromptResult:
        skill = prompts().get(params.name)
        if skill is None:
            raise MCPError(_INVALID_PARAMS, f"no prompt {params.name!r}")
        return mcp_types.GetPromptResult(
            description=skill.description,
            messages=[
                mcp_types.PromptMessage(role="user", content=mcp_types.TextContent(text=skill.body))
            ],
        )

    return Server(
        "fiduciary",
        version=__version__,
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_list_resource_templates=list_resource_templates if gateway is not None else None,
        on_list_prompts=list_prompts if given or gateway is not None else None,
        on_get_prompt=get_prompt if given or gateway is not None else None,
    )


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    schema = dict(schema)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _text_resource(uri: str, mime_type: str, text: str) -> mcp_types.ReadResourceResult:
    return mcp_types.ReadResourceResult(
        contents=[mcp_types.TextResourceContents(uri=uri, mime_type=mime_type, text=text)]
    )


def _tool_error(text: str) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=text)], is_error=True)


async def _resources(gateway: McpGateway, actor: str) -> list[mcp_types.Resource]:
    """The caller's pending approvals and latest runs, as resources."""
    resources = [
        mcp_types.Resource(
            uri=f"{_APPROVAL}{a.approval_id}",
            name=f"approval {a.approval_id}",
            description=f"pending: {a.capability}",
            mime_type="application/json",
        )
        for a in await gateway.agent.pending_approvals(principal=actor)
    ]
    resources += [
        mcp_types.Resource(
            uri=f"{_RUN}{r.run_id}",
            name=f"run {r.run_id}",
            description=f"{r.status}: {r.title}",
            mime_type="application/json",
        )
        for r in await gateway.agent.list_runs(principal=actor, limit=50)
    ]
    return resources


async def _resource(gateway: McpGateway, actor: str, uri: str) -> str:
    """A run (its record and events) or an approval, if it is the caller's; else not found."""
    agent = gateway.agent
    redactor = agent.redactor
    missing = MCPError(_INVALID_PARAMS, f"no resource {uri[:200]}")
    for head in (_RUN, _APPROVAL):
        if not uri.startswith(head):
            continue
        try:
            ident = UUID(uri[len(head) :])
        except ValueError:
            raise missing from None
        if head == _RUN:
            run = await agent.store.get_run(ident)
            if run is None or run.principal != actor:
                raise missing
            events = [e.model_dump(mode="json") async for e in agent.events(ident, follow=False)]
            return json.dumps(
                {
                    "run_id": str(run.run_id),
                    "status": run.status,
                    "title": run.title,
                    "events": events,
                },
                ensure_ascii=False,
            )
        record = await agent.store.get_approval(ident)
        if record is None or record.principal != actor:
            raise missing
        # under dual control, after an approver's edit: the edited arguments the set votes on
        record = as_voted(record, await agent.store.list_votes(record.approval_id))
        edited = record.status == "pending" and record.approved_digest is not None
        return json.dumps(
            {
                "approval_id": str(record.approval_id),
                "run_id": str(record.run_id),
                "capability": record.capability,
                "status": record.status,
                "tier": record.tier,
                "args": redactor.redact(record.approved_args or record.args),
                "args_digest": record.approved_digest or record.args_digest,
                "edited": edited,
                "proposed_args_digest": record.args_digest,
                "amount_usd": None if record.amount_usd is None else str(record.amount_usd),
                "expires_at": record.expires_at.isoformat(),
            },
            ensure_ascii=False,
        )
    raise missing


async def serve_stdio(
    source: McpGateway | Tools,
    *,
    principal: Principal,
    skills: Sequence[Skill] = (),
    instructions: str = INSTRUCTIONS,
) -> None:
    """Serve MCP on this process's stdin/stdout, every call acting for ``principal``."""
    from mcp.server.stdio import stdio_server

    server = build_server(source, principal=principal, skills=skills, instructions=instructions)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


class McpHttpApp:
    """The MCP endpoint as an ASGI app (streamable HTTP, stateless, JSON answers), behind the
    server's API keys: mount it at ``/mcp`` of ``fiduciary serve``, or serve it alone.

    A request with an ``Origin`` that is not allowed (``origins``) is refused with 403 before
    its key is looked at. Links to the console point to ``public_url``, else to the address the
    request reached.

    Its session manager starts with the first request (a mounted app gets no lifespan of its
    own) or in ``lifespan()``; ``aclose()`` stops it."""

    def __init__(
        self,
        gateway: McpGateway,
        keys: Any,
        *,
        skills: Sequence[Skill] = (),
        public_url: str | None = None,
        allowed_origins: Sequence[str] = (),
    ) -> None:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        self.gateway = gateway
        self.keys = keys
        self.public_url = None if public_url is None else public_url.rstrip("/") + "/"
        mine = [] if public_url is None else [origin_of(public_url)]
        self.origins = Origins([*mine, *allowed_origins])
        self.manager = StreamableHTTPSessionManager(
            app=build_server(gateway, skills=skills), json_response=True, stateless=True
        )
        self._stack: AsyncExitStack | None = None
        self._starting = asyncio.Lock()

    async def start(self) -> None:
        async with self._starting:
            if self._stack is not None:
                return
            stack = AsyncExitStack()
            await stack.enter_async_context(_Running(self.manager))
            self._stack = stack

    async def aclose(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            with suppress(Exception):
                await stack.aclose()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        if scope["type"] != "http":
            return
        if not self.origins.allows(scope):
            await forbidden_origin(send)
            return
        key = await self._authenticate(scope)
        if key is None:
            await _unauthenticated(send)
            return
        await self.start()
        scope = dict(scope)
        scope[_KEY_SCOPE] = key
        scope[_CONSOLE_SCOPE] = self.public_url or served_url(scope)
        await self.manager.handle_request(scope, receive, send)

    async def _authenticate(self, scope: Any) -> Any:
        header = ""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                header = value.decode("latin-1")
        kind, _, token = header.partition(" ")
        if kind.lower() != "bearer" or not token.strip() or len(token) > 200:
            return None
        return await self.keys.verify(token.strip())


class _Running:
    """The manager's ``run()`` held open by a task of its own (anyio scopes stay in one task)."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> _Running:
        started = asyncio.Event()

        async def hold() -> None:
            async with self.manager.run():
                started.set()
                await self._stop.wait()

        self._task = asyncio.create_task(hold(), name="fiduciary-mcp-http")
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if self._task.done():
            self._task.result()  # raise what stopped it
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task


async def _unauthenticated(send: Any) -> None:
    body = json.dumps(
        {
            "type": "about:blank",
            "title": "unauthenticated",
            "status": 401,
            "detail": "send Authorization: Bearer <API key>",
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"www-authenticate", b'Bearer realm="fiduciary"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def mcp_route(
    agent: Any,
    keys: Any,
    *,
    path: str = "/mcp",
    public_url: str | None = None,
    allowed_origins: Sequence[str] = (),
) -> Any:
    """The route ``fiduciary serve`` mounts: the MCP endpoint at ``path``, behind ``keys``;
    console links to ``public_url`` (else the address each request reached)."""
    from starlette.routing import Route

    app = McpHttpApp(
        McpGateway(agent), keys, public_url=public_url, allowed_origins=allowed_origins
    )
    return Route(path, app, methods=["GET", "POST", "DELETE"])

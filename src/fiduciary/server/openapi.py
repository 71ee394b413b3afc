"""The OpenAPI 3.1 document, built from the server's table of operations and its models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, get_args

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from ..exceptions import ErrorCode
from .problems import PROBLEMS, ProblemBody

__all__ = ["Operation", "Param", "build_openapi"]

Auth = Literal["key", "signature", "none"]
H = TypeVar("H")


@dataclass(frozen=True, slots=True)
class Param:
    """A path or header parameter (query parameters come from the operation's query model)."""

    name: str
    where: Literal["path", "header"]
    schema: dict[str, Any]
    required: bool = True
    description: str = ""


@dataclass(frozen=True)
class Operation(Generic[H]):
    """One endpoint: its route, what it needs, what it returns, and the handler that answers it
    (whatever callable the application routes to; the document does not look at it)."""

    method: str
    path: str
    operation_id: str
    summary: str
    handler: H
    auth: Auth = "key"
    scope: str | None = None
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    params: Sequence[Param] = ()
    status: int = 200
    response: type[BaseModel] | None = None
    media_type: str = "application/json"
    problems: Sequence[str] = ()
    tags: Sequence[str] = ()
    description: str = ""
    headers: dict[str, str] = field(default_factory=dict)


_SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "description": "One server-sent event: `data` is the event's JSON.",
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}


def _drop_null(schema: dict[str, Any]) -> dict[str, Any]:
    """Query values cannot be null: ``anyOf [X, null]`` becomes ``X``."""
    options = schema.get("anyOf")
    if isinstance(options, list):
        kept = [o for o in options if o != {"type": "null"}]
        if len(kept) == 1:
            rest = {k: v for k, v in schema.items() if k != "anyOf"}
            return {**kept[0], **rest}
    return schema


def _parameters(op: Operation[Any], schemas: dict[str, Any]) -> list[dict[str, Any]]:
    """The operation's path and header parameters, then its query model's fields (whose
    definitions join ``schemas``)."""
    parameters: list[dict[str, Any]] = []
    for p in op.params:
        parameters.append(
            {
                "name": p.name,
                "in": p.where,
                "required": p.required if p.where != "path" else True,
                "schema": p.schema,
                **({"description": p.description} if p.description else {}),
            }
        )
    if op.query is not None:
        query_schema = op.query.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(query_schema.pop("$defs", {}))
        required = set(query_schema.get("required", []))
        for name, prop in query_schema.get("properties", {}).items():
            param_schema = _drop_null(dict(prop))
            param_schema.pop("title", None)
            parameters.append(
                {
                    "name": name,
                    "in": "query",
                    "required": name in required,
                    "schema": param_schema,
                    **({"description": prop["description"]} if "description" in prop else {}),
                }
            )
    return parameters


def _responses(
    op: Operation[Any], refs: Mapping[tuple[Any, JsonSchemaMode], Any], problem_ref: Any
) -> dict[str, Any]:
    """The success response, then one per status of the problems the operation may answer
    (its own, and those of every keyed, bodied or queried operation), then the default."""
    responses: dict[str, Any] = {}
    ok: dict[str, Any] = {"description": op.summary}
    if op.response is not None:
        ok["content"] = {op.media_type: {"schema": refs[(op.response, "serialization")]}}
    elif op.media_type == "text/event-stream":  # (before OpenAPI 3.2: one event's schema)
        ok["content"] = {op.media_type: {"schema": _SSE_EVENT}}
    elif op.media_type != "application/json":
        ok["content"] = {op.media_type: {"schema": {"type": "string"}}}
    responses[str(op.status)] = ok
    codes = list(op.problems)
    codes += ["internal_error", "store_unavailable"]
    if op.auth == "key":
        codes += ["unauthenticated", "insufficient_scope"]
    if op.body is not None:
        codes += [
            "invalid_json",
            "unsupported_media_type",
            "payload_too_large",
            "invalid_request",
        ]
    if op.query is not None:
        codes.append("invalid_request")
    for code in dict.fromkeys(codes):
        status = str(PROBLEMS[code][0])
        entry = responses.setdefault(
            status,
            {
                "description": PROBLEMS[code][1],
                "content": {"application/problem+json": {"schema": problem_ref}},
            },
        )
        if entry["description"] != PROBLEMS[code][1] and code not in entry["description"]:
            entry["description"] += f"; {PROBLEMS[code][1]}"
    responses["default"] = {
        "description": "An error, as problem details",
        "content": {"application/problem+json": {"schema": problem_ref}},
    }
    return responses


def build_openapi(
    operations: Sequence[Operation[Any]], *, title: str, version: str, description: str = ""
) -> dict[str, Any]:
    inputs: list[tuple[type[BaseModel], JsonSchemaMode]] = []
    for op in operations:
        if op.body is not None:
            inputs.append((op.body, "validation"))
        if op.response is not None:
            inputs.append((op.response, "serialization"))
    inputs.append((ProblemBody, "serialization"))
    refs, top = models_json_schema(
        list(dict.fromkeys(inputs)), ref_template="#/components/schemas/{model}"
    )
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    schemas["CapabilityErrorCode"] = {
        "type": "string",
        "enum": list(get_args(ErrorCode)),
        "description": "The code of a capability's refusal (CapabilityError): a tool error's "
        "error_code in the events, and a capability_refused problem's error_code.",
    }
    problem_ref = refs[(ProblemBody, "serialization")]
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        parameters = _parameters(op, schemas)
        responses = _responses(op, refs, problem_ref)
        operation: dict[str, Any] = {
            "operationId": op.operation_id,
            "summary": op.summary,
            "responses": responses,
        }
        if op.description:
            operation["description"] = op.description
        if op.tags:
            operation["tags"] = list(op.tags)
        if parameters:
            operation["parameters"] = parameters
        if op.body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": refs[(op.body, "validation")]}},
            }
        if op.auth == "key":
            operation["security"] = [{"apiKey": []}]
            if op.scope:
                operation["x-fiduciary-scope"] = op.scope
        else:
            operation["security"] = []
        paths.setdefault(op.path, {})[op.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": description},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "apiKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key from `fiduciary keys create`: "
                    "`Authorization: Bearer fid_...`",
                }
            },
        },
    }

"""Every error is a problem with a stable code; nothing returns a traceback."""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

import httpx
import pytest

from fiduciary import StoreError
from fiduciary.exceptions import ApprovalError, RunError
from fiduciary.server import PROBLEMS, ProblemError, Server
from fiduciary.server.problems import from_core_error

from .conftest import AppFactory, Keys, bearer, client_for, problem

pytestmark = pytest.mark.timeout(30)


def test_codes_are_stable_and_core_errors_map_to_them() -> None:
    assert PROBLEMS["rate_limited"] == (429, "Too many messages; retry later")
    for code in [
        "unknown",
        "already_decided",
        "expired",
        "forbidden",
        "digest_mismatch",
        "field_not_modifiable",
        "invalid_edit",
        "acknowledgement_required",
        "client_executed",
        "not_client_executed",
        "tampered",
    ]:
        mapped = from_core_error(ApprovalError(code, "x"))
        assert mapped.code in PROBLEMS
    assert from_core_error(ApprovalError("forbidden", "x")).code == "not_found"
    assert from_core_error(RunError("busy", "x")).status == 409
    assert from_core_error(RunError("forbidden", "x")).code == "not_found"
    assert from_core_error(StoreError("disk on fire")).code == "store_unavailable"
    with pytest.raises(ValueError, match="unknown problem code"):
        ProblemError("made_up")


async def test_an_unexpected_failure_is_a_500_problem_without_traceback(
    make_app: AppFactory, keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    server: Server = app.state.server

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("secret detail")

    server.agent.store.list_runs = broken  # type: ignore[method-assign]
    async with client_for(app) as client:
        with caplog.at_level(logging.ERROR, logger="fiduciary.server"):
            response = await client.get("/runs", headers=bearer(keys.alice))
    body = problem(response, 500, "internal_error")
    assert "secret detail" not in response.text
    assert "ZeroDivisionError" not in response.text
    assert body["detail"] == "the server failed; it was logged"
    assert "ZeroDivisionError" in caplog.text  # the operator sees it, in the log


async def test_a_store_failure_is_503(make_app: AppFactory, keys: Keys) -> None:
    app = make_app()
    server: Server = app.state.server

    async def failing(run_id: UUID) -> Any:
        raise StoreError("sqlite: database is locked")

    server.agent.store.get_run = failing  # type: ignore[method-assign]
    async with client_for(app) as client:
        response = await client.get(f"/runs/{UUID(int=1)}", headers=bearer(keys.alice))
    problem(response, 503, "store_unavailable")
    assert "locked" not in response.text


async def test_security_headers_everywhere(client: httpx.AsyncClient, keys: Keys) -> None:
    for response in [
        await client.get("/"),
        await client.get("/runs", headers=bearer(keys.alice)),
        await client.get("/nowhere"),
        await client.get("/openapi.json"),
    ]:
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "no-referrer"

"""Every input gets an answer: a body nested too deeply, a seq out of range, an integer too large
for the store are 4xx problems, never a 500 or a stream cut half-way."""

from __future__ import annotations

import httpx
import pytest

from fiduciary.server import Server

from .conftest import Keys, bearer, problem, settle, start_run

pytestmark = pytest.mark.timeout(30)

TOO_BIG = str(2**63)  # one more than the largest seq a store holds


@pytest.mark.parametrize("body", [b"[" * 20_000, b'{"a":' * 5_000, b"[" * 200 + b"]" * 200])
async def test_a_deeply_nested_body_is_a_400(
    client: httpx.AsyncClient, keys: Keys, body: bytes
) -> None:
    headers = {**bearer(keys.alice), "content-type": "application/json"}
    response = await client.post("/runs", content=body, headers=headers)
    detail = problem(response, 400, "invalid_json")["detail"]
    assert "nested" in detail


async def test_a_nested_edit_is_a_400_too(client: httpx.AsyncClient, keys: Keys) -> None:
    nested = "[" * 150 + "]" * 150
    body = f'{{"args_digest": "x", "edits": {{"amount": {nested}}}}}'.encode()
    headers = {**bearer(keys.alice), "content-type": "application/json"}
    url = "/approvals/00000000-0000-4000-8000-000000000000/approve"
    response = await client.post(url, content=body, headers=headers)
    problem(response, 400, "invalid_json")


@pytest.mark.parametrize("after", ["-1", TOO_BIG, "99999999999999999999999", "1.5", "1e3", "x"])
async def test_after_out_of_range_is_refused(
    client: httpx.AsyncClient, keys: Keys, server: Server, after: str
) -> None:
    run_id = await start_run(client, keys.alice, "hello")
    await settle(server)
    url = f"/runs/{run_id}/events?follow=false&after={after}"
    response = await client.get(url, headers=bearer(keys.alice))
    problem(response, 422, "invalid_request")


@pytest.mark.parametrize("header", ["-1", TOO_BIG, "99999999999999999999999", "1.5", "x"])
async def test_last_event_id_out_of_range_is_a_400(
    client: httpx.AsyncClient, keys: Keys, server: Server, header: str
) -> None:
    run_id = await start_run(client, keys.alice, "hello")
    await settle(server)
    headers = {**bearer(keys.alice), "last-event-id": header}
    response = await client.get(f"/runs/{run_id}/events?follow=false", headers=headers)
    problem(response, 400, "invalid_last_event_id")


async def test_the_largest_seq_is_answered_with_an_empty_stream(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "hello")
    await settle(server)
    largest = str(2**63 - 1)
    url = f"/runs/{run_id}/events?follow=false&after={largest}"
    response = await client.get(url, headers=bearer(keys.alice))
    assert response.status_code == 200
    assert "data:" not in response.text
    headers = {**bearer(keys.alice), "last-event-id": largest}
    response = await client.get(f"/runs/{run_id}/events?follow=false", headers=headers)
    assert response.status_code == 200
    assert "data:" not in response.text


@pytest.mark.parametrize("limit", ["0", "-1", TOO_BIG, "1e3", "x"])
async def test_a_list_limit_out_of_range_is_refused(
    client: httpx.AsyncClient, keys: Keys, limit: str
) -> None:
    response = await client.get(f"/runs?limit={limit}", headers=bearer(keys.alice))
    problem(response, 422, "invalid_request")

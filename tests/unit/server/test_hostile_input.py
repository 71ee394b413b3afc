"""Every input gets an answer: a body nested too deeply, a seq out of range, an integer too large
for the store are 4xx problems, never a 500 or a stream cut half-way."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

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


def test_depth_is_counted_before_parsing_even_where_a_library_raised_the_recursion_limit(
    tmp_path: Path,
) -> None:
    """py_ecc (under web3, the chain extra) sets the recursion limit to 100,000: the parser then
    overflows the C stack on a deep body instead of raising RecursionError. The depth is counted
    before parsing, so the process answers invalid_json and lives (a subprocess: a regression
    would be a segfault)."""
    script = tmp_path / "deep.py"
    script.write_text(
        textwrap.dedent(
            r"""
            import sys
            sys.setrecursionlimit(100_000)
            from fiduciary.server.pipeline import ProblemError, parse_json
            deep = (b"[" * 90_000 + b"]" * 90_000, b'{"a":' * 60_000 + b"1" + b"}" * 60_000)
            for body in deep:
                try:
                    parse_json(body)
                except ProblemError as exc:
                    print(exc.code, exc.detail)
            print(parse_json(b'{"text": "' + b"[" * 40 + b'\\""}'))
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["invalid_json the body is nested more than 32 levels deep"] * 2
    assert lines[2].startswith("{'text': '[[[[")  # brackets inside a string are text

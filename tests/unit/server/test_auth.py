"""API keys: hashed at rest, compared in constant time, bound to a principal and scopes."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from fiduciary import ManualClock
from fiduciary.exceptions import StoreError
from fiduciary.server import MemoryKeyStore, PostgresKeyStore, SQLiteKeyStore
from fiduciary.server.auth import KeyStore, digest
from tests.postgres_support import create_database, require_driver

from .conftest import Keys, bearer, problem

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def key_store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> AsyncIterator[KeyStore]:
    store: KeyStore
    if request.param == "memory":
        store = MemoryKeyStore(clock=clock)
    elif request.param == "sqlite":
        store = SQLiteKeyStore(tmp_path / "keys.sqlite3", clock=clock)
    else:
        store = PostgresKeyStore(create_database(), clock=clock)
    try:
        yield store
    finally:
        await store.aclose()


async def test_a_key_verifies_and_only_its_digest_is_stored(
    key_store: KeyStore, tmp_path: Path
) -> None:
    key, record = await key_store.create("alice", ["runs:read"], label="phone")
    assert key.startswith(f"fid_{record.key_id}_")
    assert len(key) == 4 + 16 + 1 + 43
    verified = await key_store.verify(key)
    assert verified is not None
    assert verified.principal == "alice"
    assert verified.scopes == frozenset({"runs:read"})
    assert verified.label == "phone"
    # the same id with another secret, a truncated key, garbage: refused
    assert await key_store.verify(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert await key_store.verify(key[:-2]) is None
    assert await key_store.verify("fid_" + "0" * 16 + "_" + "x" * 43) is None
    assert await key_store.verify("") is None
    if isinstance(key_store, SQLiteKeyStore):
        raw = (tmp_path / "keys.sqlite3").read_bytes()
        assert key.encode() not in raw
        assert key.split("_", 2)[2].encode() not in raw
        with sqlite3.connect(tmp_path / "keys.sqlite3") as conn:
            (stored,) = conn.execute("SELECT digest FROM server_api_keys").fetchone()
        assert stored == digest(key)
    if isinstance(key_store, PostgresKeyStore):
        import psycopg

        async with await psycopg.AsyncConnection.connect(key_store.dsn) as conn:
            cursor = await conn.execute("SELECT server_api_keys::text FROM server_api_keys")
            (row,) = await cursor.fetchall()
        assert key.split("_", 2)[2] not in row[0]
        assert digest(key) in row[0]


@pytest.mark.postgres
async def test_keys_on_postgres_are_shared_by_every_instance(clock: ManualClock) -> None:
    """A key created through one instance works on another; a revocation reaches it at once."""
    dsn = create_database()
    a, b = await PostgresKeyStore.open(dsn, clock=clock), await PostgresKeyStore.open(dsn)
    try:
        key, record = await a.create("alice", ["runs:read"], label="laptop")
        seen = await b.verify(key)
        assert seen == record
        assert seen.created_at.tzinfo is not None
        assert await b.revoke(record.key_id)
        assert await a.verify(key) is None
        assert [k.revoked_at is not None for k in await a.list()] == [True]
    finally:
        await a.aclose()
        await b.aclose()


async def test_an_unreachable_postgres_is_a_store_error() -> None:
    require_driver()  # no server needed: the one it names does not exist
    keys = PostgresKeyStore("postgresql://postgres@127.0.0.1:1/nothing?connect_timeout=1")
    with pytest.raises(StoreError, match="API keys"):
        await keys.verify("fid_" + "0" * 16 + "_" + "x" * 43)


async def test_revoked_keys_and_unknown_scopes(key_store: KeyStore) -> None:
    key, record = await key_store.create("alice", ["runs:read", "runs:write"])
    assert [k.key_id for k in await key_store.list(principal="alice")] == [record.key_id]
    assert await key_store.list(principal="bob") == []
    assert await key_store.revoke(record.key_id)
    assert not await key_store.revoke(record.key_id)
    assert await key_store.verify(key) is None
    with pytest.raises(ValueError, match="unknown scopes"):
        await key_store.create("alice", ["runs:everything"])
    with pytest.raises(ValueError, match="at least one scope"):
        await key_store.create("alice", [])
    with pytest.raises(ValueError, match="principal"):
        await key_store.create("", ["runs:read"])


async def test_requests_need_a_valid_key(client: httpx.AsyncClient, keys: Keys) -> None:
    body = problem(await client.get("/runs"), 401, "unauthenticated")
    assert "Bearer" in body["detail"]
    response = await client.get("/runs", headers={"authorization": "Basic YWxpY2U6cHc="})
    problem(response, 401, "unauthenticated")
    assert response.headers["www-authenticate"] == 'Bearer realm="fiduciary"'
    problem(await client.get("/runs", headers=bearer("fid_nope")), 401, "unauthenticated")
    problem(await client.get("/runs", headers=bearer("x" * 500)), 401, "unauthenticated")
    await keys.store.revoke((await keys.store.verify(keys.bob)).key_id)  # type: ignore[union-attr]
    problem(await client.get("/runs", headers=bearer(keys.bob)), 401, "unauthenticated")
    me = await client.get("/me", headers=bearer(keys.alice))
    assert me.json()["principal"] == "alice"
    assert me.json()["scopes"] == ["approvals:decide", "runs:read", "runs:write"]


async def test_scopes_are_enforced(client: httpx.AsyncClient, keys: Keys) -> None:
    reader = bearer(keys.alice_reader)
    assert (await client.get("/runs", headers=reader)).status_code == 200
    assert (await client.get("/approvals", headers=reader)).status_code == 200
    body = problem(
        await client.post("/runs", json={"message": "hello"}, headers=reader),
        403,
        "insufficient_scope",
    )
    assert "runs:write" in body["detail"]
    problem(
        await client.post(
            "/approvals/00000000-0000-0000-0000-000000000000/deny", json={}, headers=reader
        ),
        403,
        "insufficient_scope",
    )
    # admin holds every scope
    assert (
        await client.post("/runs", json={"message": "hello"}, headers=bearer(keys.admin))
    ).status_code == 202

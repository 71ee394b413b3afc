"""The Memory seam on every backend: ranking, namespaces, vectors, listing and forgetting."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import uuid4

import pytest

from fiduciary.clock import ManualClock
from fiduciary.context.recall import MemoryLayer
from fiduciary.memory import InMemoryMemory, Memory, SQLiteMemory
from fiduciary.memory.base import Embedder
from fiduciary.testing import FakeEmbedder
from tests.postgres_support import new_database

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SYNONYMS = {"rent": "housing", "landlord": "housing", "flat": "housing"}


async def open_memory(
    kind: str, tmp_path: Path, clock: ManualClock, embedder: Embedder | None = None
) -> Memory:
    if kind == "memory":
        return InMemoryMemory(embedder=embedder, clock=clock)
    if kind == "sqlite":
        return SQLiteMemory(tmp_path / "memory.sqlite3", embedder=embedder, clock=clock)
    from fiduciary.memory.postgres import PostgresMemory

    return PostgresMemory(await new_database(), embedder=embedder, clock=clock)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def memory(backend: str, tmp_path: Path) -> AsyncIterator[Memory]:
    opened = await open_memory(backend, tmp_path, ManualClock(START))
    yield opened
    await opened.close()


async def test_recall_ranks_the_relevant_records_first(memory: Memory) -> None:
    await memory.remember("Paid Alice 20 USDC for the concert tickets", namespace="ann")
    await memory.remember("Prefers to keep 500 USDC in savings", namespace="ann")
    await memory.remember("Asked about the EUR rate twice", namespace="ann")
    found = await memory.recall("how much did I pay Alice?", namespace="ann", top_k=2)
    assert found[0].text == "Paid Alice 20 USDC for the concert tickets"
    assert found[0].score > 0
    assert len(found) <= 2
    assert await memory.recall("zebra", namespace="ann") == []


async def test_one_principal_never_recalls_anothers_records(memory: Memory) -> None:
    await memory.remember("Bob's secret savings goal: a boat", namespace="bob")
    await memory.remember("Ann saves for a car", namespace="ann")
    found = await memory.recall("savings goal boat", namespace="ann")
    assert all(r.namespace == "ann" for r in found)
    assert "Bob's secret savings goal: a boat" not in [r.text for r in found]
    assert await memory.recall("boat", namespace="ann") == []
    assert [r.text for r in await memory.records(namespace="bob")] == [
        "Bob's secret savings goal: a boat"
    ]


async def test_records_are_listed_newest_first_and_forgotten_by_id(memory: Memory) -> None:
    first = await memory.remember("first note", namespace="ann", at=START)
    second = await memory.remember(
        "advice: keep a buffer", namespace="ann", kind="advice", at=START + timedelta(days=1)
    )
    assert [r.text for r in await memory.records(namespace="ann")] == [second.text, first.text]
    assert [r.kind for r in await memory.records(namespace="ann", kind="advice")] == ["advice"]
    assert not await memory.forget(first.record_id, namespace="bob")  # not theirs
    assert await memory.forget(first.record_id, namespace="ann")
    assert not await memory.forget(uuid4(), namespace="ann")
    assert [r.record_id for r in await memory.records(namespace="ann")] == [second.record_id]
    assert await memory.recall("first note", namespace="ann") == []


async def test_recall_since_keeps_only_recent_records(memory: Memory) -> None:
    await memory.remember("advice: sell the ETH", namespace="ann", at=START - timedelta(days=40))
    await memory.remember("advice: hold the ETH", namespace="ann", at=START - timedelta(days=3))
    recent = await memory.recall("ETH advice", namespace="ann", since=START - timedelta(days=30))
    assert [r.text for r in recent] == ["advice: hold the ETH"]


async def test_an_embedder_finds_what_no_shared_word_explains(backend: str, tmp_path: Path) -> None:
    embedder = FakeEmbedder(SYNONYMS)
    memory = await open_memory(backend, tmp_path, ManualClock(START), embedder)
    try:
        await memory.remember("Sent 900 USDC to the landlord on the 1st", namespace="ann")
        await memory.remember("Bought 0.1 ETH", namespace="ann")
        found = await memory.recall("rent", namespace="ann", top_k=1)
        assert [r.text for r in found] == ["Sent 900 USDC to the landlord on the 1st"]
    finally:
        await memory.close()
    (tmp_path / "lexical").mkdir()
    lexical = await open_memory(backend, tmp_path / "lexical", ManualClock(START))
    try:
        await lexical.remember("Sent 900 USDC to the landlord on the 1st", namespace="ann")
        assert await lexical.recall("rent", namespace="ann") == []
    finally:
        await lexical.close()


async def test_empty_text_is_refused(memory: Memory) -> None:
    with pytest.raises(ValueError, match="empty"):
        await memory.remember("   ", namespace="ann")


async def test_sqlite_memory_recalls_across_reopening(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    first = SQLiteMemory(path)
    await first.remember("Paid the plumber 120 USDC", namespace="ann")
    await first.close()
    again = SQLiteMemory(path)
    try:
        assert [r.text for r in await again.recall("plumber", namespace="ann")] == [
            "Paid the plumber 120 USDC"
        ]
    finally:
        await again.close()


class Broken:
    def __init__(self, hang: bool) -> None:
        self.hang = hang
        self.remembered = 0

    async def remember(self, text: str, **kw: object) -> object:
        self.remembered += 1
        raise RuntimeError("memory is down")

    async def recall(self, query: str, **kw: object) -> object:
        if self.hang:
            await asyncio.Event().wait()
        raise RuntimeError("memory is down")


@pytest.mark.parametrize("hang", [False, True])
async def test_a_failing_memory_recalls_nothing_and_says_so(
    hang: bool, caplog: pytest.LogCaptureFixture
) -> None:
    layer = MemoryLayer(Broken(hang), redact=str, timeout=0.05)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="fiduciary.memory"):
        assert await layer.recall("anything", "ann") == []
    assert "memory recall failed; continuing without" in caplog.text


async def test_remembering_is_redacted_and_never_blocks(caplog: pytest.LogCaptureFixture) -> None:
    memory = InMemoryMemory()
    layer = MemoryLayer(memory, redact=lambda t: t.replace("sk-canary", "[REDACTED]"))
    layer.remember_soon("my key is sk-canary", "ann")
    await layer.drain()
    assert [r.text for r in await memory.records(namespace="ann")] == ["my key is [REDACTED]"]
    broken = Broken(False)
    failing = MemoryLayer(broken, redact=str)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="fiduciary.memory"):
        failing.remember_soon("a note", "ann")
        await failing.drain()
    assert broken.remembered == 1
    assert "remembering failed" in caplog.text

"""Every fake in one place: a scripted model, the in-memory store, a manual clock, approvers,
a web search with canned results.

These ship with the package so that users test their own agents the way fiduciary tests itself:
no network, no keys, no sleeps.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Sequence
from uuid import UUID

from .agent import Agent
from .capabilities import Principal
from .clock import ManualClock
from .events import Event, PendingAction
from .gates import AuthorizationRequest
from .models.scripted import Call, Reply, Results, Script, ScriptedModel, ToolCalls
from .stores.memory import MemoryStore
from .web_search import SearchResult

__all__ = [
    "Call",
    "FakeEmbedder",
    "FakeSearch",
    "ManualClock",
    "MemoryStore",
    "Reply",
    "Results",
    "Script",
    "ScriptedModel",
    "SearchResult",
    "ToolCalls",
    "allow_all",
    "approve_all",
    "collect",
]


def allow_all(request: AuthorizationRequest) -> bool:
    """An ``authorize`` callback that allows everything: for tests and demos only."""
    return True


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    """Drain an event stream into a list."""
    return [event async for event in events]


async def approve_all(
    agent: Agent, run_id: UUID, *, by: Principal | str, rounds: int = 20
) -> list[Event]:
    """Approve every pending action of a run (re-typing amounts where asked) until it rests."""
    seen: list[Event] = []
    for _ in range(rounds):
        pending = await agent.pending_approvals(run_id=run_id)
        if not pending:
            break
        for record in pending:
            await agent.approve(record.approval_id, by=by, confirm_amount=record.amount_usd)
        seen.extend(await collect(agent.resume(run_id)))
    return seen


def pending_actions(events: list[Event]) -> list[PendingAction]:
    return [e for e in events if isinstance(e, PendingAction)]


class FakeEmbedder:
    """A deterministic embedder for tests: hashed bag of words, with optional synonyms.

    ``synonyms`` maps words to a shared meaning (``{"rent": "housing", "landlord": "housing"}``)
    so that tests can show a vector match that no shared word explains. ``calls`` counts batches.
    """

    def __init__(self, synonyms: dict[str, str] | None = None, dimensions: int = 64) -> None:
        self.synonyms = dict(synonyms or {})
        self.dimensions = dimensions
        self.calls = 0

    async def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return [self._embed(text) for text in texts]

    def _embed(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for word in re.findall(r"\w+", text.lower()):
            meaning = self.synonyms.get(word, word)
            digest = hashlib.sha256(meaning.encode()).digest()
            vector[int.from_bytes(digest[:4], "big") % self.dimensions] += 1.0
        return vector


class FakeSearch:
    """A ``SearchBackend`` offline: canned results per query (``{"query": [SearchResult, ...]}``),
    ``default`` for any other query. ``queries`` records what was asked, in order."""

    name = "fake search"

    def __init__(
        self,
        results: dict[str, Sequence[SearchResult]] | None = None,
        *,
        default: Sequence[SearchResult] = (),
    ) -> None:
        self.results = {q: list(found) for q, found in (results or {}).items()}
        self.default = list(default)
        self.queries: list[str] = []

    async def search(self, query: str, *, limit: int) -> list[SearchResult]:
        self.queries.append(query)
        return list(self.results.get(query, self.default))[:limit]

"""The apps engine's approvals decided from ``fiduciary approvals approve | deny``: one command
decides any approval. A run the apps engine started (its capabilities include the engine's own:
``app_enable``, ``app_approve_intents``, ``app_grant``) is decided by the engine's decider, and
the engine then continues what waited on it (the approved intents run; a denied one is skipped
and recorded), as ``fiduciary serve --apps`` would on its next step."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

from ..events import RunStarted
from ..stores.base import Store
from ._common import CliError

if TYPE_CHECKING:
    from ..apps.engine import AppEngine

__all__ = ["ENGINE_OWN", "app_engine", "continue_apps", "is_app_run"]

ENGINE_OWN = frozenset({"app_enable", "app_approve_intents", "app_grant"})


async def is_app_run(store: Store, run_id: UUID) -> bool:
    """Whether the apps engine started the run (its ``run_started`` lists the engine's own)."""
    first = await store.read_events(run_id, limit=1)
    return (
        bool(first)
        and isinstance(first[0], RunStarted)
        and set(first[0].capabilities) >= ENGINE_OWN
    )


@asynccontextmanager
async def app_engine(db: Path, principal: str) -> AsyncIterator[AppEngine]:
    """The sample apps' engine over the paper wallet in ``db`` (as ``fiduciary apps`` runs it)."""
    try:
        from ..apps.cli import open_engine
    except ImportError as exc:
        raise CliError(
            "this approval is an app's: deciding it needs the apps extra: "
            "pip install 'fiduciary[apps]'"
        ) from exc
    async with open_engine(db, None, principal) as engine:
        yield engine


async def continue_apps(engine: AppEngine) -> list[str]:
    """Continue the enables and ticks that waited for a person; one line per one continued."""
    lines = []
    for record in await engine.tables.list_apps():
        if record.enable_run is not None and record.app_id in engine.manifests:
            enabled = await engine.enable(record.app_id)
            lines.append(f"{record.app_id}: {'enabled' if enabled.enabled else 'not enabled'}")
    for result in await engine.resume_ticks():
        detail = f" ({result.detail})" if result.detail else ""
        lines.append(f"{result.app_id} {result.slot}: {result.outcome}{detail}")
    return lines

"""The apps engine's approvals decided from ``fiduciary approvals approve | deny``: one command
decides any approval. A run the apps engine started (its capabilities include the engine's own:
``app_enable``, ``app_approve_intents``, ``app_grant``) is decided by the engine's decider, and
the engine then continues what waited on it (the approved intents run; a denied one is skipped
and recorded; a message run that asked for a grant with ``request_grant`` goes on with it), as
``fiduciary serve --apps`` would on its next step."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

from ..events import RunStarted
from ..exceptions import RunError
from ..stores.base import Store
from ._common import CliError

if TYPE_CHECKING:
    from ..apps.engine import AppEngine

__all__ = ["ENGINE_OWN", "app_engine", "continue_apps", "is_app_run"]

ENGINE_OWN = frozenset({"app_enable", "app_approve_intents", "app_grant"})
# an app's message run that may ask for a grant (app_state marks a run as an app's)
MESSAGE_OWN = frozenset({"request_grant", "app_state"})


async def is_app_run(store: Store, run_id: UUID) -> bool:
    """Whether the apps engine started the run (its ``run_started`` lists the engine's own)."""
    first = await store.read_events(run_id, limit=1)
    if not first or not isinstance(first[0], RunStarted):
        return False
    caps = set(first[0].capabilities)
    return caps >= ENGINE_OWN or caps >= MESSAGE_OWN


@asynccontextmanager
async def app_engine(
    db: Path, principal: str, factory: str | None = None
) -> AsyncIterator[AppEngine]:
    """The engine the apps factory ``factory`` makes over ``db`` (default: the sample apps'
    over the paper wallet, as ``fiduciary apps`` runs it)."""
    try:
        from ..apps.cli import open_engine
    except ImportError as exc:
        raise CliError(
            "this approval is an app's: deciding it needs the apps extra: "
            "pip install 'fiduciary[apps]'"
        ) from exc
    async with open_engine(db, None, principal, factory) as engine:
        yield engine


async def continue_apps(engine: AppEngine, run_id: UUID | None = None) -> list[str]:
    """Continue the enables and ticks that waited for a person, and the message run
    ``run_id`` when it is one; one line per one continued."""
    lines = []
    run = None if run_id is None else await engine.store.get_run(run_id)
    if run is not None and run.title.startswith("[app ") and "] hook message" in run.title:
        app_id = run.title[5:].split("]", 1)[0]
        try:
            answer = await engine.resume_message(app_id, run.run_id)
        except RunError as exc:
            lines.append(f"{app_id} message: not continued ({exc.message})")
        else:
            said = "waiting for a person" if answer.waiting else f"replied {answer.reply!r}"
            lines.append(f"{app_id} message: {said}")
    for record in await engine.tables.list_apps():
        if record.enable_run is not None and record.app_id in engine.manifests:
            enabled = await engine.enable(record.app_id)
            lines.append(f"{record.app_id}: {'enabled' if enabled.enabled else 'not enabled'}")
    for result in await engine.resume_ticks():
        detail = f" ({result.detail})" if result.detail else ""
        lines.append(f"{result.app_id} {result.slot}: {result.outcome}{detail}")
    return lines

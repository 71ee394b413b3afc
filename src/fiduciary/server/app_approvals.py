"""The apps engine's approvals on the general routes (``deciders.OtherDecider``).

A run is the engine's when its title names one of the engine's apps (``[app ID] ...``) and its
``run_started`` lists the engine's own capabilities (``app_state`` for a hook's run; the
``app_enable`` family for an enabling or a tick's intents): a person's run of the served agent
has neither. Its approvals, ``request_grant``'s among them, are decided by the engine's
decider (the core's checks: who may, the digest, the expiry, once); then a message run is
continued at once (approving a grant request creates the grant and the run's next write within
it goes through), and an enabling or a tick's intents are continued by the scheduler's next
step, as ``POST /apps/{id}/approvals/{approval_id}/approve`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._logs import logger
from ..agent import Agent
from ..events import RunStarted
from ..exceptions import RunError
from ..stores.base import ApprovalRecord

if TYPE_CHECKING:
    from ..apps.engine import AppEngine

__all__ = ["AppApprovals"]

log = logger("fiduciary.server")

_ENGINE_OWN = frozenset({"app_enable", "app_approve_intents", "app_grant"})
_HOOK_OWN = "app_state"


class AppApprovals:
    """The approvals of ``engine``'s runs, for the general approvals routes."""

    def __init__(self, engine: AppEngine) -> None:
        self.engine = engine

    async def _app_of(self, record: ApprovalRecord) -> str | None:
        """The id of the app whose run asked for ``record``; None: not one of the engine's."""
        if record.principal != self.engine.principal.actor_id:
            return None
        store = self.engine.store
        run = await store.get_run(record.run_id)
        if run is None or not run.title.startswith("[app "):
            return None
        app_id = run.title[len("[app ") :].split("]", 1)[0]
        if app_id not in self.engine.manifests:
            return None
        first = await store.read_events(record.run_id, limit=1)
        if not first or not isinstance(first[0], RunStarted):
            return None
        caps = set(first[0].capabilities)
        return app_id if _HOOK_OWN in caps or caps >= _ENGINE_OWN else None

    async def agent_for(self, record: ApprovalRecord) -> Agent | None:
        return self.engine.decider() if await self._app_of(record) is not None else None

    async def continue_after(self, record: ApprovalRecord) -> None:
        app_id = await self._app_of(record)
        if app_id is None:
            return
        try:
            await self.engine.resume_message(app_id, record.run_id)
        except RunError as exc:
            if exc.code in ("unknown", "invalid", "state"):
                # not a message run (an enabling, a tick's intents): the scheduler's next step
                log.debug("app %s: run %s is continued by the scheduler", app_id, record.run_id)
                return
            # the decision stands (recorded); AppEngine.resume_message continues the run later
            log.warning("app %s: run %s was not continued: %s", app_id, record.run_id, exc)

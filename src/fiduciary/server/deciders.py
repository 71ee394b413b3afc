"""Approvals that another agent decides: the seam between the general approvals routes and a
feature whose runs the served agent does not drive (an apps engine's: its ``request_grant``,
``app_enable``, ... are capabilities of the engine's agents, not of the server's).

``POST /approvals/{id}/approve | deny`` asks each ``OtherDecider`` the server was given
whether it owns the approval's run. The owner's agent then decides it with the checks every
decision has (who may, the digest, the expiry, once: the core's ``Agent.approve`` / ``deny``),
and the owner continues what waited on it instead of the server resuming the run.
"""

from __future__ import annotations

from typing import Protocol

from ..agent import Agent
from ..stores.base import ApprovalRecord

__all__ = ["OtherDecider"]


class OtherDecider(Protocol):
    async def agent_for(self, record: ApprovalRecord) -> Agent | None:
        """The agent that decides ``record``, when its run is this owner's; else None."""
        ...

    async def continue_after(self, record: ApprovalRecord) -> None:
        """Continue what waited on ``record``, now decided (or found expired)."""
        ...

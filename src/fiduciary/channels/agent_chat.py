"""A plain agent as a target: each principal's chat on a channel family is one run.

The chat's run id is derived from the target's name and the principal (UUID5), so it needs no
table and survives restarts: the first message starts the run, each later one continues it
(``Agent.run(..., run_id=...)``). While the run waits for a decision, a message is answered with
the actions waiting; while it waits for the person's answer to a question (``ask_person``),
the person's message is the answer; while it is still driven elsewhere, with a note to try
again.

A message from a channel that is not the principal in person (``OUTSIDE_CHANNELS``: a signed
webhook, a Telegram group) is recorded with its ``Origin``: a write the model proposes in
answer to it waits for a person, unless ``budgets`` grants that channel an autonomous budget.

``collect`` turns a run's stream of events into one ``Reply``; channels use it too after a
decision (``Agent.resume``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from uuid import UUID, uuid5

from ..agent import Agent
from ..capabilities import Principal
from ..events import (
    Canvas,
    Event,
    Origin,
    PendingAction,
    PendingInput,
    RunFailed,
    TextDelta,
    TurnComplete,
    TurnRetracted,
)
from ..exceptions import ApprovalError, RunError
from ..stores.base import IDLE
from .inbox import Reply

__all__ = ["CHAT_NAMESPACE", "OUTSIDE_CHANNELS", "AgentChat", "collect"]

CHAT_NAMESPACE = UUID("6f1c1b0e-9a57-4d4c-8f0e-2f4d1c7a9b31")

WAITING = "I am waiting for your decision on the action(s) above: approve or deny first."
BUSY = "I am still working on your previous message; send this again in a moment."
# the channels whose messages are not the principal in person (the console, the API and the
# principal's own Telegram chat are)
OUTSIDE_CHANNELS = frozenset({"webhook", "telegram:group"})


async def collect(agent: Agent, run_id: UUID, events: AsyncIterator[Event]) -> Reply:
    """The text a run said and the approvals it now waits for, once its stream ends."""
    turns: list[str] = []
    parts: list[str] = []
    waiting = False
    shown: list[str] = []  # what the run showed that a chat cannot: a line each, at the end
    async for event in events:
        if isinstance(event, TextDelta):
            parts.append(event.text)
        elif isinstance(event, TurnRetracted):  # a turn lost in a crash: its text is dropped
            parts = []
        elif isinstance(event, TurnComplete):
            turns.append("".join(parts).strip())
            parts = []
        elif isinstance(event, PendingAction):
            waiting = True
        elif isinstance(event, RunFailed):
            parts.append(f"(The run stopped: {event.reason}.)")
        elif isinstance(event, Canvas):  # a chat cannot show it: say where it is
            shown.append(f"(Shown in the console: {event.title})")
        elif isinstance(event, PendingInput):  # reserved: a chat shows no forms
            shown.append(f"(A form this chat cannot show: {event.prompt or event.input_id})")
    turns.append("".join(parts).strip())
    turns += shown
    pending = tuple(await agent.pending_approvals(run_id=run_id)) if waiting else ()
    return Reply("\n\n".join(t for t in turns if t), pending)


class AgentChat:
    """``async (principal, text, channel) -> Reply`` over ``agent``: register it in an
    ``Inbox`` with ``per="principal"``. ``budgets``: the origin (with its autonomous budget)
    recorded for the messages of a channel, e.g. ``{"webhook": Origin(source="webhook",
    budget={"save": Decimal("5")})}``; an outside channel without one has no budget."""

    def __init__(
        self, agent: Agent, *, name: str = "chat", budgets: Mapping[str, Origin] | None = None
    ) -> None:
        self.agent = agent
        self.name = name
        self.budgets = dict(budgets or {})

    async def _answer(self, principal: Principal, run_id: UUID, text: str) -> Reply:
        """The person's message answers the run's open question (the oldest); the run goes on
        with it. Only the principal in person answers: an outside channel's message does not."""
        questions = await self.agent.questions(run_id=run_id)
        if not questions:
            return Reply(BUSY)  # answered or expired meanwhile: the run is being moved on
        try:
            await self.agent.answer(questions[0].question_id, text, by=principal)
        except ApprovalError as exc:
            return Reply(f"That answer was not taken: {exc.message}.")
        try:
            return await collect(self.agent, run_id, self.agent.resume(run_id))
        except RunError:  # driven elsewhere meanwhile: it goes on there
            return Reply(BUSY)

    def origin(self, channel: str) -> Origin | None:
        """What a message of ``channel`` is recorded with (None: the principal in person)."""
        if channel in self.budgets:
            return self.budgets[channel]
        return Origin(source=channel) if channel in OUTSIDE_CHANNELS else None

    def run_id(self, principal: Principal) -> UUID:
        """The run that is ``principal``'s chat with this target."""
        return uuid5(CHAT_NAMESPACE, f"{self.name}\x00{principal.actor_id}")

    async def __call__(self, principal: Principal, text: str, channel: str) -> Reply:
        run_id = self.run_id(principal)
        existing = await self.agent.store.get_run(run_id)
        if existing is not None and existing.status not in IDLE:
            if existing.status == "awaiting_approval":
                pending = await self.agent.pending_approvals(run_id=run_id)
                return Reply(WAITING, tuple(pending))
            if existing.status == "awaiting_input" and channel not in OUTSIDE_CHANNELS:
                return await self._answer(principal, run_id, text)
            return Reply(BUSY)
        origin = self.origin(channel)
        try:
            return await collect(
                self.agent,
                run_id,
                self.agent.run(text, principal=principal, run_id=run_id, origin=origin),
            )
        except RunError as exc:
            if exc.code in ("busy", "state"):
                return Reply(BUSY)
            raise

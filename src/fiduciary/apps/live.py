"""Live app channels: what an app emits, broadcast to whoever listens in this process.

A hook's answer may carry ``emit: {channel, data}`` (or a list of them); the engine itself emits
on the channels the seed names when a person decides an action an app asked for (a per-action
intent or a grant): ``action:resolved`` ``{requestId, approved}`` always, then, approved,
``action:executed`` ``{requestId, approved, status, result}``; the ``result`` hook's reply to
what ran goes out on ``agent:message`` ``{message}``. On a rejection only ``action:resolved``
fires.

Each emit is written to the app's log (``emit``) and published here: the server's ``GET
/events`` stream carries it as an ``app_emit`` event (live only, without an id: a reconnecting
client does not get it again), and the console's app panel shows it. A subscriber that does not
keep up loses the oldest of its unread emits, never blocks the app.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ACTION_EXECUTED",
    "ACTION_RESOLVED",
    "AGENT_MESSAGE",
    "DEFAULT_CHANNEL",
    "AppChannels",
    "AppEmit",
]

ACTION_RESOLVED = "action:resolved"
ACTION_EXECUTED = "action:executed"
AGENT_MESSAGE = "agent:message"
DEFAULT_CHANNEL = "app:emit"  # an emit without a channel of its own


@dataclass(frozen=True, slots=True)
class AppEmit:
    """One emit of an app: on ``channel``, with ``data`` (JSON), at ``at`` (ISO 8601, UTC)."""

    app_id: str
    channel: str
    data: Any
    at: str

    def as_json(self) -> dict[str, Any]:
        return {"app_id": self.app_id, "channel": self.channel, "data": self.data, "at": self.at}


Listener = Callable[[AppEmit], None]


class AppChannels:
    """The listeners of this process's app emits; ``publish`` calls each at once (a listener
    must not block: it queues)."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    @property
    def listener_count(self) -> int:
        return len(self._listeners)

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every emit from now on; returns what stops it."""
        self._listeners.append(listener)

        def stop() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return stop

    def publish(self, emit: AppEmit) -> None:
        for listener in list(self._listeners):
            listener(emit)


def parse_emit(item: Any) -> tuple[str, Any]:
    """A hook's ``emit`` item as (channel, data): ``{channel, data}`` as given; anything else
    on the default channel, the item itself its data."""
    if isinstance(item, dict) and isinstance(item.get("channel"), str) and item["channel"]:
        return item["channel"][:100], item.get("data")
    return DEFAULT_CHANNEL, item

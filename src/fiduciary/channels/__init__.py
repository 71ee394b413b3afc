"""Channels: people talking to fiduciary's runs and approvals from a chat.

Every inbound message — from the console or the API, a signed webhook, Telegram — goes through
one ``Inbox`` (one rate limit, serial per target, parallel across targets) to a *target*: an
app's message hook or ``AgentChat`` (a plain agent; a principal's message continues their chat's
run). ``fiduciary.channels.telegram`` (the ``telegram`` extra) connects a Telegram bot; it is
not imported here.

The core never imports this package; it builds on the public API only (``Agent.run`` /
``resume`` / ``approve`` / ``deny`` / ``pending_approvals``, principals, redaction).
"""

from __future__ import annotations

from .agent_chat import AgentChat, collect
from .inbox import ChannelError, Inbox, RateLimitError, Reply, Target, as_reply
from .split import TELEGRAM_LIMIT, split_message

__all__ = [
    "TELEGRAM_LIMIT",
    "AgentChat",
    "ChannelError",
    "Inbox",
    "RateLimitError",
    "Reply",
    "Target",
    "as_reply",
    "collect",
    "split_message",
]

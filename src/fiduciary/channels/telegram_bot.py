"""The Bot API client of the Telegram channel, with the bot token kept out of everything.

The token is in every Bot API URL, so it is registered as a known secret with fiduciary's log
redaction, which is also installed on python-telegram-bot's, httpx's and httpcore's loggers
before the client exists; errors from the client are re-raised as ``TelegramError`` with their
text scrubbed and no chained cause; text going to a chat is scrubbed too.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from datetime import timedelta
from typing import TypeVar

from .._logs import REDACT_LOGS, logger
from ..exceptions import FiduciaryError
from ..redaction import Redactor
from .records import Card
from .split import split_message

try:
    import telegram
    from telegram.request import HTTPXRequest
except ImportError as exc:  # pragma: no cover - the extra is in dev
    raise ImportError(
        "the Telegram channel needs the 'telegram' extra: pip install 'fiduciary[telegram]'"
    ) from exc

__all__ = ["TelegramBot", "TelegramError", "guard_library_logs"]

log = logger("fiduciary.channels.telegram")

T = TypeVar("T")

_LIBRARY_LOGGERS = ("telegram", "httpx", "httpcore")


class TelegramError(FiduciaryError):
    """The Bot API could not be reached or refused a call (the text holds no token).
    ``retry_after``: the seconds Telegram asked to wait (flood control), if it did."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def guard_library_logs() -> None:
    """Install fiduciary's log redaction on the Bot API client's loggers (and their
    children that exist now): the token is in every request URL they may log."""
    names = [
        n
        for n in logging.root.manager.loggerDict
        if any(n == p or n.startswith(p + ".") for p in _LIBRARY_LOGGERS)
    ]
    for name in {*names, *_LIBRARY_LOGGERS, "telegram.Bot"}:
        logger(name)  # gets it with fiduciary's redaction installed


class TelegramBot:
    """One bot's client: every call's errors scrubbed of the token, every text sent scrubbed."""

    def __init__(self, token: str, *, api: str, poll_timeout: int) -> None:
        self.redactor = Redactor(known_secrets=[token, token.partition(":")[2]])
        REDACT_LOGS.register(self.redactor)  # held here: the registry keeps weak references
        guard_library_logs()
        self.bot = telegram.Bot(
            token,
            base_url=f"{api.rstrip('/')}/bot",
            request=HTTPXRequest(connection_pool_size=4),
            get_updates_request=HTTPXRequest(read_timeout=poll_timeout + 10.0),
        )
        guard_library_logs()

    def scrub(self, text: str) -> str:
        return self.redactor.redact_text(text)

    async def call(self, what: Awaitable[T]) -> T:
        try:
            return await what
        except telegram.error.TelegramError as exc:
            wait = exc.retry_after if isinstance(exc, telegram.error.RetryAfter) else None
            seconds = wait.total_seconds() if isinstance(wait, timedelta) else wait
            raise TelegramError(
                self.scrub(f"{type(exc).__name__}: {exc}"), retry_after=seconds
            ) from None

    async def start(self) -> None:
        """Check the token (``getMe``)."""
        await self.call(self.bot.initialize())
        guard_library_logs()

    async def shutdown(self) -> None:
        await self.call(self.bot.shutdown())

    async def say(self, chat_id: int, text: str) -> None:
        """Send ``text`` to the chat, split at Telegram's limit."""
        for piece in split_message(self.scrub(text)):
            await self.call(self.bot.send_message(chat_id=chat_id, text=piece))

    async def send(
        self, chat_id: int, text: str, buttons: telegram.InlineKeyboardMarkup | None
    ) -> int:
        """Send one card (``text`` scrubbed, not split) with its buttons: its message id."""
        sent = await self.call(
            self.bot.send_message(chat_id=chat_id, text=self.scrub(text), reply_markup=buttons)
        )
        return sent.message_id

    async def drop_buttons(self, card: Card) -> None:
        if card.message_id is None:
            return
        try:
            await self.call(
                self.bot.edit_message_reply_markup(
                    chat_id=card.chat_id, message_id=card.message_id, reply_markup=None
                )
            )
        except TelegramError as exc:  # an old message may not be editable any more
            log.info("telegram: buttons left on message %s: %s", card.message_id, exc)

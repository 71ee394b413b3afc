"""Private: fiduciary's loggers, whose records are redacted before any handler sees them.

Logs are inside the trust boundary: an exception raised by a handler or by ``authorize`` may
carry a secret in its text, and a host's handlers may ship records anywhere. Every logger of
fiduciary comes from :func:`logger`, which installs :data:`REDACT_LOGS`: the message (with its
arguments), the exception's traceback and the stack are rendered to text and scrubbed with the
module rules of :mod:`fiduciary.redaction` and with every registered ``Redactor`` (an Agent
registers its own, so its ``known_secrets`` are caught too). The exception object itself is
dropped from the record (``exc_info``): handlers get the scrubbed text in ``exc_text``.
"""

from __future__ import annotations

import logging
import threading
import weakref

from .redaction import Redactor, redact_text

__all__ = ["REDACT_LOGS", "LogRedaction", "logger"]

_FORMATTER = logging.Formatter()


class LogRedaction(logging.Filter):
    """Scrubs a record's message, arguments, traceback and stack in place; drops nothing."""

    def __init__(self) -> None:
        super().__init__()
        self._redactors: weakref.WeakSet[Redactor] = weakref.WeakSet()
        self._lock = threading.Lock()

    def register(self, redactor: Redactor) -> None:
        """Also apply ``redactor`` (its extra keys, patterns and known secrets)."""
        with self._lock:
            self._redactors.add(redactor)

    def scrub(self, text: str) -> str:
        with self._lock:
            redactors = list(self._redactors)
        text = redact_text(text)
        for redactor in redactors:
            text = redactor.redact_text(text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_fiduciary_redacted", False):  # a record seen by two loggers
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed format: keep what there is, scrubbed
            message = f"{record.msg!s} {record.args!r}"
        record.msg, record.args = self.scrub(message), None
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = _FORMATTER.formatException(record.exc_info)
        record.exc_info = None
        if record.exc_text:
            record.exc_text = self.scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = self.scrub(record.stack_info)
        record._fiduciary_redacted = True
        return True


REDACT_LOGS = LogRedaction()


def logger(name: str) -> logging.Logger:
    """The logger ``name`` (``fiduciary...``), its records redacted before any handler."""
    log = logging.getLogger(name)
    if REDACT_LOGS not in log.filters:
        log.addFilter(REDACT_LOGS)
    return log

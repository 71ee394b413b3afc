"""Private: a call's output as the model sees it — JSON cut to its budget, then guard notes."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ._logs import logger
from ._text import NOTES_MARKER, TRUNCATION_MARKER
from .capabilities import Capability

__all__ = ["render_result"]

log = logger("fiduciary.gates")

_JSON = json.JSONEncoder(ensure_ascii=False, default=str)  # json.dumps's, built once


def render_result(
    cap: Capability,
    output: Any,
    hints: Sequence[str],
    budget: int,
    redact: Callable[[str], str],
) -> tuple[str, bool]:
    """The text of ``output`` (already redacted) for the model, and whether it was cut.

    Over ``budget`` characters it is cut, or replaced by the capability's own summary of it
    (``summarize_on_truncate``, redacted too); the truncation marker says so either way."""
    body = _JSON.encode(output)
    truncated = len(body) > budget
    if truncated:
        summary = _summary(cap, output, redact)
        if summary is not None:
            body = (
                summary[:budget] + f"{TRUNCATION_MARKER}{len(body)} chars summarised above: "
                "narrow the request (a filter, a limit, a shorter period) for the details]"
            )
        else:
            body = (
                body[:budget]
                + f"{TRUNCATION_MARKER}{len(body) - budget} chars: the result was too large; "
                "narrow the request (a filter, a limit, a shorter period)]"
            )
    if hints:
        body += NOTES_MARKER + " ".join(f"- {h}" for h in hints)
    return body, truncated


def _summary(cap: Capability, output: Any, redact: Callable[[str], str]) -> str | None:
    """``summarize_on_truncate`` of the output; None without one or when it fails."""
    if cap.summarize_on_truncate is None:
        return None
    try:
        return redact(str(cap.summarize_on_truncate(output)))
    except Exception:
        log.warning("summarize_on_truncate of %s failed; the result is cut instead", cap.name)
        return None

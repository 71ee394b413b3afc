"""The SSE wire format read back: ``parse_sse`` and the ``SSEMessage`` it yields.

``fiduciary.events`` re-exports both beside ``encode_sse``, its writer; they live here because
they know nothing of the events themselves (any SSE text parses)."""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel, ConfigDict

__all__ = ["SSEMessage", "parse_sse"]


class SSEMessage(BaseModel):
    """One parsed SSE message: ``id`` is the event's seq when it carries one."""

    model_config = ConfigDict(frozen=True)

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


def parse_sse(stream: str) -> Iterator[SSEMessage]:
    """Parse SSE text (per the WHATWG rules: fields, comments, multi-line data, CRLF)."""
    event = "message"
    data: list[str] = []
    msg_id: str | None = None
    retry: int | None = None
    seen = False
    lines = stream.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for raw in lines[:-1]:  # what follows the last line break is not a complete line
        if raw == "":
            if seen:
                yield SSEMessage(event=event, data="\n".join(data), id=msg_id, retry=retry)
            event, data, msg_id, retry, seen = "message", [], None, None, False
            continue
        if raw.startswith(":"):
            continue
        name, sep, value = raw.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        seen = True
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            msg_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            retry = int(value)

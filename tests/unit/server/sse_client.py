"""Reading an event stream message by message, as a client would."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

from fiduciary.events import SSEMessage, parse_sse


@dataclass(frozen=True)
class Block:
    """One message of the stream: a parsed message, or only comments (``comment``)."""

    message: SSEMessage | None
    comment: str | None
    raw: str


async def blocks(response: httpx.Response) -> AsyncIterator[Block]:
    buffer = ""
    async for text in response.aiter_text():
        buffer += text
        while "\n\n" in buffer:
            raw, buffer = buffer.split("\n\n", 1)
            parsed = list(parse_sse(raw + "\n\n"))
            comments = [line[1:].strip() for line in raw.split("\n") if line.startswith(":")]
            yield Block(
                parsed[0] if parsed else None, comments[0] if comments and not parsed else None, raw
            )

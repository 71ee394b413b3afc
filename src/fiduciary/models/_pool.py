"""Private: the HTTP connection pool of a provider model (OpenAI, Anthropic, Gemini).

A pool the caller gave (``http_client=``) is the caller's: used, never closed here. Otherwise
the model opens one on its first request (with the SDK's own defaults) and ``aclose`` closes it;
a later request opens a new one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    import httpx2  # the SDKs' HTTP library: imported by them, only named here

__all__ = ["ConnectionPool"]

C = TypeVar("C", bound="httpx2.AsyncClient")


class ConnectionPool(Generic[C]):
    """The pool a model was given, or the one it opens with ``open_pool`` and owns."""

    def __init__(self, given: C | None, open_pool: Callable[[], C]) -> None:
        self._client = given
        self._owned = given is None
        self._open = open_pool

    def client(self) -> C:
        if self._client is None:
            self._client = self._open()
        return self._client

    async def aclose(self) -> None:
        """Close the pool if the model opened it (not one it was given)."""
        if self._client is not None and self._owned:
            await self._client.aclose()
            self._client = None

"""Private: the error skeleton every provider model shares.

A provider reads its SDK's error (status, error type, message, wait asked for) and hands it to
``api_error``, which classifies it and shapes the ``ModelError`` the same way for every provider:
a refused key names where the key came from and never echoes it; any other refusal shows the
status, the provider's type and its text, with anything that looks like a key scrubbed.
``mapped_errors`` wraps each call into an SDK: the SDK's errors are translated, a cut connection
is a retryable ``connection`` / ``timeout`` error, and, while streaming, a garbled event is a
retryable ``invalid_output``. Anything else passes through unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TypeVar

from ..exceptions import ModelError
from .retry import (
    auth_error,
    classify_status,
    is_transport_error,
    scrub_provider_text,
    transport_error,
)

__all__ = ["api_error", "key_source", "mapped_errors"]

E = TypeVar("E", bound=BaseException)

_CALLABLE_KEY = "the key your api_key= callable returns"


def key_source(api_key: Callable[[], str | None] | None, variables: str) -> str:
    """Where a refused key came from, as told to the person: the callable, or the variables."""
    return _CALLABLE_KEY if api_key is not None else variables


def api_error(
    model: str,
    *,
    status: int | None,
    error_type: str | None,
    message: str | None,
    key_from: str,
    label: str | None = None,
    retry_after: float | None = None,
    fallback: str = "the API refused the request",
) -> ModelError:
    """The ``ModelError`` for a provider's refusal.

    ``status`` is the HTTP status (None for an error inside a stream), ``error_type`` the code
    ``classify_status`` reads, ``label`` what is shown of the provider's type (often the same),
    ``message`` the provider's text; ``fallback`` is shown when there is nothing else to show.
    """
    code, retryable = classify_status(status, error_type)
    if code == "auth":
        return auth_error(
            model,
            status,
            " ".join(p for p in (label, message) if p),
            key_from=key_from,
            retry_after=retry_after,
        )
    shown = scrub_provider_text(" ".join(str(p) for p in (status, label, message) if p))
    return ModelError(
        f"{model}: {shown or fallback}",
        code=code,
        retryable=retryable,
        retry_after=retry_after,
        status=status,
    )


@contextlib.contextmanager
def mapped_errors(
    model: str,
    sdk_error: type[E],
    translate: Callable[[E], ModelError],
    *,
    malformed: type[Exception] | tuple[type[Exception], ...] = (),
) -> Iterator[None]:
    """Translate what a call into a provider's SDK raises (see the module docstring).

    ``malformed``: the exceptions a garbled streamed event raises (while streaming only; a
    non-streamed answer that is not JSON is the caller's to judge).
    """
    try:
        yield
    except sdk_error as exc:
        raise translate(exc) from exc
    except malformed as exc:  # a garbled event: the stream is not usable
        raise ModelError(
            f"{model}: the stream carried malformed JSON", code="invalid_output", retryable=True
        ) from exc
    except Exception as exc:
        if is_transport_error(exc):
            raise transport_error(exc, model) from exc
        raise

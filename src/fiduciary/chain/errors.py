"""The chain backend's errors. ``ChainError`` is a refusal known to have had no effect on the
chain (a capability error: the core reports it as such); ``ChainOutcomeUnknown`` means a
transaction may or may not have taken effect and must never be retried blindly."""

from __future__ import annotations

from ..exceptions import CapabilityError, FiduciaryError

__all__ = ["ChainError", "ChainOutcomeUnknown"]


class ChainError(CapabilityError):
    """Refused before anything reached the chain (or the chain refused it without effect)."""


class ChainOutcomeUnknown(FiduciaryError):  # noqa: N818 - an outcome, not a fault
    """The transaction of a call may have taken effect: never signed again, never retried."""

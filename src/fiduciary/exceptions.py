"""Every error fiduciary raises, under one root.

```
FiduciaryError
├── ConfigurationError        an Agent, capability or policy set up wrongly (a programming error)
├── CapabilityError           raised by a handler: a clear, expected refusal the model may act on
│                             (``code``: one of ``ErrorCode``, a closed set)
├── ApprovalError             approve / deny / submit_result refused (``code`` says why)
├── RunError                  a run cannot be started, continued or found (``code`` says why)
├── StoreError                the store failed; driver errors are translated into this
│   ├── StaleEpochError       an append from a worker whose lease was taken over (fencing)
│   ├── ConflictError         a uniqueness rule held (a seq already written, a key already used)
│   └── StoreUnavailableError ``Agent.resume_all``: the store failed for runs it had to move
└── ModelError                the model could not be reached or answered something unusable
                              (``code`` says why; ``retryable`` and ``retry_after`` guide retries)
```

A run suspended for approval is not an error: ``Agent.run`` simply ends after the
``pending_action`` events and the run's status says ``awaiting_approval``.
"""

from __future__ import annotations

from typing import Literal, TypeGuard, get_args
from uuid import UUID

__all__ = [
    "ERROR_CODES",
    "ApprovalError",
    "CapabilityError",
    "ConfigurationError",
    "ConflictError",
    "ErrorCode",
    "FiduciaryError",
    "ModelError",
    "RunError",
    "StaleEpochError",
    "StoreError",
    "StoreUnavailableError",
    "is_error_code",
]

# The codes a CapabilityError may carry, and so the ``error_code`` of a tool error: a closed
# set, here and nowhere else (mypy refuses a literal outside it; CapabilityError refuses any
# other at run time). Add a code when a refusal means something none of these says; never
# rename or reuse one (models, hosts and logs read them).
ErrorCode = Literal[
    # the general five: a refusal that fits one of them uses it
    "precondition",  # the state does not allow the call now (a rule, a limit, an order of steps)
    "not_found",  # what the call names does not exist (or is not the caller's)
    "conflict",  # it clashes with what exists (already done, already there, already paid)
    "unauthorized",  # the caller may not do this
    "budget",  # a spending or usage budget would be exceeded
    # what the gates themselves report as a tool error
    "timeout",
    "invalid_output",
    "handler_error",
    "outcome_unknown",
    "failed",  # a failure the ledger recorded without a code
    "amount_out_of_range",
    "not_recorded",  # a replay: no recorded call answers this one
    "unknown_skill",
    "question",  # a question to the person: answered, not executed (fiduciary.questions)
    # money and assets
    "invalid_amount",
    "bad_amount",
    "insufficient_funds",
    "insufficient_liquidity",
    "borrow_limit",
    "nothing_to_repay",
    "nothing_to_claim",
    "unknown_asset",
    "unsupported_asset",
    "same_asset",
    "wrong_asset",
    "unknown_pair",
    "price_impact",
    "slippage_exceeded",
    "slippage_limit",
    "quote_expired",
    "quote_mismatch",
    "unknown_quote",
    # addresses and contacts
    "invalid_address",
    "bad_address",
    "bad_checksum",
    "zero_address",
    "own_address",
    "unknown_recipient",
    "token_contract_recipient",
    "invalid_contact",
    "contact_exists",
    # records
    "unknown_transaction",
    "unknown_intent",
    "unknown_invoice",
    "already_paid",
    "already_cancelled",
    "invalid_invoice",
    "invalid_link",
    "invalid_due_date",
    "asset_mismatch",  # a payment in another asset than the link or invoice asks
    "amount_mismatch",  # a payment of another amount than the link or invoice asks
    "bad_payment_request",  # an HTTP 402 answer that is not x402 (version 2)
    "price_changed",  # the API asks another price than the one approved: nothing is paid
    "idempotency_conflict",
    # the chain
    "reverted",
    "refused_by_node",
    "simulation_failed",
    "no_router",
    "no_vault",
    "nothing_saved",  # a withdrawal of "all" with no shares in the vault
    "not_this_chain",  # approved for another chain, sender or contract than the wallet's
    "client_signs",  # the person's own key signs this write (a client-executed call)
    "bad_report",  # a client's reported result is not a transaction hash
    "does_not_match",  # the reported transaction is not the approved call
    "already_reported",  # the transaction was reported for another approval
    "no_receipt",  # the reported transaction has no receipt (not mined, or dropped)
    # delegation (fiduciary.delegation)
    "unknown_delegate",  # the agent named is not one this agent may delegate to
    "misconfigured",  # the delegate does not share the delegating agent's store
    "delegation_too_deep",  # a fourth level of delegation
    "delegation_cycle",  # the agent asked is already working on this task further up
    "over_budget",  # the child asks more USD than the parent has left
    "over_turns",  # the child asks more model turns than the parent has left
    "delegation_failed",  # the child run failed, was cancelled or could not be driven
    # HTTP endpoints (apps) and MCP servers
    "host_not_allowed",
    "unsafe_url",
    "unreachable",
    "redirect_refused",
    "refused",  # the other side refused the call (an HTTP 4xx without a closer code)
    "rate_limited",
    "http_error",
    "mcp_error",
    "mcp_tool_error",
    "mcp_unavailable",
]

ERROR_CODES: frozenset[str] = frozenset(get_args(ErrorCode))


def is_error_code(code: object) -> TypeGuard[ErrorCode]:
    """Whether ``code`` is one of the closed set (a code read back from a log may not be)."""
    return isinstance(code, str) and code in ERROR_CODES


class FiduciaryError(Exception):
    """The root of every error fiduciary raises."""


class ConfigurationError(FiduciaryError):
    """fiduciary was set up wrongly: a bad capability declaration, an unknown preset, ..."""


class CapabilityError(FiduciaryError):
    """A handler's refusal: the model receives ``code`` and ``message`` as a tool error.

    Raise it for expected, explainable failures (insufficient funds, unknown asset). Any other
    exception from a handler is reported to the model as ``handler_error`` without its text.
    ``code`` is one of ``ErrorCode`` (``precondition``, ``not_found``, ``conflict``,
    ``unauthorized``, ``budget`` and the specific ones listed there): any other is a type error
    and, at run time, a ``ConfigurationError`` (the handler's bug, reported as
    ``handler_error``).
    """

    def __init__(self, code: ErrorCode, message: str) -> None:
        if code not in ERROR_CODES:
            raise ConfigurationError(
                f"{code!r} is not a capability error code; use one of fiduciary.exceptions."
                "ErrorCode (precondition, not_found, conflict, unauthorized, budget, ...)"
            )
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message


class ApprovalError(FiduciaryError):
    """A decision on a pending action was refused; nothing was changed.

    ``code`` is one of: ``unknown``, ``already_decided``, ``expired``, ``forbidden``,
    ``digest_mismatch``, ``field_not_modifiable``, ``invalid_edit``, ``acknowledgement_required``,
    ``client_executed``, ``not_client_executed``, ``tampered`` (the stored approval does not
    match the pending action in the run's log: it was altered outside fiduciary),
    ``separation_of_duties`` (under dual control: the proposer, or someone outside the group,
    tried to approve), ``already_voted`` (this approver already approved these arguments),
    ``signature_required`` (the approval must be signed with a passkey, in the console),
    ``signature_refused`` (the passkey assertion was refused: the reason says why),
    ``result_refused`` (a client-executed action's reported result was checked and refused,
    e.g. a transaction hash that does not match the approved call: the refusal is recorded as
    the call's outcome and the run is told),
    ``question`` (a question to the person is answered, not approved: ``Agent.answer``),
    ``invalid_answer`` (empty, too long, or not one of the question's choices),
    ``not_regenerable`` (fresh arguments were asked for an action whose capability cannot make
    them: it declares no ``regenerate``).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RunError(FiduciaryError):
    """A run could not be started or continued.

    ``code`` is one of: ``not_found``, ``busy``, ``forbidden``, ``state``, ``invalid``,
    ``agent_mismatch`` (this agent lacks the run's capabilities or has another model).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StoreError(FiduciaryError):
    """The store failed. The write it was asked for did not happen (it is all or nothing)."""


class StaleEpochError(StoreError):
    """The run's lease was taken over by another worker; this worker must stop writing."""


class ConflictError(StoreError):
    """A uniqueness rule of the store held: the write was refused and nothing changed."""


class StoreUnavailableError(StoreError):
    """``Agent.resume_all`` could not move every run it had to: listing the runnable runs failed
    (``failed`` is empty), or the store failed while resuming the runs in ``failed``.
    ``resumed``: the runs that were driven to their next stop all the same. Nothing was lost:
    each failed run is left as it was, for a later attempt (``keep_runs_moving`` retries)."""

    def __init__(
        self, message: str, *, resumed: tuple[UUID, ...] = (), failed: tuple[UUID, ...] = ()
    ) -> None:
        super().__init__(message)
        self.message = message
        self.resumed = resumed
        self.failed = failed


class ModelError(FiduciaryError):
    """The model could not be reached or its answer could not be used.

    Provider errors (SDK exceptions, HTTP statuses, broken streams) are translated into this at the
    provider's boundary. ``code`` is one of: ``rate_limited``, ``overloaded``, ``server_error``,
    ``connection``, ``timeout``, ``stream_cut``, ``auth``, ``bad_request``, ``not_found``,
    ``quota``, ``unavailable`` (a CLI binary is missing), ``unsafe_tools`` (a CLI agent whose own
    tools cannot be switched off, offered capabilities with effects), ``invalid_output`` or
    ``error``.
    ``retryable`` says whether asking again may succeed; ``retry_after`` is the wait in seconds
    the provider asked for, when it did.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "error",
        retryable: bool = False,
        retry_after: float | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status

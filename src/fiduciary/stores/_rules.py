"""Private: the commit and ledger rules every store applies, and the errors they give.

A commit is refused when its run does not exist (``StoreError``), when its epoch is no longer
the run's (``StaleEpochError``) or when its events do not follow the run's last seq
(``ConflictError``); ``ledger_begin`` is fenced by the same epoch rule. The memory store checks
these in Python; the SQL stores check them against the run row inside their transaction and
ask these functions why a row refused a request, so every backend words a refusal alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from ..events import Event
from ..exceptions import ConflictError, FiduciaryError, StaleEpochError, StoreError

__all__ = [
    "commit_refusal",
    "copy_error",
    "epoch_refusal",
    "seq_error",
]


def seq_error(run_id: UUID, last_seq: int, events: Sequence[Event]) -> ConflictError | None:
    """Why ``events`` cannot follow ``last_seq`` in run ``run_id`` (None: they can)."""
    expected = last_seq + 1
    for event in events:
        # (``is`` first: a drive's events share its run_id object; UUID's == is Python code)
        if event.run_id is not run_id and event.run_id != run_id:
            return ConflictError(f"event for run {event.run_id} appended to run {run_id}")
        if event.seq != expected:
            return ConflictError(f"run {run_id}: expected seq {expected}, got {event.seq}")
        expected += 1
    return None


def epoch_refusal(run_id: UUID, epoch: int, current: int | None) -> FiduciaryError | None:
    """Why a holder of ``epoch`` may not write to run ``run_id`` whose epoch is ``current``
    (None: no such run); None when it may."""
    if current is None:
        return StoreError(f"run {run_id} does not exist")
    if current != epoch:
        return StaleEpochError(f"run {run_id}: epoch {epoch} is stale (now {current})")
    return None


def commit_refusal(
    run_id: UUID, epoch: int, state: tuple[int, int] | None, events: Sequence[Event]
) -> FiduciaryError | None:
    """Why a commit of ``events`` at ``epoch`` cannot apply to a run in ``state`` (its epoch
    and last seq; None: no such run); None when it can."""
    return epoch_refusal(run_id, epoch, None if state is None else state[0]) or seq_error(
        run_id, state[1] if state is not None else 0, events
    )


def copy_error(exc: FiduciaryError) -> FiduciaryError:
    """A fresh exception of the same kind, so that no two callers raise one object."""
    try:
        copy = type(exc)(*exc.args)
    except TypeError:
        return exc
    copy.__cause__ = exc.__cause__
    return copy

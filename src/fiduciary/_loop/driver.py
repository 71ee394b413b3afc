"""``Driver``: one drive of a leased run, from wherever its log stands to its next stop.

The run's state is its event log. A drive retracts a partial turn a crash left, settles the
calls left open (``settle``), then alternates model turns (``turn``) and the writes they asked
for (``dispatch``) until the run completes, fails, or waits for a person. It owns the run's
lease meanwhile (``writer``) and always releases it.
"""

from __future__ import annotations

import asyncio
import contextlib

from .._logs import logger
from ..delegation import handoff_answer
from ..events import RunCompletedDraft, RunFailedDraft, TurnRetractedDraft
from ..exceptions import StaleEpochError, StoreError
from ..stores.base import ApprovalRecord, RunStatus
from .context import remember_reply
from .dispatch import dispatch_writes
from .output import over_retries
from .runtime import run_limits
from .settle import cancel, settle
from .state import Drive
from .text_checks import blocked
from .turn import model_turn

__all__ = ["Driver"]

log = logger("fiduciary.loop")


class Driver(Drive):
    """Drives one leased run; events reach ``writer.out`` only after they are committed."""

    async def drive(self) -> None:
        """Continue the run from wherever its log stands; always releases the lease.

        A failing store (a commit or a read refused for any reason but a takeover) is raised
        once the lease is released: nothing more is written, everything committed stays, and
        the run — left ``running`` or woken — is found again by ``runs_to_resume``.
        """
        self.writer.start_renewing()
        failure: StoreError | None = None
        stopped: BaseException | None = None
        try:
            await self._drive()
            self.writer.stop_renewing()
            await self.writer.close()  # the last commit releases the lease
            self.settled = True
        except StaleEpochError as exc:  # a commit or a ledger_begin refused: nothing written
            stopped = exc
            log.warning("run %s was taken over by another worker; stopping", self.run_id)
        except StoreError as exc:
            failure = exc
        except asyncio.CancelledError as exc:
            stopped = exc
            raise
        except Exception as exc:
            stopped = exc
            log.exception("run %s failed", self.run_id)
            try:
                message = f"internal error ({type(exc).__name__})"
                self.emit(RunFailedDraft(reason="error", message=message), status="failed")
                await self.barrier()
            except StaleEpochError:
                pass
            except StoreError as store_exc:
                failure = store_exc
            except Exception:
                log.exception("run %s: its failure could not be recorded", self.run_id)
        finally:
            self.writer.stop_renewing()
            if not self.writer.closed:
                with contextlib.suppress(BaseException):
                    await self.barrier()
                if self.writer.recorded:  # (a run whose creation failed is not ours)
                    with contextlib.suppress(Exception):
                        await self.rt.store.release(self.run_id, epoch=self.epoch)
            self.writer.end()
            self.trace.end(failure or stopped)
        if failure is not None:
            log.warning(
                "run %s stopped: the store failed (%s); it can be resumed", self.run_id, failure
            )
            raise failure

    async def _drive(self) -> None:
        t, limits = self.t, self.rt.limits
        if self.run.status != "running":
            # while driven the run is "running": a crash now leaves it for resume_all to find.
            # This commit also clears the run's wake marker; it is committed before the
            # decisions are read, so a decision made after it marks the run again.
            self.emit(status="running")
            await self.barrier()
        if t.partial_from is not None:
            self.emit(TurnRetractedDraft(from_seq=t.partial_from))
        if t.unresolved or t.refreshing:  # (a refresh a crash cut off runs again)
            pending = await settle(self)
            if pending or self.awaiting:
                self._suspend(pending)
                return
        if t.turns_since_user == 0 and await blocked(self, "input", t.user_text):
            return
        while True:
            # a handoff: the delegated agent's answer is the run's (fiduciary.delegation)
            handed = handoff_answer(t.messages)
            max_turns = run_limits(limits, t.started)[0]
            if handed is None and t.turns_since_user >= max_turns:
                message = f"stopped after {max_turns} model turns"
                self.emit(RunFailedDraft(reason="max_turns", message=message), status="failed")
                return
            if handed is None:
                turn = await model_turn(self)
                if turn is None:
                    return
                called, writes = turn
            else:
                called, writes = False, []
            answer = self.answer
            if handed is not None or answer is not None or (not called and self.output is None):
                text = t.last_text if handed is None else handed
                if await blocked(self, "output", text):
                    return
                done = RunCompletedDraft(
                    text=text,
                    input_tokens=t.input_tokens,
                    output_tokens=t.output_tokens,
                    tool_calls=t.tool_calls,
                    cost_usd=t.cost_usd,
                    # a typed answer (fiduciary.outputs), redacted as every event is
                    output=None if answer is None else self.rt.redactor.redact(answer.record),
                )
                self.emit(done, status="completed")
                remember_reply(self, text)
                return
            pending = await dispatch_writes(self, writes)
            if pending or self.awaiting:
                self._suspend(pending)
                return
            if over_retries(self):  # too many answers that were not the run's output type
                return

    def _suspend(self, pending: list[ApprovalRecord]) -> None:
        executors = {p.executor for p in pending}
        status: RunStatus = (
            "awaiting_child"  # only runs it delegated to (fiduciary.delegation): no person
            if not pending
            else "awaiting_approval"
            if "server" in executors
            else "awaiting_input"  # a question to the person (fiduciary.questions)
            if "person" in executors
            else "awaiting_client_result"
        )
        self.emit(status=status)

    async def cancel(self, *, by: str, reason: str) -> None:
        """End the run for good (``Agent.cancel``, which holds the principal's lock around
        this): close every open call, then fail it ``aborted`` with status ``cancelled``.
        Nothing is executed here."""
        stopped: BaseException | None = None
        try:
            await cancel(self, by=by, reason=reason)
        except BaseException as exc:
            stopped = exc
            raise
        finally:
            self.trace.end(stopped)

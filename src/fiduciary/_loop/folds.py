"""Folds kept between the messages of a conversation, so a long one costs the same every turn.

When a drive settles, its transcript is kept (a few runs at most). At the run's next lease by
this process, if no one else has leased it since (the epoch is the kept one plus one), only the
events after the kept fold are read and applied; otherwise the whole log is folded again.
"""

from __future__ import annotations

from uuid import UUID

from ..stores.base import RunRecord, Store
from .transcript import Transcript

__all__ = ["KeptFolds"]


class KeptFolds:
    def __init__(self, most: int = 64) -> None:
        self.most = most
        self._kept: dict[UUID, tuple[int, Transcript]] = {}  # run -> (epoch, its fold)

    def keep(self, run_id: UUID, epoch: int, transcript: Transcript) -> None:
        self._kept[run_id] = (epoch, transcript)
        while len(self._kept) > self.most:
            del self._kept[next(iter(self._kept))]

    async def take(self, store: Store, run: RunRecord) -> Transcript | None:
        """The kept fold of a run just leased, brought up to date; None when there is none
        usable (the caller folds the whole log). Raises what reading the store raises."""
        kept = self._kept.pop(run.run_id, None)
        if kept is None or kept[0] + 1 != run.epoch or kept[1].last_seq > run.last_seq:
            return None
        transcript = kept[1]
        for event in await store.read_events(run.run_id, after_seq=transcript.last_seq):
            transcript.apply(event)
        return transcript

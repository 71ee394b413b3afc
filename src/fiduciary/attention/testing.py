"""Fakes of the attention seams: a judge that answers without a model, a source over a list."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence

from .types import Batch, Incoming, JudgeInput, Judgment

__all__ = ["ListSource", "RuleJudge"]


class RuleJudge:
    """A zero-latency judge: ``rule(input)`` names the route; probabilities put ``confidence`` on
    it and share the rest. ``calls`` counts the judgments asked of it."""

    def __init__(
        self,
        rule: Callable[[JudgeInput], str],
        *,
        name: str = "rule",
        confidence: float = 0.8,
    ) -> None:
        self._rule = rule
        self._name = name
        self._confidence = confidence
        self.calls = 0
        self.inputs: list[JudgeInput] = []

    @property
    def name(self) -> str:
        return self._name

    async def __call__(self, judge_input: JudgeInput) -> Judgment:
        self.calls += 1
        route = self._rule(judge_input)
        others = [o.route for o in judge_input.routes if o.route != route]
        rest = (1 - self._confidence) / len(others) if others else 0.0
        probabilities = {route: self._confidence if others else 1.0}
        probabilities.update({r: rest for r in others})
        return Judgment(route=route, probabilities=probabilities, model=self._name)


class ListSource:
    """Yields ``events`` in batches of ``size``; the cursor is the index of the next event.

    ``opened`` records the cursor of every open; ``fail`` maps an index to an exception raised
    (once) when the source reaches it.
    """

    def __init__(
        self,
        events: Sequence[Incoming],
        *,
        name: str = "list",
        size: int = 2,
        fail: dict[int, BaseException] | None = None,
    ) -> None:
        self._events = list(events)
        self._name = name
        self._size = size
        self._fail = dict(fail or {})
        self.opened: list[str | None] = []

    @property
    def name(self) -> str:
        return self._name

    async def batches(self, cursor: str | None) -> AsyncIterator[Batch]:
        self.opened.append(cursor)
        start = int(cursor) if cursor is not None else 0
        for at in range(start, len(self._events), self._size):
            if at in self._fail:
                raise self._fail.pop(at)
            chunk = self._events[at : at + self._size]
            yield Batch(events=tuple(chunk), cursor=str(at + len(chunk)))

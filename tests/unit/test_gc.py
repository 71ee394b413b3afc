"""The collector's policy for a process driving many runs (serve, worker)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from fiduciary._gc import YOUNG_THRESHOLD, for_many_runs


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_what_start_up_made_is_frozen_and_young_collections_are_rarer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FIDUCIARY_GC", raising=False)
    _, older, oldest = gc.get_threshold()
    assert for_many_runs()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (YOUNG_THRESHOLD, older, oldest)


def test_fiduciary_gc_default_keeps_cpythons_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIDUCIARY_GC", "default")
    before = gc.get_threshold()
    assert not for_many_runs()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0

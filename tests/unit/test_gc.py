"""The collector's policy for a process driving many runs (serve, worker)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from fiduciary._gc import for_many_runs


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


# In a process of its own: here it would collect and freeze the heap of every test run so far
# (seconds, growing with the suite) instead of a start-up's
PROBE = """
import gc
from fiduciary._gc import YOUNG_THRESHOLD, for_many_runs
_, older, oldest = gc.get_threshold()
assert for_many_runs()
assert gc.get_freeze_count() > 0, gc.get_freeze_count()
assert gc.get_threshold() == (YOUNG_THRESHOLD, older, oldest), gc.get_threshold()
print("frozen", gc.get_freeze_count())
"""


def test_what_start_up_made_is_frozen_and_young_collections_are_rarer() -> None:
    env = {k: v for k, v in os.environ.items() if k != "FIDUCIARY_GC"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("frozen "), done.stdout


def test_fiduciary_gc_default_keeps_cpythons_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIDUCIARY_GC", "default")
    before = gc.get_threshold()
    assert not for_many_runs()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0

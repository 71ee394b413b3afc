"""The garbage collector's policy in a process that drives many runs at once (serve, worker).

With CPython's thresholds (700, 10, 10) a young collection runs every 700 net allocations of
container objects, and with many runs in flight a full collection, which walks every object the
process holds, follows every few hundred runs. Measured with ``bench/concurrency.py``'s (a) —
1,000 runs at once on SQLite — the collector took 27-30% of the time.

``for_many_runs`` collects once and freezes what start-up made (modules, schemas, the app and
its agent: never garbage, so never walked again), then lets the young generation grow to
10,000 net allocations before it is collected. The same 1,000 runs then spend 11-12% of
their time in the collector (366 -> 435 runs/s in one measurement). The cost: cyclic garbage
waits longer to be freed (at most a few MB); memory freed by reference counting, most of it,
is freed at once as before. An object made before the freeze that later becomes cyclic garbage
is never freed: call it once start-up is over.
``FIDUCIARY_GC=default`` keeps CPython's policy.
"""

from __future__ import annotations

import gc
import os

__all__ = ["YOUNG_THRESHOLD", "for_many_runs"]

YOUNG_THRESHOLD = 10_000  # net allocations between young collections (CPython: 700)


def for_many_runs() -> bool:
    """Freeze what exists now and raise the young generation's threshold, once the process
    has started (call it last, before serving). False, changing nothing, when
    ``FIDUCIARY_GC=default`` asks for CPython's policy."""
    if os.environ.get("FIDUCIARY_GC", "").strip().lower() == "default":
        return False
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
    return True

"""Memory across runs: a small ``Memory`` seam (remember / recall) and its stores.

- ``SQLiteMemory``: the embedded default, FTS5 ranked by BM25, in the SQLite file;
- ``PostgresMemory``: PostgreSQL's full-text search (``fiduciary.memory.postgres``, needs the
  ``postgres`` extra);
- ``InMemoryMemory``: for tests.

Each takes an optional ``embedder`` whose vectors are blended with the lexical rank.
An agent uses one through ``Agent(memory=...)`` (``fiduciary.context.recall.MemoryLayer``:
bounded recalls, background remembering, redaction).
"""

from .base import Embedder, Memory, MemoryRecord
from .inmemory import InMemoryMemory
from .sqlite import SQLiteMemory

__all__ = ["Embedder", "InMemoryMemory", "Memory", "MemoryRecord", "SQLiteMemory"]

"""Memory across runs: a small ``Memory`` seam (remember / recall) and its stores.

- ``SQLiteMemory``: the embedded default, FTS5 ranked by BM25, in the SQLite file;
- ``PostgresMemory``: PostgreSQL's full-text search (``fiduciary.memory.postgres``, needs the
  ``postgres`` extra);
- ``InMemoryMemory``: for tests.

Each takes an optional ``embedder`` whose vectors are blended with the lexical rank.
``MemoryLayer`` is how an agent uses one: bounded recalls, background remembering, redaction.
"""

from .base import Embedder, Memory, MemoryRecord
from .inmemory import InMemoryMemory
from .layer import MemoryLayer
from .sqlite import SQLiteMemory

__all__ = ["Embedder", "InMemoryMemory", "Memory", "MemoryLayer", "MemoryRecord", "SQLiteMemory"]

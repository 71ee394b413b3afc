"""Stores: the ``Store`` contract and its backends (memory, SQLite; PostgreSQL as an extra)."""

from .base import ApprovalRecord, AuditRecord, LedgerEntry, RunRecord, Store
from .memory import MemoryStore

__all__ = ["ApprovalRecord", "AuditRecord", "LedgerEntry", "MemoryStore", "RunRecord", "Store"]

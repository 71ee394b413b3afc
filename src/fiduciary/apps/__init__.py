"""Apps: agents that tick on their own, propose intents, and ask for scoped grants.

An app is a manifest (``apps/<id>/app.md``) the ``AppEngine`` runs beside the core: every hook
invocation is a fiduciary run, every intent a call through the same gates as any write. The
core never imports this package. See docs/apps.md.
"""

from .engine import MAX_ERRORS, AppEngine, MessageReply, Source, TickResult
from .grants import DEFAULT_GRANT_TTL
from .intents import CALLBACK_WINDOW, CALLBACKS, MAX_DEPTH
from .live import AppChannels, AppEmit
from .manifest import (
    HOOKS,
    TIER_SECONDS,
    Manifest,
    ManifestError,
    load_manifest,
    load_manifests,
    parse_manifest,
)
from .tables import AppRecord, AppTables, MemoryAppTables, SQLiteAppTables, TickRecord

__all__ = [
    "CALLBACKS",
    "CALLBACK_WINDOW",
    "DEFAULT_GRANT_TTL",
    "HOOKS",
    "MAX_DEPTH",
    "MAX_ERRORS",
    "TIER_SECONDS",
    "AppChannels",
    "AppEmit",
    "AppEngine",
    "AppRecord",
    "AppTables",
    "Manifest",
    "ManifestError",
    "MemoryAppTables",
    "MessageReply",
    "SQLiteAppTables",
    "Source",
    "TickRecord",
    "TickResult",
    "load_manifest",
    "load_manifests",
    "parse_manifest",
]

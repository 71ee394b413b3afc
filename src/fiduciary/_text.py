"""Private: the few text conventions shared by the loop and the scripted model."""

from __future__ import annotations

__all__ = ["NOTES_MARKER", "TRUNCATION_MARKER"]

# Guard notes follow a tool result's body after this marker, so the body stays parseable JSON.
NOTES_MARKER = "\n\n[notes] "
TRUNCATION_MARKER = "\n…[truncated "

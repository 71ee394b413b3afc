"""Private: the rules of ``fiduciary.redaction``: ``keys`` (sensitive key names) and ``text``
(patterns in free text, and the ``REDACTED`` marker)."""

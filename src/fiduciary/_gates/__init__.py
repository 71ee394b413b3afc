"""Private: the parts of ``fiduciary.gates``: ``attempt`` (what goes through the gates, and
the verdicts) and ``execution`` (steps 7-11, and the ledger's answers)."""

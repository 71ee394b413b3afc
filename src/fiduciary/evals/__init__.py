"""Evals: run an agent over a file of cases and check what each run did.

The file is a `pydantic-evals <https://ai.pydantic.dev/evals/>`_ dataset (YAML or JSON:
``name``, ``cases`` with ``name``, ``inputs``, ``expected_output``, ``metadata``,
``evaluators``, and dataset-wide ``evaluators``), read without that package: a case's
``inputs`` is the person's message (or a mapping with ``message``, ``principal``, ``approve``),
and its evaluators judge the run — the calls it made and their arguments, their tiers, the
calls it must not make, its status, its final text or output fields. ``fiduciary eval CASES``
runs it (``fiduciary.evals.cli``).
"""

from __future__ import annotations

from .checks import CHECKS, Check, Observed
from .dataset import EvalCase, EvalDataset, load_dataset
from .runner import CaseResult, EvalReport, run_dataset

__all__ = [
    "CHECKS",
    "CaseResult",
    "Check",
    "EvalCase",
    "EvalDataset",
    "EvalReport",
    "Observed",
    "load_dataset",
    "run_dataset",
]

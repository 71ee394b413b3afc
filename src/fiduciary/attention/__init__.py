"""The attention layer: a judge decides which incoming events deserve an agent run, a person,
or nothing; sources feed it durably; decisions start gated runs. See ``docs/attention.md``.

Nothing in the core imports this package.
"""

from .actions import RouteAction
from .judge import CompleteRequest, Judge, JudgeBudget, llm_judge
from .record import AttentionRecord, DecisionRecord
from .types import (
    DEFAULT_CRITERIA,
    DEFAULT_ROUTES,
    AttentionError,
    Batch,
    Incoming,
    JudgeImage,
    JudgeInput,
    Judgment,
    PermanentError,
    Predicate,
    RouteOffer,
    WindowEvent,
)
from .watch import Attention, Report, Source

__all__ = [
    "DEFAULT_CRITERIA",
    "DEFAULT_ROUTES",
    "Attention",
    "AttentionError",
    "AttentionRecord",
    "Batch",
    "CompleteRequest",
    "DecisionRecord",
    "Incoming",
    "Judge",
    "JudgeBudget",
    "JudgeImage",
    "JudgeInput",
    "Judgment",
    "PermanentError",
    "Predicate",
    "Report",
    "RouteAction",
    "RouteOffer",
    "Source",
    "WindowEvent",
    "llm_judge",
]

"""What a model is sent: token accounting, compaction, microcompact, system-prompt layers.

The log keeps everything; this package only decides what each model call carries. The loop
imports it (the one feature package the core may use).
"""

from .compaction import CompactionPolicy, Shape, Summarizer, compact, shaped
from .tokens import LastRequest, context_window, measure_request

__all__ = [
    "CompactionPolicy",
    "LastRequest",
    "Shape",
    "Summarizer",
    "compact",
    "context_window",
    "measure_request",
    "shaped",
]

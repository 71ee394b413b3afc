"""fiduciary: a durable, approval-gated runtime for LLM agents that act on someone's behalf.

The model proposes; fiduciary decides what may run, asks a person when it must, executes each
action at most once, and records everything. This module is the whole public API.
"""

from ._sync import RunResult, approve_sync, call_sync, deny_sync, resume_sync, run_sync
from ._version import __version__
from .agent import Agent
from .capabilities import (
    CallContext,
    Capability,
    Executor,
    Kind,
    Principal,
    Replay,
    Risk,
    capability,
)
from .clock import Clock, ManualClock, SystemClock
from .dual_control import DualControl
from .events import (
    ActionResolved,
    Event,
    GuardFired,
    PendingAction,
    RunCompleted,
    RunFailed,
    RunStarted,
    TextDelta,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
    decode_event,
    encode_event,
    encode_sse,
    parse_sse,
)
from .exceptions import (
    ApprovalError,
    CapabilityError,
    ConfigurationError,
    FiduciaryError,
    ModelError,
    RunError,
    StoreError,
    StoreUnavailableError,
)
from .gates import AuthorizationRequest
from .guards import Guard, GuardCall, Verdict
from .models.base import Model
from .policy import Operation, Policy, Threshold
from .questions import PendingQuestion, ask_person
from .redaction import Redactor
from .steps import Step, StepsReport, run_steps
from .stores.base import Store
from .stores.memory import MemoryStore
from .stores.sqlite import SQLiteStore

__all__ = [
    "ActionResolved",
    "Agent",
    "ApprovalError",
    "AuthorizationRequest",
    "CallContext",
    "Capability",
    "CapabilityError",
    "Clock",
    "ConfigurationError",
    "DualControl",
    "Event",
    "Executor",
    "FiduciaryError",
    "Guard",
    "GuardCall",
    "GuardFired",
    "Kind",
    "ManualClock",
    "MemoryStore",
    "Model",
    "ModelError",
    "Operation",
    "PendingAction",
    "PendingQuestion",
    "Policy",
    "Principal",
    "Redactor",
    "Replay",
    "Risk",
    "RunCompleted",
    "RunError",
    "RunFailed",
    "RunResult",
    "RunStarted",
    "SQLiteStore",
    "Step",
    "StepsReport",
    "Store",
    "StoreError",
    "StoreUnavailableError",
    "SystemClock",
    "TextDelta",
    "Threshold",
    "ToolCallEnd",
    "ToolCallRejected",
    "ToolCallStart",
    "Verdict",
    "__version__",
    "approve_sync",
    "ask_person",
    "call_sync",
    "capability",
    "decode_event",
    "deny_sync",
    "encode_event",
    "encode_sse",
    "parse_sse",
    "resume_sync",
    "run_steps",
    "run_sync",
]

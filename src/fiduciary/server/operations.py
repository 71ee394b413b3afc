"""The table of operations: each endpoint's route, scope, models, answers and handler.

The same table routes requests (``app.py``) and builds the OpenAPI document served at
``/openapi.json`` (``openapi.py``). A handler is ``async def handler(server, call)``; it is held
here, not looked up by name.
"""

from __future__ import annotations

from . import (
    account,
    ai_routes,
    approvals,
    auth,
    bus,
    passkeys,
    questions,
    records,
    runs,
    timetravel,
    traces,
    tree,
)
from .ai import AiStatus, DefaultBody
from .openapi import Operation, Param
from .pipeline import Handler
from .schemas import (
    ApprovalList,
    ApprovalOut,
    ApproveBody,
    BalancesOut,
    CreateRunBody,
    DenyBody,
    EventsQuery,
    HookBody,
    ListApprovalsQuery,
    ListRunsQuery,
    MessageBody,
    RegenerateBody,
    ResultBody,
    RunAccepted,
    RunList,
    RunOut,
    WhoAmI,
)

__all__ = ["OPERATIONS"]

_RUN_ID = Param("run_id", "path", {"type": "string", "format": "uuid"})
_APPROVAL_ID = Param("approval_id", "path", {"type": "string", "format": "uuid"})
_QUESTION_ID = Param("question_id", "path", {"type": "string", "format": "uuid"})

OPERATIONS: tuple[Operation[Handler], ...] = (
    Operation(
        "POST", "/runs", "createRun", "Start a run with a message", runs.create_run,
        scope=auth.RUNS_WRITE, body=CreateRunBody, status=202, response=RunAccepted,
        problems=("rate_limited", "run_busy"), tags=("runs",),
        description="Returns once the run and its first events are committed; the run goes on "
        "in the background. Follow it at `events_url`.",
    ),
    Operation(
        "GET", "/runs", "listRuns", "List runs, newest first", runs.list_runs,
        scope=auth.RUNS_READ, query=ListRunsQuery, response=RunList, tags=("runs",),
    ),
    Operation(
        "GET", "/runs/{run_id}", "getRun", "Get a run", runs.get_run,
        scope=auth.RUNS_READ, params=(_RUN_ID,), response=RunOut, problems=("not_found",),
        tags=("runs",),
    ),
    Operation(
        "POST", "/runs/{run_id}/messages", "postMessage", "Continue a run with a message",
        runs.post_message, scope=auth.RUNS_WRITE, params=(_RUN_ID,), body=MessageBody,
        status=202, response=RunAccepted,
        problems=("not_found", "run_busy", "run_state", "rate_limited"), tags=("runs",),
    ),
    Operation(
        "GET", "/runs/{run_id}/events", "runEvents", "Follow a run's events (SSE)",
        runs.events,
        scope=auth.RUNS_READ,
        params=(
            _RUN_ID,
            Param(
                "Last-Event-ID", "header", {"type": "string", "maxLength": 20}, required=False,
                description="The seq of the last event received: resume after it.",
            ),
        ),
        query=EventsQuery, media_type="text/event-stream",
        problems=("not_found", "invalid_last_event_id"), tags=("runs",),
        description="Server-sent events: `id:` is the event's seq. Resume with Last-Event-ID "
        "(or `?after=`); no event is skipped or repeated. An `event: reconnect` message with "
        '`{"after": seq}` asks the client to reconnect from there.',
    ),
    Operation(
        "GET", "/events", "globalEvents", "Follow every run's events in one stream (SSE)",
        bus.global_events,
        scope=auth.RUNS_READ,
        params=(
            Param(
                "Last-Event-ID", "header", {"type": "string", "maxLength": 20}, required=False,
                description="The id of the last event received: resume after it.",
            ),
        ),
        query=bus.GlobalEventsQuery, media_type="text/event-stream",
        problems=("invalid_last_event_id",), tags=("runs",),
        description="Server-sent events of the caller's runs (an admin key: everyone's), in "
        "one global order: `event: run_status` (a run started, waits for a person, completed, "
        "failed, was cancelled), `text` (the model's text) or `tool_call` (a call started, "
        "succeeded, failed, was denied, approved or reported). `id:` is the event's position: "
        "resume with Last-Event-ID (or `?after=`); no event is skipped or repeated.",
    ),
    Operation(
        "GET", "/runs/{run_id}/trace", "runTrace", "A run's trace, as a waterfall of spans",
        traces.run_trace, scope=auth.RUNS_READ, params=(_RUN_ID,),
        response=traces.TraceView, problems=("not_found",), tags=("runs",),
        description="The spans OpenTelemetry would receive (`invoke_agent` per drive, `chat` "
        "per model call, `execute_tool` per call with kind, tier and outcome), built from the "
        "run's log, and an `await_approval` span while a pending action waits for a person "
        "(`end` null while it waits).",
    ),
    Operation(
        "GET", "/runs/{run_id}/tree", "runTree", "A run's delegation tree", tree.run_tree_view,
        scope=auth.RUNS_READ, params=(_RUN_ID,), response=tree.RunTreeOut,
        problems=("not_found",), tags=("runs",),
        description="The runs above this one (`parents`, the one a person started first) and "
        "the run with the runs it delegated to, nested (`tree`: each with its delegate name, "
        "status, own cost and cost with every run below it).",
    ),
    Operation(
        "POST", "/runs/{run_id}/cancel", "cancelRun", "Cancel a run", runs.cancel_run,
        scope=auth.RUNS_WRITE, params=(_RUN_ID,), response=RunOut,
        problems=("not_found", "run_busy", "run_state"), tags=("runs",),
    ),
    Operation(
        "POST", "/runs/{run_id}/replay", "replayRun", "Replay a run, executing no write",
        timetravel.replay_run, scope=auth.RUNS_WRITE, params=(_RUN_ID,),
        body=timetravel.ReplayBody, status=201, response=RunOut,
        problems=("not_found", "invalid_request", "run_state", "rate_limited"),
        tags=("time travel",),
        description="A new run marked as a replay (`run_started.replay_of`): the person's "
        "messages are sent again, reads answer from the recording, writes are recorded as what "
        "they would have called and never executed. Answered once the replay has ended.",
    ),
    Operation(
        "POST", "/runs/{run_id}/fork", "forkRun", "Fork a run at a seq", timetravel.fork_run,
        scope=auth.RUNS_WRITE, params=(_RUN_ID,), body=timetravel.ForkBody, status=201,
        response=RunOut,
        problems=(
            "not_found", "invalid_request", "insufficient_scope", "run_state", "rate_limited",
            "digest_mismatch", "field_not_modifiable", "invalid_edit",
        ),
        tags=("time travel",),
        description="A new, real run (`run_started.fork_of`, `fork_at`) whose history is the "
        "run's log up to `at_seq`, driven on from there: its writes pass the gates and execute. "
        "`decide` (needs `approvals:decide`) decides the approval pending at the cut.",
    ),
    Operation(
        "GET", "/runs/{run_id}/diff/{other_id}", "diffRuns", "Where two runs diverge",
        timetravel.diff_runs, scope=auth.RUNS_READ,
        params=(_RUN_ID, Param("other_id", "path", {"type": "string", "format": "uuid"})),
        response=timetravel.DiffOut, problems=("not_found",), tags=("time travel",),
    ),
    Operation(
        "GET", "/approvals", "listApprovals", "List approvals (pending by default)",
        approvals.list_approvals, scope=auth.RUNS_READ, query=ListApprovalsQuery,
        response=ApprovalList,
        tags=("approvals",),
    ),
    Operation(
        "GET", "/approvals/{approval_id}", "getApproval", "Get an approval",
        approvals.get_approval,
        scope=auth.RUNS_READ, params=(_APPROVAL_ID,), response=ApprovalOut,
        problems=("not_found",), tags=("approvals",),
    ),
    Operation(
        "POST", "/approvals/{approval_id}/approve", "approve", "Approve a pending action",
        approvals.approve, scope=auth.APPROVALS_DECIDE, params=(_APPROVAL_ID,), body=ApproveBody,
        response=ApprovalOut,
        problems=(
            "not_found", "already_decided", "expired", "digest_mismatch",
            "field_not_modifiable", "invalid_edit", "acknowledgement_required",
            "client_executed", "separation_of_duties", "already_voted", "signature_required",
            "signature_refused",
        ),
        tags=("approvals",),
        description="`args_digest` must be the digest shown with the action: a decision binds "
        "to the exact arguments. The run resumes in the background.",
    ),
    Operation(
        "POST", "/approvals/{approval_id}/deny", "deny", "Deny a pending action",
        approvals.deny,
        scope=auth.APPROVALS_DECIDE, params=(_APPROVAL_ID,), body=DenyBody,
        response=ApprovalOut, problems=("not_found", "already_decided", "expired"),
        tags=("approvals",),
    ),
    Operation(
        "POST", "/approvals/{approval_id}/regenerate", "regenerate",
        "Make a pending action anew with fresh arguments (a new quote)",
        approvals.regenerate,
        scope=auth.APPROVALS_DECIDE, params=(_APPROVAL_ID,), body=RegenerateBody,
        response=ApprovalOut,
        problems=(
            "not_found", "already_decided", "expired", "digest_mismatch", "not_regenerable",
            "separation_of_duties",
        ),
        tags=("approvals",),
        description="For an action whose capability can make fresh arguments (`regenerable` "
        "on the card: a swap's stale quote). The approval ends `superseded` and can never be "
        "approved; the run resumes in the background and waits on a new approval with the "
        "fresh arguments, whose `regenerated_from` names this one.",
    ),
    Operation(
        "POST", "/approvals/{approval_id}/result", "submitResult",
        "Report the result of a client-executed action", approvals.submit_result,
        scope=auth.APPROVALS_DECIDE, params=(_APPROVAL_ID,), body=ResultBody,
        response=ApprovalOut,
        problems=(
            "not_found",
            "already_decided",
            "expired",
            "not_client_executed",
            "invalid_edit",
            "result_refused",
        ),
        tags=("approvals",),
    ),
    Operation(
        "GET", "/questions", "listQuestions", "List the questions the model asked (pending by "
        "default)", questions.list_questions, scope=auth.RUNS_READ,
        query=questions.ListQuestionsQuery, response=questions.QuestionList,
        tags=("questions",),
    ),
    Operation(
        "GET", "/questions/{question_id}", "getQuestion", "Get a question",
        questions.get_question, scope=auth.RUNS_READ, params=(_QUESTION_ID,),
        response=questions.QuestionOut, problems=("not_found",), tags=("questions",),
    ),
    Operation(
        "POST", "/questions/{question_id}/answer", "answerQuestion",
        "Answer a question the model asked", questions.answer_question,
        scope=auth.APPROVALS_DECIDE, params=(_QUESTION_ID,), body=questions.AnswerBody,
        response=questions.QuestionOut,
        problems=("not_found", "already_decided", "expired", "invalid_answer"),
        tags=("questions",),
        description="One answer only: a second is refused (409). The run resumes in the "
        "background with the answer as the result of the model's `ask_person` call.",
    ),
    Operation(
        "GET", "/audit", "listAudit", "Audit rows: every gate decision and outcome, newest first",
        records.list_audit, scope=auth.RUNS_READ, query=records.RecordsQuery,
        response=records.AuditList, problems=("insufficient_scope",), tags=("audit",),
        description="The caller's principal's rows (an admin key: everyone's, or one "
        "principal's with `principal`), filtered by run, capability and time "
        "(`since` included, `until` excluded). Inputs and outputs are redacted.",
    ),
    Operation(
        "GET", "/ledger", "listLedger", "Ledger rows: the writes executed at most once",
        records.list_ledger, scope=auth.RUNS_READ, query=records.RecordsQuery,
        response=records.LedgerList, problems=("insufficient_scope",), tags=("audit",),
        description="The idempotency ledger's rows of the caller's principal's runs (an admin "
        "key: everyone's), newest first by start time, with the same filters as `/audit`: "
        "`started` (its outcome may be unknown), `done` with its recorded result (redacted), "
        "or `failed`.",
    ),
    Operation(
        "GET", "/approvals/{approval_id}/signing-options", "signingOptions",
        "WebAuthn options to sign an approval with a passkey", passkeys.signing_options,
        scope=auth.APPROVALS_DECIDE, params=(_APPROVAL_ID,), response=passkeys.WebAuthnOptions,
        problems=("not_found", "not_available"), tags=("passkeys",),
        description="The challenge is the SHA-256 of the approval's binding (approval, run, "
        "arguments digest, tier, amount, currency, expiry): it signs this approval only. Under "
        "dual control, after an approver's edit, it binds the edited arguments shown.",
    ),
    Operation(
        "POST", "/approvals/{approval_id}/signing-options", "signingOptionsWithEdits",
        "WebAuthn options to sign an approval with edits", passkeys.signing_options_for,
        scope=auth.APPROVALS_DECIDE, params=(_APPROVAL_ID,), body=passkeys.SigningBody,
        response=passkeys.WebAuthnOptions, tags=("passkeys",),
        problems=(
            "not_found", "not_available", "field_not_modifiable", "invalid_edit",
            "digest_mismatch", "separation_of_duties",
        ),
        description="The challenge binds the edited arguments, re-checked and re-priced as "
        "approve will: the assertion approves those edits only.",
    ),
    Operation(
        "POST", "/passkeys/registration-options", "passkeyRegistrationOptions",
        "WebAuthn options to register a passkey", passkeys.registration_options,
        scope=auth.APPROVALS_DECIDE, response=passkeys.WebAuthnOptions,
        problems=("not_available",), tags=("passkeys",),
    ),
    Operation(
        "POST", "/passkeys", "registerPasskey", "Register a passkey", passkeys.register,
        scope=auth.APPROVALS_DECIDE, body=passkeys.RegisterBody, status=201,
        response=passkeys.PasskeyOut, problems=("not_available", "signature_refused"),
        tags=("passkeys",),
    ),
    Operation(
        "GET", "/passkeys", "listPasskeys", "The caller's passkeys", passkeys.list_passkeys,
        scope=auth.APPROVALS_DECIDE, response=passkeys.PasskeyList,
        problems=("not_available",), tags=("passkeys",),
    ),
    Operation(
        "DELETE", "/passkeys/{credential_id}", "revokePasskey", "Revoke a passkey",
        passkeys.revoke, scope=auth.APPROVALS_DECIDE,
        params=(Param("credential_id", "path", {"type": "string", "maxLength": 200}),),
        status=204, problems=("not_found", "not_available"), tags=("passkeys",),
    ),
    Operation(
        "GET", "/me", "whoAmI", "The principal and scopes of the key", account.who_am_i,
        response=WhoAmI, tags=("auth",),
    ),
    Operation(
        "GET", "/balances", "balances", "The principal's balances (when a wallet is loaded)",
        account.balances, scope=auth.RUNS_READ, response=BalancesOut, problems=("not_available",),
        tags=("wallet",),
    ),
    Operation(
        "POST", "/hooks/{channel}", "inboundHook", "An inbound message from a channel",
        account.hook, auth="signature",
        params=(
            Param("channel", "path", {"type": "string", "maxLength": 100}),
            Param("X-Fiduciary-Timestamp", "header", {"type": "string"}, required=True),
            Param("X-Fiduciary-Signature", "header", {"type": "string"}, required=True),
        ),
        body=HookBody, status=202, response=RunAccepted,
        problems=(
            "unknown_channel", "invalid_signature", "stale_signature", "replayed",
            "rate_limited", "not_found", "run_busy", "run_state",
        ),
        tags=("webhooks",),
        description="Signed with HMAC-SHA256 over `<timestamp>.<body>`; refused when the "
        "timestamp is more than 5 minutes away or the delivery was already received.",
    ),
    Operation(
        "GET", "/ai/status", "aiStatus", "The model providers and the default model",
        ai_routes.ai_status, scope=auth.RUNS_READ, response=AiStatus, tags=("ai",),
        description="Each provider: the model it would use, where its key is read from and "
        "whether one is set (never the key), whether it can run here, whether it is reachable "
        "when that is known without a request; the default model of new runs, and its latest "
        "changes (who, when, from, to).",
    ),
    Operation(
        "PUT", "/ai/default", "setDefaultModel", "Change the model of new runs (admin)",
        ai_routes.set_default, scope=auth.ADMIN, body=DefaultBody, response=AiStatus,
        problems=("insufficient_scope", "invalid_request", "not_available"), tags=("ai",),
        description="`model` left out: the provider's standard model. An unknown provider, or "
        "one whose extra or key is missing, is refused and nothing changes. Runs already "
        "started keep their model. The change is recorded (who, when, from, to) and, with "
        "keys in SQLite or PostgreSQL, survives a restart.",
    ),
)  # fmt: skip

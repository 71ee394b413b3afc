"""A run's typed answer (fiduciary.outputs), as the loop takes it from the model.

At the end of a model turn of a run with an output type, its ``final_result`` calls are
recorded — each ``tool_call_start`` with its ``tool_call_end``, in the turn's last emission, so
that no crash can leave one open — and checked: a valid one alone in its turn is the answer
(``Drive.answer``; the driver completes the run with it); any other gets the errors as its
result. A turn that ends with text and no call is checked as text; when the text is not an
answer, the turn records why (``turn_complete.output_error``) and the model is told. The
invalid answers since the user's message are counted by the fold; past ``output_retries`` the
run fails (``invalid_output``).
"""

from __future__ import annotations

from ..events import RunFailedDraft, ToolCallEndDraft
from ..gates import ParsedCall
from ..models.base import TextPart
from ..outputs import Invalid, OutputSpec, Valid
from .dispatch import start
from .state import Drive
from .transcript import INVALID_ANSWER

__all__ = ["close_answers", "over_retries", "wants"]

_RECORDED = "Your answer was recorded."


def wants(d: Drive, name: str) -> bool:
    """Whether a call is the run's ``final_result`` (the answer, not a capability)."""
    output = d.output
    return output is not None and output.tool is not None and name == output.tool.name


def close_answers(d: Drive, answers: list[ParsedCall], *, other_calls: bool) -> str | None:
    """Record and check the turn's ``final_result`` calls, or its text when it called nothing;
    the turn's ``output_error`` (None: there is none)."""
    output = d.output
    if output is None:
        return None
    if not answers:
        if other_calls:
            return None
        text = "".join(p.text for p in d.t.parts if isinstance(p, TextPart))
        checked = output.from_text(text)
        if isinstance(checked, Valid):
            d.answer = checked
            return None
        return checked.message
    alone = not other_calls and len(answers) == 1
    for call in answers:
        start(d, call)
        verdict = _check(output, call) if alone else OutputSpec.not_alone()
        if isinstance(verdict, Valid):
            d.answer = verdict
            d.emit(ToolCallEndDraft(tool_use_id=call.tool_use_id, name=call.name, output=_RECORDED))
        else:
            d.emit(
                ToolCallEndDraft(
                    tool_use_id=call.tool_use_id,
                    name=call.name,
                    output=d.rt.redactor.redact_text(verdict.message),
                    is_error=True,
                    error_code=INVALID_ANSWER,
                )
            )
    return None


def _check(output: OutputSpec[object], call: ParsedCall) -> Valid[object] | Invalid:
    return output.from_call(call.raw)


def over_retries(d: Drive) -> bool:
    """After a turn with no answer: fail the run if the model gave too many invalid ones."""
    output = d.output
    if output is None or d.t.invalid_outputs <= output.retries:
        return False
    message = f"the model gave no valid {output.name} answer after {d.t.invalid_outputs} attempts"
    d.emit(RunFailedDraft(reason="invalid_output", message=message), status="failed")
    return True

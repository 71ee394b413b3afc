"""The providers' one error skeleton (``models/_errors.py``): each SDK's error classes become the
same ``ModelError`` (code, retryable, status, retry-after, message) whichever provider raised
them, and what is not the SDK's passes through as it was (a cut connection, a garbled stream)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import anthropic
import httpx2
import openai
import pytest
from google.genai import errors as genai_errors

from fiduciary.exceptions import ModelError
from fiduciary.models._errors import mapped_errors
from fiduciary.models.anthropic import AnthropicModel
from fiduciary.models.gemini import GeminiModel
from fiduciary.models.openai import OpenAIModel

_REQUEST = httpx2.Request("POST", "https://api.example.test/v1/x")
_KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"


def _response(status: int, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.Response(status, headers=headers or {}, request=_REQUEST)


def _openai_status(status: int, body: object, headers: dict[str, str] | None = None) -> Exception:
    return openai.APIStatusError("error", response=_response(status, headers), body=body)


def _anthropic_status(
    status: int, body: object, headers: dict[str, str] | None = None
) -> Exception:
    return anthropic.APIStatusError("error", response=_response(status, headers), body=body)


def _google(status: int, google_status: str, message: str, *details: object) -> Exception:
    body = {"error": {"code": status, "message": message, "status": google_status}}
    if details:
        body["error"]["details"] = list(details)
    cls = genai_errors.ServerError if status >= 500 else genai_errors.ClientError
    return cls(status, body)


@dataclass(frozen=True)
class Case:
    exc: Callable[[], Exception]
    code: str
    retryable: bool
    status: int | None
    message: str
    retry_after: float | None = None


_OPENAI = "openai:gpt-5.1"
_ANTHROPIC = "anthropic:claude-sonnet-4-6"
_GEMINI = "gemini:gemini-2.5-flash"

OPENAI_CASES = {
    "rate limit, retry-after": Case(
        lambda: _openai_status(
            429,
            {"error": {"code": "rate_limit_exceeded", "message": "Slow down."}},
            {"retry-after": "2"},
        ),
        "rate_limited",
        True,
        429,
        f"{_OPENAI}: 429 rate_limit_exceeded Slow down.",
        2.0,
    ),
    "quota": Case(
        lambda: _openai_status(
            429, {"error": {"type": "insufficient_quota", "message": "No credit."}}
        ),
        "quota",
        False,
        429,
        f"{_OPENAI}: 429 insufficient_quota No credit.",
    ),
    "server error without a body": Case(
        lambda: _openai_status(500, None), "server_error", True, 500, f"{_OPENAI}: 500"
    ),
    "a key in a bad request is scrubbed": Case(
        lambda: _openai_status(
            400, {"error": {"type": "invalid_request_error", "message": f"bad {_KEY}"}}
        ),
        "bad_request",
        False,
        400,
        f"{_OPENAI}: 400 invalid_request_error bad [REDACTED]",
    ),
    "refused key": Case(
        lambda: _openai_status(
            401,
            {"error": {"code": "invalid_api_key", "message": f"Incorrect API key {_KEY}"}},
        ),
        "auth",
        False,
        401,
        f"{_OPENAI}: the API key was refused; check OPENAI_API_KEY "
        "(401 invalid_api_key Incorrect API key [REDACTED])",
    ),
    "connection": Case(
        lambda: openai.APIConnectionError(request=_REQUEST),
        "connection",
        True,
        None,
        f"{_OPENAI}: the connection failed (APIConnectionError)",
    ),
    "timeout": Case(
        lambda: openai.APITimeoutError(request=_REQUEST),
        "timeout",
        True,
        None,
        f"{_OPENAI}: the connection failed (APITimeoutError)",
    ),
    "an error inside the stream": Case(
        lambda: openai.APIError(
            "The server had an error.", _REQUEST, body={"type": "server_error"}
        ),
        "server_error",
        True,
        None,
        f"{_OPENAI}: The server had an error.",
    ),
    "any other SDK error": Case(
        lambda: openai.OpenAIError("odd"), "error", False, None, f"{_OPENAI}: OpenAIError"
    ),
}

ANTHROPIC_CASES = {
    "overloaded, retry-after": Case(
        lambda: _anthropic_status(
            529,
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            {"retry-after": "3"},
        ),
        "overloaded",
        True,
        529,
        f"{_ANTHROPIC}: 529 overloaded_error Overloaded",
        3.0,
    ),
    "refused key": Case(
        lambda: _anthropic_status(
            401,
            {"type": "error", "error": {"type": "authentication_error", "message": "x-api-key"}},
        ),
        "auth",
        False,
        401,
        f"{_ANTHROPIC}: the API key was refused; check ANTHROPIC_API_KEY "
        "(401 authentication_error x-api-key)",
    ),
    "forbidden": Case(
        lambda: _anthropic_status(
            403, {"type": "error", "error": {"type": "permission_error", "message": "No."}}
        ),
        "auth",
        False,
        403,
        f"{_ANTHROPIC}: the API key is not allowed this request; check ANTHROPIC_API_KEY "
        "(403 permission_error No.)",
    ),
    "an error event mid-stream": Case(
        lambda: _anthropic_status(
            200, {"type": "error", "error": {"type": "api_error", "message": "Internal"}}
        ),
        "server_error",
        True,
        None,
        f"{_ANTHROPIC}: api_error Internal",
    ),
    "a bare status": Case(
        lambda: _anthropic_status(404, None),
        "not_found",
        False,
        404,
        f"{_ANTHROPIC}: 404",
    ),
    "connection": Case(
        lambda: anthropic.APIConnectionError(request=_REQUEST),
        "connection",
        True,
        None,
        f"{_ANTHROPIC}: the connection failed (APIConnectionError)",
    ),
    "an error inside the stream": Case(
        lambda: anthropic.APIError(
            "x", _REQUEST, body={"error": {"type": "rate_limit_error", "message": "Wait."}}
        ),
        "rate_limited",
        True,
        None,
        f"{_ANTHROPIC}: Wait.",
    ),
    "any other SDK error": Case(
        lambda: anthropic.AnthropicError("odd"),
        "error",
        False,
        None,
        f"{_ANTHROPIC}: AnthropicError",
    ),
}

GEMINI_CASES = {
    "rate limit, retry delay": Case(
        lambda: _google(
            429,
            "RESOURCE_EXHAUSTED",
            "Quota exceeded.",
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"},
        ),
        "rate_limited",
        True,
        429,
        f"{_GEMINI}: 429 RESOURCE_EXHAUSTED Quota exceeded.",
        7.0,
    ),
    "a bad key answered with 400": Case(
        lambda: _google(
            400,
            "INVALID_ARGUMENT",
            "API key not valid.",
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"},
        ),
        "auth",
        False,
        400,
        f"{_GEMINI}: the API key was refused; check GEMINI_API_KEY or GOOGLE_API_KEY "
        "(400 INVALID_ARGUMENT API key not valid.)",
    ),
    "unavailable": Case(
        lambda: _google(503, "UNAVAILABLE", "Try later."),
        "overloaded",
        True,
        503,
        f"{_GEMINI}: 503 UNAVAILABLE Try later.",
    ),
    "internal": Case(
        lambda: _google(500, "INTERNAL", "Oops."),
        "server_error",
        True,
        500,
        f"{_GEMINI}: 500 INTERNAL Oops.",
    ),
    "not found": Case(
        lambda: _google(404, "NOT_FOUND", "No such model."),
        "not_found",
        False,
        404,
        f"{_GEMINI}: 404 NOT_FOUND No such model.",
    ),
    "bad request": Case(
        lambda: _google(400, "FAILED_PRECONDITION", "Not here."),
        "bad_request",
        False,
        400,
        f"{_GEMINI}: 400 FAILED_PRECONDITION Not here.",
    ),
}


def _openai() -> OpenAIModel:
    return OpenAIModel("gpt-5.1")


def _anthropic() -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-6")


def _gemini() -> GeminiModel:
    return GeminiModel("gemini-2.5-flash")


def _raised(model: OpenAIModel | AnthropicModel | GeminiModel, exc: Exception) -> ModelError:
    """What the provider's error skeleton makes of ``exc``."""
    with pytest.raises(ModelError) as caught, model._errors():
        raise exc
    assert caught.value.__cause__ is exc
    return caught.value


def _check(error: ModelError, case: Case) -> None:
    assert (error.code, error.retryable, error.status, error.retry_after) == (
        case.code,
        case.retryable,
        case.status,
        case.retry_after,
    )
    assert error.message == case.message
    assert _KEY not in str(error)


@pytest.mark.parametrize("case", OPENAI_CASES.values(), ids=OPENAI_CASES.keys())
def test_openai_sdk_errors(case: Case) -> None:
    _check(_raised(_openai(), case.exc()), case)


@pytest.mark.parametrize("case", ANTHROPIC_CASES.values(), ids=ANTHROPIC_CASES.keys())
def test_anthropic_sdk_errors(case: Case) -> None:
    _check(_raised(_anthropic(), case.exc()), case)


@pytest.mark.parametrize("case", GEMINI_CASES.values(), ids=GEMINI_CASES.keys())
def test_gemini_sdk_errors(case: Case) -> None:
    _check(_raised(_gemini(), case.exc()), case)


@pytest.mark.parametrize("make", [_openai, _anthropic, _gemini])
def test_a_cut_connection_is_a_retryable_connection_error(
    make: Callable[[], OpenAIModel | AnthropicModel | GeminiModel],
) -> None:
    model = make()
    error = _raised(model, httpx2.RemoteProtocolError("peer closed connection"))
    assert (error.code, error.retryable) == ("connection", True)
    assert error.message == f"{model.name}: the connection failed (RemoteProtocolError)"


@pytest.mark.parametrize("make", [_openai, _anthropic, _gemini])
def test_a_garbled_stream_is_retryable_invalid_output(
    make: Callable[[], OpenAIModel | AnthropicModel | GeminiModel],
) -> None:
    model = make()
    with pytest.raises(ModelError) as caught, model._errors(stream=True):
        json.loads("{not json")
    assert (caught.value.code, caught.value.retryable) == ("invalid_output", True)
    assert caught.value.message == f"{model.name}: the stream carried malformed JSON"


@pytest.mark.parametrize("make", [_openai, _anthropic, _gemini])
def test_outside_a_stream_bad_json_and_other_errors_pass_through(
    make: Callable[[], OpenAIModel | AnthropicModel | GeminiModel],
) -> None:
    model = make()
    with pytest.raises(json.JSONDecodeError), model._errors():
        json.loads("{not json")
    with pytest.raises(KeyError), model._errors(stream=True):
        raise KeyError("a bug of ours is not the provider's error")


def test_the_skeleton_maps_only_the_sdk_it_is_given() -> None:
    # an OpenAI error raised where the Anthropic SDK is called is not translated as Anthropic's
    odd = openai.OpenAIError("odd")
    with (
        pytest.raises(openai.OpenAIError),
        mapped_errors("anthropic:x", anthropic.AnthropicError, _anthropic()._error),
    ):
        raise odd

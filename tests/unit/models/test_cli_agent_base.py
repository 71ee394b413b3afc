"""The CLI agents' one base (``models/_cli_agent.py``): both models take the same settings and
keep their own defaults; a missing binary is ``unavailable`` for either."""

from __future__ import annotations

import pytest

from fiduciary.exceptions import ModelError
from fiduciary.models.base import ModelRequest, UserTextMessage
from fiduciary.models.cli_agents import ClaudeCLIModel
from fiduciary.models.codex_cli import CodexCLIModel
from fiduciary.models.retry import RetryPolicy


def test_each_cli_agent_keeps_its_defaults() -> None:
    claude, codex = ClaudeCLIModel(), CodexCLIModel()
    assert (claude.name, claude._executable) == ("claude-cli:sonnet", "claude")
    assert (codex.name, codex._executable) == ("codex-cli:gpt-5.3-codex", "codex")
    assert claude._retry == codex._retry == RetryPolicy(max_attempts=2)


@pytest.mark.parametrize("cls", [ClaudeCLIModel, CodexCLIModel])
def test_both_take_the_same_settings(cls: type[ClaudeCLIModel] | type[CodexCLIModel]) -> None:
    retry = RetryPolicy(max_attempts=1)
    model = cls(
        "m", executable="/opt/x", extra_args=["--a"], timeout=5.0, env={"A": "1"}, retry=retry
    )
    assert model.name == f"{cls.provider}:m"
    assert (model._executable, model._extra, model._timeout, model._env, model._retry) == (
        "/opt/x",
        ["--a"],
        5.0,
        {"A": "1"},
        retry,
    )


@pytest.mark.parametrize("cls", [ClaudeCLIModel, CodexCLIModel])
async def test_a_missing_binary_is_unavailable(
    cls: type[ClaudeCLIModel] | type[CodexCLIModel],
) -> None:
    model = cls(executable="fiduciary-no-such-cli", retry=RetryPolicy(max_attempts=1))
    request = ModelRequest(system=(), messages=(UserTextMessage("hi"),), tools=(), settings={})
    with pytest.raises(ModelError) as caught:
        async for _ in model.stream(request):
            pass
    assert caught.value.code == "unavailable"
    assert caught.value.message == (
        f"{model.name}: the 'fiduciary-no-such-cli' command was not found on PATH"
    )

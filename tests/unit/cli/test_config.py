"""A malformed ``serve --config`` file is told in plain words: each field and what it expects."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fiduciary.cli._common import plain_errors

from .support import fiduciary

BAD = """\
rate_limit = 5
colour = "blue"
[[notify]]
url = 7
events = ["everything"]
[webhooks]
max_attempts = 100
[[channels]]
principal = "x"
"""


@pytest.mark.timeout(120)
def test_serve_names_each_bad_field_and_what_it_expects(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text(BAD, encoding="utf-8")
    result = fiduciary("serve", "--db", tmp_path / "x.sqlite3", "--config", config, columns=400)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"error: {config}: rate_limit expected text, got 5; channels[0].name is required; "
        "notify[0].url expected text, got 7; notify[0].events[0] expected one of "
        "'pending_action', 'run_completed' or 'run_failed', got \"everything\"; "
        "webhooks.max_attempts must be at most 20, got 100; colour is not a setting (check its "
        "spelling)\n"
    )
    assert "pydantic" not in result.stderr


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(gt=0)
    name: str = Field(min_length=2)
    flags: list[bool] = Field(default_factory=list)


def test_plain_errors_cover_bounds_lengths_and_types() -> None:
    with pytest.raises(ValidationError) as caught:
        _Settings.model_validate({"seconds": -1, "name": "x", "flags": ["maybe"]})
    assert plain_errors(caught.value) == (
        "seconds must be greater than 0.0, got -1; name must have at least 2 (characters or "
        'items); flags[0] expected true or false, got "maybe"'
    )

"""attention.toml: a route's autonomous budget, read and checked."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from fiduciary import ConfigurationError
from fiduciary.attention.config import load_config

BASE = """model = "scripted"
agent = "x:y"

[routes.act]
do = "run"
"""


def config(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "attention.toml"
    path.write_text(BASE + extra, encoding="utf-8")
    return path


def test_a_route_has_no_budget_unless_it_says_so(tmp_path: Path) -> None:
    act = load_config(config(tmp_path, "")).routes["act"]
    assert act.origin("act").budget == {}


def test_a_budget_is_read_as_decimal_amounts(tmp_path: Path) -> None:
    act = load_config(config(tmp_path, 'autonomous = { save = "20", repay = 5 }\n')).routes["act"]
    assert act.origin("act").source == "attention:act"
    assert act.origin("act").budget == {"save": Decimal("20"), "repay": Decimal("5")}


@pytest.mark.parametrize("value", ["20.5", '"-1"', '"lots"', "true", '["save"]'])
def test_a_budget_that_is_not_an_amount_is_refused(tmp_path: Path, value: str) -> None:
    table = (
        f"autonomous = {value}\n"
        if value.startswith("[")
        else f"autonomous = {{ save = {value} }}\n"
    )
    with pytest.raises(ConfigurationError, match=r"routes\.act\.autonomous"):
        load_config(config(tmp_path, table))

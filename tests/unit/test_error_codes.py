"""Capability error codes are a closed set: one declaration (``ErrorCode``), refused at run time
outside it, reported to the model as the handler's bug, listed for HTTP clients and in the docs."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, get_args

import pytest

from fiduciary import CapabilityError, ConfigurationError, ManualClock, Policy, capability
from fiduciary.events import ToolCallEnd
from fiduciary.exceptions import ERROR_CODES, ErrorCode, is_error_code
from fiduciary.models.scripted import Call, Reply, Script, ScriptedModel, ToolCalls
from fiduciary.server.openapi import build_openapi
from fiduciary.server.problems import from_core_error
from fiduciary.testing import MemoryStore, allow_all, collect
from fiduciary.wallet import WalletError

ROOT = Path(__file__).resolve().parents[2]
SEED_FIVE = ("precondition", "not_found", "conflict", "unauthorized", "budget")


def test_the_seed_codes_are_in_the_one_declaration() -> None:
    assert set(SEED_FIVE) <= ERROR_CODES
    assert frozenset(get_args(ErrorCode)) == ERROR_CODES
    assert is_error_code("conflict")
    assert not is_error_code("made_up")
    assert not is_error_code(None)


@pytest.mark.parametrize("error", [CapabilityError, WalletError])
def test_an_unknown_code_is_refused_at_run_time(error: type[CapabilityError]) -> None:
    made_up: Any = "made_up"  # (mypy refuses the literal itself: ErrorCode is a Literal)
    with pytest.raises(ConfigurationError, match="not a capability error code"):
        error(made_up, "nope")
    assert error("not_found", "no such order").code == "not_found"


def _codes_raised(path: Path) -> set[str]:
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            first = node.args[0]
            if name in {"CapabilityError", "WalletError", "ChainError"} and isinstance(
                first, ast.Constant
            ):
                found.add(str(first.value))
    return found


def test_every_code_the_code_raises_is_declared_and_documented() -> None:
    raised: set[str] = set()
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "examples").rglob("*.py")]:
        raised |= _codes_raised(path)
    assert raised, "the scan found no raise at all"
    assert raised <= ERROR_CODES, raised - ERROR_CODES
    documented = set(re.findall(r"`([a-z_]+)`", (ROOT / "docs/capabilities.md").read_text()))
    assert documented >= ERROR_CODES, ERROR_CODES - documented


async def test_an_unknown_code_in_a_handler_is_its_bug_not_a_refusal(clock: ManualClock) -> None:
    from fiduciary import Agent

    @capability(kind="read")
    def lookup(order: str) -> str:
        """Look an order up."""
        code: Any = "no_such_order"
        raise CapabilityError(code, f"there is no order {order}")

    script = Script(
        match="order",
        steps=[ToolCalls([Call("lookup", {"order": "A1"})]), Reply("done")],
    )
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[lookup],
        store=MemoryStore(),
        policy=Policy(preset="balanced"),
        authorize=allow_all,
        clock=clock,
    )
    events = await collect(agent.run("find my order", principal="ann"))
    [end] = [e for e in events if isinstance(e, ToolCallEnd)]
    assert end.is_error
    assert end.error_code == "handler_error"  # not "no_such_order": that code does not exist


def test_http_clients_read_the_codes() -> None:
    problem = from_core_error(CapabilityError("conflict", "already paid"))
    assert (problem.code, problem.status) == ("capability_refused", 422)
    assert problem.extra == {"error_code": "conflict"}
    document = build_openapi([], title="t", version="1")
    schema = document["components"]["schemas"]["CapabilityErrorCode"]
    assert set(schema["enum"]) == ERROR_CODES


@pytest.mark.slow
def test_an_unknown_code_is_a_type_error(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    snippet = tmp_path / "handler.py"
    snippet.write_text(
        "from fiduciary.exceptions import CapabilityError\n"
        'CapabilityError("made_up", "no such order")\n'
        'CapabilityError("not_found", "no such order")\n',
        encoding="utf-8",
    )
    out, _, status = api.run(
        ["--strict", "--no-incremental", "--follow-imports=silent", str(snippet)]
    )
    assert status == 1, out
    assert "handler.py:2: error: Argument 1" in out
    assert "'made_up'" in out
    assert "handler.py:3:" not in out

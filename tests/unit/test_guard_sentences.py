"""A guard speaks to the model and to the person, each in their own words: every shipped verdict
carries a sentence for the person beside the model's, and a card shows the person's."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

from fiduciary import Principal, capability
from fiduciary.capabilities import args_digest
from fiduciary.events import GuardNote
from fiduciary.guards import (
    CallRecord,
    GuardCall,
    IrreversibilityGuard,
    RetryProtectionGuard,
    RunHistory,
    Verdict,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "fiduciary"
SPEAKING = {"hint", "warn", "block", "confirm"}


def _verdicts(tree: ast.AST) -> list[ast.Call]:
    """Every ``Verdict.hint / warn / block / confirm(...)`` call."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in SPEAKING
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "Verdict"
    ]


def test_every_shipped_verdict_has_a_sentence_for_the_person() -> None:
    found: list[str] = []
    missing: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        for call in _verdicts(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(SRC)}:{call.lineno}"
            found.append(where)
            person = [k.value for k in call.keywords if k.arg == "for_person"]
            if not person or not call.args:
                missing.append(where)
            elif ast.unparse(person[0]) == ast.unparse(call.args[0]):
                missing.append(f"{where} (the model's sentence again)")
    assert missing == []
    # the core's two guards and the wallet's twelve, some with several verdicts
    assert len(found) >= 20, found
    assert any(f.startswith("guards.py") for f in found)
    assert any(f.startswith("wallet/guards.py") for f in found)


def _call(flags: set[str], history: RunHistory) -> GuardCall:
    @capability(kind="execute", flags=flags)
    async def wire(to: str) -> dict[str, str]:
        """Wire money."""
        return {"to": to}

    args = {"to": "bob"}
    return GuardCall(
        capability=wire,
        args=args,
        args_digest=args_digest(args),
        tool_use_id="t2",
        run_id=uuid4(),
        principal=Principal("ann"),
        history=history,
        now=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_the_default_guards_write_for_the_person() -> None:
    history = RunHistory()
    history.add_user_message("wire bob")
    hint = IrreversibilityGuard().check(_call({"irreversible"}, history))
    assert hint.kind == "hint"
    assert "state exactly what will happen" in hint.message  # for the model
    assert hint.for_person == (
        "wire cannot be undone, and no preview was shown first: check every detail below "
        "before you approve."
    )
    assert hint.shown == hint.for_person

    done = {"to": "bob"}
    history.calls.append(
        CallRecord("t1", "wire", "execute", done, args_digest(done), datetime.now(UTC), ok=True)
    )
    block = RetryProtectionGuard().check(_call({"irreversible"}, history))
    assert block.kind == "block"
    assert block.for_person == (
        "This exact wire already went through in this conversation, so it was not run a "
        "second time."
    )
    assert block.for_person != block.message


def test_a_guard_that_wrote_nothing_for_the_person_shows_its_message() -> None:
    assert Verdict.hint("call balance_check first").shown == "call balance_check first"
    old = GuardNote(guard="custom", verdict="warn", message="tell the person")  # an older log
    assert old.for_person == ""
    assert old.shown == "tell the person"

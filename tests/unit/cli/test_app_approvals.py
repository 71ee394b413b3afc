"""An app's approval is decided by the same ``fiduciary approvals approve | deny`` as any other,
with its amount shown; the apps engine then continues what waited on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .support import fiduciary

pytestmark = pytest.mark.timeout(240)


def approvals(db: Path) -> list[dict[str, Any]]:
    listed = fiduciary("approvals", "list", "--all", "--json", "--db", db)
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()]


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_one_command_decides_an_apps_batch_and_shows_its_amount(
    tmp_path: Path, decision: str
) -> None:
    db = tmp_path / "apps.sqlite3"
    assert fiduciary("apps", "enable", "dca", "--db", db).returncode == 0
    ticked = fiduciary("apps", "tick", "dca", "--db", db)
    assert ticked.stdout.rstrip().endswith("waiting"), ticked.stdout
    (pending,) = approvals(db)
    assert pending["capability"] == "app_approve_intents"
    assert pending["amount_usd"] == "10.00"  # the batch's one purchase: 10 USDC of SUI
    listed = " ".join(fiduciary("approvals", "list", "--db", db, columns=200).stdout.split())
    assert "$10.00" in listed
    assert "unknown" not in listed

    decided = fiduciary(
        "approvals", decision, pending["approval_id"][:8], "--by", "demo-user", "--db", db
    )

    assert decided.returncode == 0, decided.stderr
    said = " ".join(decided.stdout.split())
    verb = "approved" if decision == "approve" else "denied"
    assert said.startswith(f"{verb} {pending['approval_id'][:8]}: app_approve_intents"), said
    assert "· $10.00 ·" in said
    (after,) = approvals(db)
    assert after["status"] == verb
    logs = fiduciary("apps", "logs", "dca", "--db", db).stdout
    assert ("intent_executed" in logs) == (decision == "approve"), logs  # continued at once
    assert "app dca " in said
    assert "runs resume" not in said  # the engine continues an app's run, not `runs resume`

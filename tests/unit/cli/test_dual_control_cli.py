"""``fiduciary approvals approve`` under dual control, in a real process: a member's vote says
where the set stands; the proposer is refused with the reason, exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from fiduciary.events import PendingAction
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import collect

from ..dual_control_voter import factory
from .support import fiduciary

pytestmark = pytest.mark.timeout(120)

AGENT = "tests.unit.dual_control_voter:factory"
ROOT = Path(__file__).resolve().parents[3]  # where ``tests`` is importable from


async def test_a_vote_shows_the_progress_and_the_proposer_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    store = SQLiteStore(db)
    try:
        events = await collect(factory(store).run("send 150", principal="alice"))
    finally:
        await store.close()
    pending = next(e for e in events if isinstance(e, PendingAction))
    ref = str(pending.approval_id)

    own = fiduciary(
        "approvals", "approve", ref, "--by", "alice", "--agent", AGENT, "--db", db, cwd=ROOT
    )
    assert own.returncode == 1, own.stderr
    assert "the proposer of an action cannot approve it" in " ".join(own.stderr.split())
    assert "(separation_of_duties)" in own.stderr

    vote = fiduciary(
        "approvals", "approve", ref, "--by", "bob", "--agent", AGENT, "--db", db, cwd=ROOT
    )
    assert vote.returncode == 0, vote.stderr
    shown = " ".join(vote.stdout.split())
    assert "approval recorded (1 of 2 approved (bob, " in shown
    assert "resume the run" not in shown

"""``fiduciary demo --reset`` never deletes a database a live ``fiduciary serve`` holds (it says
which process), keeps the API keys unless ``--reset-keys``, and says so in its help."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.waiting import wait_for

from .support import argv, environment, fiduciary

pytestmark = pytest.mark.timeout(240)


def run_ids(db: Path) -> list[str]:
    connection = sqlite3.connect(db)
    try:
        return [run_id for (run_id,) in connection.execute("SELECT run_id FROM runs")]
    finally:
        connection.close()


def key_ids(db: Path) -> list[str]:
    listed = fiduciary("keys", "list", "--db", db, columns=200).stdout
    return re.findall(r"\b[0-9a-f]{16}\b", listed)


def test_reset_refuses_a_served_database_and_keeps_the_keys(tmp_path: Path) -> None:
    db = tmp_path / "demo.sqlite3"
    assert fiduciary("demo", "--yes", "--db", db).returncode == 0
    key = fiduciary("keys", "create", "--principal", "demo-user", "--db", db).stdout.strip()
    (key_id,) = key_ids(db)
    served = subprocess.Popen(
        argv("serve", "--db", db, "--port", "0"),
        env=environment(200),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert served.stderr is not None
        said = ""
        for line in served.stderr:  # said once it accepts connections
            said += line
            if "console and API at" in line:
                break
        found = re.search(r"at (http://127\.0\.0\.1:\d+/)", said)
        assert found, said

        refused = fiduciary("demo", "--reset", "--yes", "--db", db)

        assert refused.returncode == 2
        assert refused.stderr == (
            f"error: cannot reset: {db} is open in another process (pid {served.pid}: "
            "fiduciary serve); stop it first (nothing was deleted)\n"
        )
        before = run_ids(db)
        created = httpx.post(
            found[1] + "runs",
            json={"message": "What is my balance?"},
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert created.status_code == 202, created.text
        run_id = created.json()["run_id"]
    finally:
        served.send_signal(signal.SIGINT)
        served.communicate(timeout=60)
    assert set(run_ids(db)) == {*before, run_id}  # the run made meanwhile is kept

    reset = fiduciary("demo", "--reset", "--yes", "--db", db, columns=200)

    assert reset.returncode == 0, reset.stderr
    shown = " ".join(reset.stdout.split())
    assert f"Deleted {db} (its 1 API key kept: --reset-keys deletes them): a fresh start." in shown
    assert key_ids(db) == [key_id]
    assert len(run_ids(db)) == 1  # this demo's run only
    again = fiduciary("demo", "--reset", "--reset-keys", "--yes", "--db", db, columns=200)
    assert again.returncode == 0, again.stderr
    assert f"Deleted {db}: a fresh start." in " ".join(again.stdout.split())
    assert key_ids(db) == []


def test_reset_refuses_a_database_an_mcp_client_holds(tmp_path: Path) -> None:
    """``fiduciary mcp --db`` (a desktop app's server) holds the file while its client is on."""
    db = tmp_path / "demo.sqlite3"
    served = subprocess.Popen(
        argv(
            "mcp", "--agent", "fiduciary.server.served:wallet_agent",
            "--principal", "demo-user", "--db", db,
        ),
        env=environment(200),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    lock = db.with_name(db.name + ".lock")
    try:
        wait_for(
            lambda: (
                f"{served.pid} fiduciary mcp" in (lock.read_text() if lock.exists() else "")
                or served.poll() is not None
            ),
            what="fiduciary mcp to hold the file",
            timeout=60,
        )
        assert served.poll() is None, served.communicate()[1]

        refused = fiduciary("demo", "--reset", "--yes", "--db", db)

        assert refused.returncode == 2
        assert f"(pid {served.pid}: fiduciary mcp)" in refused.stderr
    finally:
        served.communicate("", timeout=60)  # the client goes away: the server ends
    assert fiduciary("demo", "--reset", "--yes", "--db", db).returncode == 0


def test_the_help_lists_what_reset_deletes_and_keeps() -> None:
    shown = " ".join(fiduciary("demo", "--help", columns=200).stdout.replace("│", " ").split())
    for said in (
        "runs and their events, approvals, the audit and the idempotency ledger, memory",
        "the paper wallet's books",
        "Its API keys are kept.",
        "Refused while another process (fiduciary serve, chat, demo, mcp) has the file open.",
        "--reset-keys",
        "With --reset: delete the API keys too.",
    ):
        assert said in shown, said


def test_a_file_whose_keys_cannot_be_read_is_kept_unless_the_keys_go_too(tmp_path: Path) -> None:
    db = tmp_path / "demo.sqlite3"
    db.write_bytes(b"not a database, but someone's file" * 200)

    kept = fiduciary("demo", "--reset", "--yes", "--db", db)

    assert kept.returncode == 2
    assert kept.stderr.startswith(f"error: cannot read the API keys kept in {db} (")
    assert db.read_bytes().startswith(b"not a database")
    gone = fiduciary("demo", "--reset", "--reset-keys", "--yes", "--db", db)
    assert gone.returncode == 0, gone.stderr

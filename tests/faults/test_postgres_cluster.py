"""Three workers and two server instances on one PostgreSQL; one worker SIGKILLed mid-run and
another frozen (SIGSTOP) until its leases are taken over, then revived (SIGCONT).

The processes are the real commands: ``fiduciary serve --postgres --no-drive`` twice (A and B)
and ``fiduciary worker`` three times, with one API key made by ``fiduciary keys create``. A
client starts every run through A's HTTP API and follows it over SSE on A (every fifth run it
hangs up at the first tool call and resumes on B with ``Last-Event-ID``); a person approves
every payment through B's API as it appears. For every run: it completes; its log is gapless and
is exactly what the client received, in order, once; its payment is made at most once (one
handler entry, one effect), and a payment that was not made is one the model was told has an
unknown outcome. The frozen worker's appends after its revival are refused (stale epoch).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.postgres_support import create_database, require_driver

require_driver()
import psycopg  # noqa: E402

from fiduciary.events import TextDelta, ToolCallEnd, decode_event  # noqa: E402
from fiduciary.exceptions import StaleEpochError  # noqa: E402
from fiduciary.stores.postgres import PostgresStore  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

from .cluster import EFFECTS_DDL, PRINCIPAL, SWITCH_EVERY  # noqa: E402

RUNS = 200
# a hang, not slowness, fails the test: no run completed for this long (a busy machine makes the
# whole scenario take minutes); the test's own timeout is only a backstop
STALL_SECONDS = 120.0

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(1800)]
ROOT = Path(__file__).resolve().parents[2]


AGENT = "tests.faults.cluster:cluster_agent"


def spawn(*args: str, files: Path, name: str, dsn: str = "") -> subprocess.Popen[bytes]:
    """``fiduciary ARGS`` (or, for ``client`` and ``approve``, this test's HTTP clients)."""
    module = "tests.faults.cluster" if args[0] in ("client", "approve") else "fiduciary"
    env = {
        **os.environ,
        "FIDUCIARY_CLUSTER_DIR": str(files),
        "FIDUCIARY_CLUSTER_NAME": name,
        "FIDUCIARY_POSTGRES": dsn,
        "PYTHONPATH": str(ROOT),
    }
    with (files / f"{name}.stderr").open("wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def wait_while_progressing(
    process: subprocess.Popen[bytes], progress: Callable[[], int], stall_seconds: float
) -> int:
    """Wait for ``process`` to exit while ``progress()`` keeps growing; raise
    ``subprocess.TimeoutExpired`` once it has not grown for ``stall_seconds``."""
    last, since = progress(), time.monotonic()
    while True:
        try:
            return process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            now = progress()
            if now > last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > stall_seconds:
                raise


async def assert_fenced(dsn: str, held: list[tuple[Any, ...]]) -> None:
    """An append with the epoch the frozen worker held is refused, whatever it appends."""
    store = await PostgresStore.open(dsn)
    try:
        for run_id, epoch in held:
            run = await store.get_run(run_id)
            assert run is not None
            assert run.epoch > epoch
            late = TextDelta(run_id=run_id, seq=run.last_seq + 1, at=datetime.now(UTC), text="x")
            with pytest.raises(StaleEpochError):
                await store.commit(run_id, epoch=epoch, events=[late])
    finally:
        await store.close()


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_three_workers_two_servers_a_kill_and_a_freeze(tmp_path: Path) -> None:
    dsn = create_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(EFFECTS_DDL)

    def query(sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return conn.execute(sql.encode(), params).fetchall()

    def leases_of(owner: str) -> int:
        return int(query("SELECT count(*) FROM runs WHERE lease_owner = %s", owner)[0][0])

    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "fiduciary",
            "keys",
            "create",
            "--postgres",
            dsn,
            "--principal",
            PRINCIPAL,
            "--label",
            "cluster test",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    key = made.stdout.strip().splitlines()[0]
    urls = {name: f"http://127.0.0.1:{free_port()}" for name in ("server-a", "server-b")}
    servers = {
        name: spawn(
            "serve",
            "--no-drive",
            "--agent",
            AGENT,
            "--port",
            url.rsplit(":", 1)[1],
            "--rate-limit",
            f"{RUNS * 2}/60",
            files=tmp_path,
            name=name,
            dsn=dsn,
        )
        for name, url in urls.items()
    }
    workers = {
        n: spawn(
            "worker",
            "--agent",
            AGENT,
            "--concurrency",
            "16",
            "--poll-interval",
            "0.5",
            "--drain-seconds",
            "5",
            files=tmp_path,
            name=n,
            dsn=dsn,
        )
        for n in "123"
    }
    processes = [*servers.values(), *workers.values()]
    try:
        for name, url in urls.items():
            wait_for(partial(healthy, url), what=f"{name} to listen", timeout=60.0)
        approver = spawn("approve", urls["server-b"], key, files=tmp_path, name="approver")
        submitter = spawn(
            "client",
            urls["server-a"],
            urls["server-b"],
            key,
            str(tmp_path),
            str(RUNS),
            files=tmp_path,
            name="client",
        )
        processes += [approver, submitter]
        for n in workers:
            owner_file = tmp_path / f"owner-{n}"
            wait_for(owner_file.exists, what=f"worker {n} to start", timeout=60.0)
        owner = {n: (tmp_path / f"owner-{n}").read_text() for n in workers}

        # SIGKILL worker 1 while it is inside a run (in its slow read)
        reads = lines(tmp_path / "reads-1")
        wait_for(
            lambda: lines(tmp_path / "reads-1") > reads + 2,
            what="worker 1 to be mid-run",
            timeout=60.0,
        )
        assert leases_of(owner["1"]) > 0
        workers["1"].send_signal(signal.SIGKILL)

        # freeze worker 2 mid-run until every run it held was taken over by someone else
        reads = lines(tmp_path / "reads-2")
        wait_for(
            lambda: lines(tmp_path / "reads-2") > reads, what="worker 2 to be mid-run", timeout=60.0
        )
        workers["2"].send_signal(signal.SIGSTOP)
        held = query(
            "SELECT run_id, epoch FROM runs WHERE lease_owner = %s AND status = 'running'",
            owner["2"],
        )
        assert held, "worker 2 held no run when it was frozen"

        def taken_over() -> bool:
            epochs = dict(query("SELECT run_id, epoch FROM runs WHERE run_id = ANY(%s)", ids))
            return all(epochs[run_id] > epoch for run_id, epoch in held)

        ids = [run_id for run_id, _ in held]
        wait_for(
            taken_over,
            what="worker 2's runs to be taken over",
            timeout=60.0,
            state=lambda: (
                held,
                query(
                    "SELECT run_id, status, epoch, lease_owner, lease_until, wake_at, now() "
                    "FROM runs WHERE run_id = ANY(%s)",
                    ids,
                ),
                query(
                    "SELECT pid, state, wait_event, left(query, 60), xact_start "
                    "FROM pg_stat_activity WHERE datname = current_database()"
                ),
            ),
        )
        workers["2"].send_signal(signal.SIGCONT)

        try:
            code = wait_while_progressing(
                submitter,
                lambda: int(query("SELECT count(*) FROM runs WHERE status = 'completed'")[0][0]),
                STALL_SECONDS,
            )
        except subprocess.TimeoutExpired:
            stuck = query(
                "SELECT r.run_id, r.status, r.epoch, r.lease_owner, r.lease_until, r.wake_at, "
                "array_agg(a.status) FROM runs r LEFT JOIN approvals a USING (run_id) "
                "WHERE r.status <> 'completed' GROUP BY 1 LIMIT 5"
            )
            raise AssertionError(
                f"no run completed for {STALL_SECONDS} s: {stuck} {owner}"
            ) from None
        assert code == 0, (tmp_path / "client.stderr").read_text()[-3000:]
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    # every run completed
    statuses = Counter(s for (s,) in query("SELECT status FROM runs"))
    assert statuses == {"completed": RUNS}, statuses
    # the frozen worker was fenced: an append with its epoch is refused; and its own appends
    # after revival were refused (stale epoch; or, if it froze inside a transaction, the
    # database had ended that session so that its runs could be taken over)
    refused = lines(tmp_path / "stale-2") + lines(tmp_path / "ended-2")
    assert refused >= 1, (tmp_path / "2.stderr").read_text()
    asyncio.run(assert_fenced(dsn, held))

    # no event lost or duplicated: each log is gapless and is what the client received live,
    # from A, or from A then B for the runs it resumed there
    seen: dict[str, list[str]] = json.loads((tmp_path / "seen.json").read_text())
    assert len(seen) == RUNS
    assert len(seen) // SWITCH_EVERY >= 40  # so many streams were resumed on the other server
    unknown: set[str] = set()
    for run_id, received in seen.items():
        rows = query("SELECT seq, payload::text FROM events WHERE run_id = %s ORDER BY seq", run_id)
        assert [seq for seq, _ in rows] == list(range(1, len(rows) + 1)), run_id
        stored = [decode_event(payload) for _, payload in rows]
        assert [decode_event(e) for e in received] == stored, run_id
        for event in stored:
            if isinstance(event, ToolCallEnd) and event.name == "send":
                if event.recovery == "unknown":
                    unknown.add(run_id)
                else:
                    assert not event.is_error, (run_id, event)

    # no effect twice, no handler entered twice; a payment not made was reported unknown
    entries = Counter(key for (key,) in query("SELECT key FROM cluster_entries"))
    assert all(n == 1 for n in entries.values()), entries.most_common(3)
    effects = query("SELECT key, payee FROM cluster_effects")
    assert len({payee for _, payee in effects}) == len(effects)
    paid_runs = {key.split(":", 1)[0] for key, _ in effects}
    assert set(seen) - paid_runs <= unknown
    assert len(effects) >= RUNS - len(unknown)

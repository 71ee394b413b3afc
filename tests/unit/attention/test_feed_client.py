"""The decision feed's client against a real ``fiduciary serve --attention`` process, killed and
started again mid-feed: every decision arrives, in order, none twice once its cursor is
persisted, and a new iterator resumes from the cursor file."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from fiduciary.attention.feed_client import FeedItem, FeedRefusedError, FileCursor, decision_feed

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

FIDUCIARY = [sys.executable, "-m", "fiduciary"]
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "attention"


class Served:
    """``fiduciary serve --attention`` in a process of its own, on a port kept across restarts."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "TERM": "dumb"}
        self.env.pop("FIDUCIARY_POSTGRES", None)
        self.db = tmp / "serve.sqlite3"
        self.port = 0
        self.process: subprocess.Popen[str] | None = None

    def key(self) -> str:
        made = subprocess.run(
            [*FIDUCIARY, "keys", "create", "--db", str(self.db), "--principal", "alice"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return made.stdout.strip()

    def start(self) -> str:
        config = str(self.tmp / "attention.toml")
        self.process = subprocess.Popen(
            [
                *FIDUCIARY,
                "serve",
                "--port",
                str(self.port),
                "--db",
                str(self.db),
                "--attention",
                config,
            ],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stderr is not None
        said = []
        for line in self.process.stderr:  # said once it accepts connections
            said.append(line)
            found = re.search(r"at http://127\.0\.0\.1:(\d+)/ ", line)
            if found:
                self.port = int(found.group(1))
                return f"http://127.0.0.1:{self.port}/"
        raise AssertionError("".join(said))

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        assert self.process.stderr is not None
        self.process.stderr.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    shutil.copy(EXAMPLE / "attention.toml", tmp_path / "attention.toml")
    shutil.copy(EXAMPLE / "events.jsonl", tmp_path / "events.jsonl")
    server = Served(tmp_path)
    yield server
    if server.process is not None and server.process.poll() is None:
        server.kill()


async def decisions(feed: AsyncIterator[FeedItem], count: int) -> list[FeedItem]:
    got: list[FeedItem] = []
    while len(got) < count:
        item = await asyncio.wait_for(anext(feed), 60)
        if item.kind != "cursor":
            got.append(item)
    return got


def more_events(tmp: Path, first: int, count: int) -> None:
    with (tmp / "events.jsonl").open("a", encoding="utf-8") as f:
        for n in range(first, first + count):
            event: dict[str, object] = {"id": f"ev-{n}", "type": "payment_received"}
            event |= {"principal": "alice", "at": "2026-03-03T08:00:00+00:00"}
            event["data"] = {"amount_usd": "5.00"}
            f.write(json.dumps(event) + "\n")


async def test_the_feed_survives_server_and_client_restarts(served: Served) -> None:
    key = served.key()
    url = served.start()
    cursor = FileCursor(served.tmp / "consumer" / "cursor")
    lines = len((served.tmp / "events.jsonl").read_text().splitlines())

    # a consumer takes three decisions, then stops (its process ends)
    first = decision_feed(url, api_key=key, cursor=cursor, retry_seconds=0.05)
    taken = await decisions(first, 3)
    await first.aclose()  # type: ignore[attr-defined]
    assert [i.cursor for i in taken] == ["1", "2", "3"]
    assert cursor.load() == "2"  # the third was being acted on: not done yet

    # the server dies and starts again on the same port; a new consumer resumes from the file
    served.kill()
    feed = decision_feed(url, api_key=key, cursor=cursor, retry_seconds=0.05)
    pending = asyncio.ensure_future(decisions(feed, lines - 2))  # it retries until it is up
    served.start()
    rest = await pending
    # the third again (at least once: dedup on event_id), then the others, in order
    assert [i.cursor for i in rest] == [str(n) for n in range(3, lines + 1)]
    assert rest[0].event_id == taken[2].event_id
    assert {i.kind for i in rest} <= {"decision", "dead_letter"}

    # killed mid-feed while this consumer waits: it reconnects and gets only the new ones
    served.kill()
    waiting = asyncio.ensure_future(decisions(feed, 2))
    more_events(served.tmp, 100, 2)
    served.start()
    new = await waiting
    assert [i.cursor for i in new] == [str(lines + 1), str(lines + 2)]
    assert [i.data["event_id"] for i in new] == ["ev-100", "ev-101"]
    await feed.aclose()  # type: ignore[attr-defined]
    assert cursor.load() == str(lines + 1)


async def test_a_refused_key_is_not_retried(served: Served) -> None:
    url = served.start()
    feed = decision_feed(url, api_key="fid_0000000000000000_nope", retry_seconds=0.05)
    with pytest.raises(FeedRefusedError):
        await asyncio.wait_for(anext(feed), 60)

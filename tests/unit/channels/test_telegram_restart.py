"""Restart idempotence, in real processes: a poller dies after handling an update and before
committing the offset; ``fiduciary telegram`` then starts over the same database, Telegram
(the stand-in) sends the update again, and it is not handled twice."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from fiduciary import Principal
from fiduciary.channels import AgentChat
from fiduciary.channels.links import Linked, PersonLinks
from fiduciary.clock import SystemClock
from fiduciary.events import UserMessage
from fiduciary.stores.sqlite import SQLiteStore

from . import chat_agent
from .botapi import BotApi, serving
from .telegram_proc import CRASHED

TOKEN = "654321:RESTART-canary_abcdefghijklmnopqrstuvwxyz"
ROOT = Path(__file__).resolve().parents[3]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["FIDUCIARY_TELEGRAM_TOKEN"] = TOKEN
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def test_an_update_redelivered_after_a_crash_is_not_handled_again(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    api = BotApi(TOKEN)
    asyncio.run(_link_alice(db))
    with serving(api) as url:
        first = api.push_message(111, "first")
        crashed = subprocess.run(
            [sys.executable, "-m", "tests.unit.channels.telegram_proc", str(db), url],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert crashed.returncode == CRASHED, crashed.stderr
        assert api.texts(111) == ["you said: first"]
        assert api.offsets[-1] is None  # the update was never confirmed

        second = api.push_message(111, "second")
        served = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fiduciary",
                "telegram",
                "--agent",
                "tests.unit.channels.chat_agent:factory",
                "--allow",
                "111=alice",
                "--db",
                str(db),
                "--api",
                url,
                "--poll-timeout",
                "1",
            ],
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            api.wait_for(lambda: any((o or 0) > second for o in api.offsets), 60)
        finally:
            served.send_signal(signal.SIGTERM)
            out, err = served.communicate(timeout=60)
        assert served.returncode == 0, err
        assert api.delivered.count(first) == 2  # sent again after the crash: not handled

    assert api.texts(111) == ["you said: first", "you said: second"]
    assert TOKEN.split(":")[1] not in crashed.stderr + err + out
    assert asyncio.run(_said(db)) == ["first", "second"]


async def _link_alice(db: Path) -> None:
    """Alice's Telegram account is user 111, her private chat's."""
    links = await PersonLinks.open(sqlite_path=str(db))
    try:
        code = await links.issue("alice", now=SystemClock().now())
        assert await links.redeem(code, 111, now=SystemClock().now()) == Linked("alice", 111)
    finally:
        await links.close()


async def _said(db: Path) -> list[str]:
    """What alice's chat run recorded her saying."""
    store = await SQLiteStore.open(db)
    try:
        chat = AgentChat(chat_agent.factory(store), name="telegram")
        events = await store.read_events(chat.run_id(Principal("alice")))
        return [e.text for e in events if isinstance(e, UserMessage)]
    finally:
        await store.close()

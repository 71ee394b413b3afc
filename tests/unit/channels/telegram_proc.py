"""A poller process that dies right after handling an update, before committing its offset.

``python -m tests.unit.channels.telegram_proc DB API_URL`` (token in FIDUCIARY_TELEGRAM_TOKEN):
chat 111 is alice's; the process exits with status 86 once it has handled one update.
"""

from __future__ import annotations

import asyncio
import os
import sys

from fiduciary.channels import AgentChat, Inbox
from fiduciary.channels.records import ChannelRecords
from fiduciary.channels.telegram import TelegramChannel, channel_name
from fiduciary.stores.sqlite import SQLiteStore

from . import chat_agent

CRASHED = 86


def _die(update_id: int) -> None:
    sys.stdout.flush()
    os._exit(CRASHED)  # no cleanup: as a kill would leave it


async def main(db: str, api: str) -> None:
    token = os.environ["FIDUCIARY_TELEGRAM_TOKEN"]
    store = await SQLiteStore.open(db)
    agent = chat_agent.factory(store)
    inbox = Inbox()
    inbox.add("chat", AgentChat(agent, name="telegram"), per="principal")
    channel = TelegramChannel(
        token=token,
        agent=agent,
        inbox=inbox,
        target="chat",
        allow={111: "alice"},
        records=await ChannelRecords.open(channel_name(token), sqlite_path=db),
        api=api,
        poll_timeout=1,
        after_handled=_die,
    )
    await channel.start()
    await channel.run_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))

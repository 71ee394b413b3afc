"""The agent ``fiduciary mcp`` serves in the tests: reads (one answering plain text), a priced
write, an auto write.

Each executed ``send`` appends a line to ``$FID_MCP_EFFECTS``: the count of real effects, seen
from the test process.
"""

from __future__ import annotations

import asyncio
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

from fiduciary import Agent, CallContext, capability
from fiduciary.stores.base import Store
from tests.agent_support import make_agent


def _effect(line: str) -> None:
    path = os.environ.get("FID_MCP_EFFECTS")
    if path:
        with Path(path).open("a", encoding="utf-8") as out:
            out.write(line + "\n")


@capability(kind="read")
def balance(account: str = "main") -> dict[str, str]:
    """The balance of an account, in USD."""
    return {"account": account, "usd": "250.00"}


@capability(kind="read")
def greeting(name: str = "world") -> str:
    """A greeting: a result that is plain text."""
    return f"hello, {name}"


def _amount(args: Any, ctx: CallContext) -> Decimal:
    return Decimal(str(args.amount))


@capability(kind="execute", risk="high", operation="send", amount_usd=_amount)
def send(to: str, amount: Decimal) -> dict[str, str]:
    """Send USD to someone."""
    _effect(f"send {to} {amount}")
    return {"sent": str(amount), "to": to}


@capability(kind="execute", tier="auto")
def note(text: str) -> dict[str, str]:
    """Write a note (an auto write)."""
    _effect(f"note {text}")
    return {"noted": text}


@capability(kind="execute", tier="auto", timeout=600)
async def slow_send(to: str) -> dict[str, str]:
    """Send, slowly: records its effect, then never finishes (a test kills the process)."""
    _effect(f"slow_send {to}")
    marker = os.environ.get("FID_MCP_PID")
    if marker:  # the test kills this process by its id
        Path(marker).write_text(str(os.getpid()), encoding="utf-8")  # noqa: ASYNC240
    await asyncio.Event().wait()
    return {"sent": to}


def mcp_agent(store: Store) -> Agent:
    return make_agent(
        store=store,
        capabilities=[balance, send, note, slow_send, greeting],
        lease_seconds=2.0,  # a killed server's run is taken over soon
    )

"""The agent the channel tests talk to (also ``--agent tests.unit.channels.chat_agent:factory``).

- ``pay PAYEE AMOUNT``: one ``send`` (an execute with a USD amount: balanced preset, so
  under 10 runs on its own, under 200 waits for Approve, 200 and more asks for the amount);
  then "sent".
- ``balance``: a turn that says something and reads, then the answer.
- ``long``: a reply of many paragraphs, far over Telegram's 4096 characters.
- anything else: an echo, once per message, so a chat's run goes on message after message.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from fiduciary import Agent, Policy, capability
from fiduciary.capabilities import Capability
from fiduciary.guards import default_guards
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Results, Script, ScriptedModel, ToolCalls, allow_all

PAY = re.compile(r"^pay (\w+) (\d+(?:\.\d+)?)$")

SENT: list[dict[str, str]] = []  # this process's effects


def _pay_args(results: Results) -> dict[str, Any]:
    match = PAY.match(results.user_messages[0])
    assert match is not None
    return {"payee": match.group(1), "amount": match.group(2)}


def long_text() -> str:
    paragraph = " ".join(["The quick brown fox jumps over the lazy dog."] * 20)
    return "\n\n".join(f"{i}. {paragraph}" for i in range(12))


def scripts() -> list[Script]:
    def echo(results: Results) -> str:
        return f"you said: {results.user_messages[-1]}"

    return [
        Script(PAY, [ToolCalls([Call("send", _pay_args)]), Reply("sent")], name="pay"),
        Script(
            re.compile(r"^balance$"),
            [
                ToolCalls([Call("balance")], text="Let me look."),
                Reply(lambda r: f"You have ${r['balance']['usd']}."),
            ],
            name="balance",
        ),
        Script(re.compile(r"^long$"), [Reply(long_text(), chunk_chars=500)], name="long"),
        Script(lambda _: True, [Reply(echo)] * 200, name="echo"),
    ]


def capabilities(*, flags: frozenset[str] = frozenset()) -> list[Capability]:
    @capability(
        kind="execute",
        operation="send",
        amount_usd=lambda a, ctx: Decimal(a.amount),
        flags=flags,
    )
    async def send(payee: str, amount: str) -> dict[str, str]:
        """Send money to a payee."""
        SENT.append({"payee": payee, "amount": amount})
        return {"payee": payee, "amount": amount}

    @capability(kind="read")
    async def balance() -> dict[str, str]:
        """The available balance."""
        return {"usd": "5000.00"}

    return [send, balance]


def factory(store: Store) -> Agent:
    return Agent(
        model=ScriptedModel(scripts()),
        capabilities=capabilities(),
        store=store,
        policy=Policy(preset="balanced"),
        guards=[],
        authorize=allow_all,
    )


def guarded_factory(store: Store) -> Agent:
    """As ``factory``, with ``send`` irreversible and the default guards: its cards carry the
    irreversibility guard's note."""
    return Agent(
        model=ScriptedModel(scripts()),
        capabilities=capabilities(flags=frozenset({"irreversible"})),
        store=store,
        policy=Policy(preset="balanced"),
        guards=default_guards(),
        authorize=allow_all,
    )

"""The shop agent (shop.py) on a real model: Claude or OpenAI, whichever key is set.

    ANTHROPIC_API_KEY=... python examples/real_provider.py      (or OPENAI_API_KEY=...)

Needs the provider's extra: pip install 'fiduciary[anthropic]' (or 'fiduciary[openai]').
Without a key it says so and exits: offline, the other examples use a scripted model.
"""

from __future__ import annotations

import asyncio
import os
import sys

from fiduciary.models import resolve_model
from shop import PRINCIPAL, Shop, build_agent, show

MODELS = {"ANTHROPIC_API_KEY": "anthropic:claude-sonnet-4-6", "OPENAI_API_KEY": "openai:gpt-5.1"}


def ask(question: str) -> bool:
    try:
        return input(question).strip().lower() in {"y", "yes"}
    except EOFError:  # no terminal: nobody approved
        return False


async def main(model_name: str) -> None:
    shop = Shop()
    agent = build_agent(shop, resolve_model(model_name))
    message = "Order A-1002 never arrived. Please look it up and refund it in full."
    print(f"{model_name}\n> {message}")
    async for event in agent.run(message, principal=PRINCIPAL):
        show(event)
    for card in await agent.pending_approvals(principal=PRINCIPAL):
        if ask(f"Approve {card.capability} {card.args} (${card.amount_usd})? [y/N] "):
            await agent.approve(card.approval_id, by=PRINCIPAL)
        else:
            await agent.deny(card.approval_id, by=PRINCIPAL, reason="declined at the prompt")
        async for event in agent.resume(card.run_id):
            show(event)
    print({order.id: str(order.refunded) for order in shop.orders.values()})


if __name__ == "__main__":
    chosen = next((name for key, name in MODELS.items() if os.environ.get(key)), None)
    if chosen is None:
        print(
            "skipped: set ANTHROPIC_API_KEY or OPENAI_API_KEY to run this example on a real model"
        )
        sys.exit(0)
    asyncio.run(main(chosen))

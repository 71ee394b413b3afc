"""What ``fiduciary serve`` serves: an agent, and optionally the balances the console shows.

An agent factory is ``(store) -> Agent | ServedAgent``, named on the command line as
``module:attribute`` (``--agent``). The default is the paper wallet's agent (``wallet_agent``),
with the console's balances; ``demo_agent`` is the small billing demo.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import cast

from .. import agent_factory
from ..agent import Agent
from ..demo import DEMO_PRINCIPAL, Billing, build_demo_agent
from ..exceptions import ConfigurationError
from ..observability.environment import trace_from_env
from ..stores.base import Store
from .app import BalancesHook
from .schemas import Balances

__all__ = [
    "DEFAULT_AGENT",
    "AgentFactory",
    "ServedAgent",
    "demo_agent",
    "load_factory",
    "wallet_agent",
]

DEFAULT_AGENT = "fiduciary.server.served:wallet_agent"


@dataclass(frozen=True, slots=True)
class ServedAgent:
    agent: Agent
    balances: BalancesHook | None = None


AgentFactory = Callable[[Store], "Agent | ServedAgent"]


def demo_agent(store: Store) -> ServedAgent:
    """The offline demo's agent: toy invoices of ``demo-user``, paid from a $120 account."""
    billing = Billing()

    def balances(principal: str) -> Balances:
        if principal != DEMO_PRINCIPAL:
            return Balances(balances={})
        dollars = billing.balance
        return Balances(balances={"USD": dollars}, usd={"USD": dollars}, total_usd=dollars)

    return ServedAgent(build_demo_agent(store, billing), balances)


def wallet_agent(store: Store) -> ServedAgent:
    """The paper wallet's agent, on the store's own SQLite file (or in memory).

    The model is ``FIDUCIARY_MODEL``, else a provider's when its API key is set, else the
    wallet's scripted model (the demo's conversation, else only what each message asks).
    """
    from ..stores.memory import MemoryStore
    from ..stores.sqlite import SQLiteStore
    from ..wallet import PaperWallet, build_wallet_agent
    from ..wallet.demo import default_model_name, load_model, wallet_memory
    from ..wallet.posted import posted_balances

    if not isinstance(store, SQLiteStore | MemoryStore):
        raise ConfigurationError(
            "the paper wallet keeps its books in the runs' SQLite file, so it cannot be served "
            f"from {type(store).__name__}: name your own agent factory with --agent "
            "module:attribute (see docs/deploy.md)"
        )
    wallet = PaperWallet(getattr(store, "path", ":memory:"))
    name = default_model_name(os.environ)
    model = load_model(name)  # offline: the wallet's scripted model, which does what is asked

    def balances(principal: str) -> Balances:
        # the ledger's figures; what accrued since its last posting on rows of its own
        report, accrual = posted_balances(wallet, principal)
        amounts: dict[str, Decimal] = {}
        usd: dict[str, Decimal] = {}
        for book, holdings in (
            ("", report.available),
            (" savings", report.savings),
            (" debt", report.debt),
            (" rewards", report.rewards),
        ):
            for holding in holdings:
                amounts[f"{holding.asset}{book}"] = holding.amount
                usd[f"{holding.asset}{book}"] = holding.usd
        accrued = {
            **{f"{a} interest accrued (not posted)": v for a, v in accrual.interest.items()},
            **{
                f"{a} debt interest accrued (not posted)": v
                for a, v in accrual.debt_interest.items()
            },
        }
        if accrual.rewards:
            accrued[f"{wallet.lending.reward_asset} rewards accrued (not posted)"] = accrual.rewards
        amounts.update(accrued)
        return Balances(balances=amounts, usd=usd, total_usd=report.total_usd)

    agent = build_wallet_agent(store, wallet, model=model, memory=wallet_memory(store))
    return ServedAgent(agent, balances)


def load_factory(spec: str) -> AgentFactory:
    """``module:attribute`` → the factory it names (``fiduciary.agent_factory``)."""
    return cast(AgentFactory, agent_factory.load_factory(spec))


def serve_setup(factory: AgentFactory, store: Store) -> ServedAgent:
    made = factory(store)
    if isinstance(made, Agent):
        return ServedAgent(trace_from_env(made))
    if isinstance(made, ServedAgent):
        return replace(made, agent=trace_from_env(made.agent))
    raise ConfigurationError(
        f"an agent factory must return an Agent or a ServedAgent, not {type(made).__name__}"
    )

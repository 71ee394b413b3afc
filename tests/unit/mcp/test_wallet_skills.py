"""The paper wallet's 14 playbooks (6 multi-step, 8 single-tool) served as MCP prompts, read
through the SDK's client; every capability a playbook names is one the wallet has."""

from __future__ import annotations

import re
from pathlib import Path

from mcp import Client

import fiduciary.wallet
from fiduciary import Agent, Principal
from fiduciary.mcp import McpGateway, build_server, load_skills
from fiduciary.stores.memory import MemoryStore
from fiduciary.testing import ScriptedModel
from fiduciary.wallet import PaperWallet, wallet_capabilities

from .served_agent import balance

WALLET_SKILLS = Path(fiduciary.wallet.__file__).with_name("skills")
MULTI_STEP = {
    "account-report",
    "emergency-withdraw",
    "rebalance",
    "safe-borrow",
    "send-and-save-contact",
    "swap-and-save",
}
# each single-tool playbook and the capability it is about
SINGLE_TOOL = {
    "save": "save_deposit",
    "withdraw": "withdraw",
    "repay": "repay_debt",
    "claim-rewards": "claim_rewards",
    "harvest-rewards": "harvest_rewards",
    "swap": "swap_execute",
    "explain-transaction": "explain_tx",
    "save-contact": "save_contact",
}


async def test_the_fourteen_playbooks_are_mcp_prompts() -> None:
    skills = load_skills(WALLET_SKILLS)
    assert {s.name for s in skills} == MULTI_STEP | set(SINGLE_TOOL)
    agent = Agent(model=ScriptedModel([]), capabilities=[balance], store=MemoryStore())
    server = build_server(McpGateway(agent), principal=Principal("alice"), skills=skills)
    async with Client(server) as client:
        listed = {p.name: p for p in (await client.list_prompts()).prompts}
        bodies = {}
        for name in SINGLE_TOOL:
            got = await client.get_prompt(f"skill-{name}")
            bodies[name] = getattr(got.messages[0].content, "text", "")
    assert {f"skill-{n}" for n in MULTI_STEP | set(SINGLE_TOOL)} <= set(listed)
    for name, tool in SINGLE_TOOL.items():
        assert listed[f"skill-{name}"].description, name
        assert bodies[name].startswith("# "), name
        assert f"`{tool}`" in bodies[name], (name, tool)


def test_every_capability_a_playbook_names_exists() -> None:
    with PaperWallet() as wallet:
        caps = wallet_capabilities(wallet)
    names = {c.name for c in caps}
    arguments = {field for c in caps for field in c.input_model.model_fields}
    for skill in load_skills(WALLET_SKILLS):
        named = set(re.findall(r"`([a-z_]+)`", skill.body))
        assert named & names, skill.name  # it names at least one capability
        # and every name in backquotes is a capability or one of their arguments
        assert named <= names | arguments, (skill.name, named - names - arguments)

"""Skills: SKILL.md playbooks as MCP prompts and as the use_skill capability; they grant nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

import fiduciary.wallet
from fiduciary import Agent, Principal, ToolCallEnd, ToolCallRejected
from fiduciary.exceptions import ConfigurationError
from fiduciary.mcp import McpGateway, build_server, load_skills, parse_skill, skills_capability
from fiduciary.stores.memory import MemoryStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

from .served_agent import balance

WALLET_SKILLS = Path(fiduciary.wallet.__file__).with_name("skills")


def test_the_wallets_playbooks_load() -> None:
    skills = load_skills(WALLET_SKILLS)
    assert {
        "account-report",
        "emergency-withdraw",
        "rebalance",
        "safe-borrow",
        "send-and-save-contact",
        "swap-and-save",
    } <= {s.name for s in skills}  # and 8 single-tool ones: test_wallet_skills.py
    assert all(s.description and s.body.startswith("#") for s in skills)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("# no front matter", "starts with '---'"),
        ("---\nname: x\ndescription: d\n", "not closed"),
        ("---\nname: Not_Valid\ndescription: d\n---\nbody", "lower-case"),
        ("---\nname: fine\n---\nbody", "description"),
    ],
)
def test_a_malformed_skill_is_refused(text: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        parse_skill(text)


async def test_skills_are_mcp_prompts() -> None:
    skills = load_skills(WALLET_SKILLS)
    agent = Agent(model=ScriptedModel([]), capabilities=[balance], store=MemoryStore())
    server = build_server(McpGateway(agent), principal=Principal("alice"), skills=skills)
    async with Client(server) as client:
        prompts = (await client.list_prompts()).prompts
        got = await client.get_prompt("skill-safe-borrow")
    assert "skill-swap-and-save" in {p.name for p in prompts}
    text = got.messages[0].content
    assert getattr(text, "text", "").startswith("# Safe borrow")


async def test_a_skill_grants_nothing() -> None:
    use_skill = skills_capability(load_skills(WALLET_SKILLS))
    script = Script(
        "",
        [
            ToolCalls([Call("use_skill", {"skill": "send-and-save-contact"})]),
            ToolCalls([Call("send_transfer", {"to": "bob", "asset": "USDC", "amount": 5})]),
            Reply("I cannot send."),
        ],
    )
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[use_skill, balance],
        store=MemoryStore(),
        authorize=allow_all,
    )
    events = await collect(agent.run("send bob 5 USDC", principal="alice"))
    (opened,) = [e for e in events if isinstance(e, ToolCallEnd)]
    assert "send_transfer" in json.loads(opened.output)["playbook"]
    (refused,) = [e for e in events if isinstance(e, ToolCallRejected)]
    assert refused.name == "send_transfer"
    assert refused.reason == "not_allowed"


async def test_use_skill_lists_the_playbooks_and_refuses_an_unknown_one() -> None:
    use_skill = skills_capability(load_skills(WALLET_SKILLS))
    script = Script(
        "",
        [ToolCalls([Call("use_skill"), Call("use_skill", {"skill": "nope"})]), Reply("ok")],
    )
    agent = Agent(model=ScriptedModel([script]), capabilities=[use_skill], store=MemoryStore())
    events = await collect(agent.run("what can you do", principal="alice"))
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    (listed,) = [e for e in ends if not e.is_error]  # the two reads ran concurrently
    (unknown,) = [e for e in ends if e.is_error]
    assert len(json.loads(listed.output)["skills"]) == 14  # 6 multi-step, 8 single-tool
    assert "unknown_skill" in unknown.output

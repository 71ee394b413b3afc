"""The skill slot of the system prompt: chosen by the person (``agent.run(..., skill=...)``) or
by the model (``use_skill``), read back from the log after a resume; a skill grants nothing."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

import fiduciary.wallet
from fiduciary import Agent, RunError, ToolCallEnd, ToolCallRejected, capability
from fiduciary.agent import DEFAULT_SYSTEM
from fiduciary.context.skills import Skill, load_skills, skills_capability
from fiduciary.events import UserMessage
from fiduciary.exceptions import ConfigurationError
from fiduciary.testing import (
    Call,
    MemoryStore,
    Reply,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
    collect,
)

WALLET_SKILLS = Path(fiduciary.wallet.__file__).with_name("skills")
SAVE = Skill("save-first", "Save before spending.", "1. Read the balance.\n2. Save half.")
REPORT = Skill("report", "Report the balance.", "1. Read the balance.\n2. Say it plainly.")


@capability(kind="read")
def balance() -> dict[str, str]:
    """The balance, in USD."""
    return {"usd": "250.00"}


@capability(kind="execute", risk="high", operation="send", amount_usd=lambda a, c: a.amount)
def send(to: str, amount: Decimal) -> dict[str, str]:
    """Send USD to someone."""
    return {"sent": str(amount), "to": to}


def _skill_layers(model: ScriptedModel) -> list[str]:
    """The skill layer of each request the model was sent ('' without one)."""
    found = []
    for request in model.requests:
        layers = [s for s in request.system if s.startswith("<skill ")]
        found.append(layers[0] if layers else "")
    return found


async def test_the_persons_skill_is_in_the_system_prompt_of_every_call() -> None:
    model = ScriptedModel([Script("", [ToolCalls([Call("balance")]), Reply("You have $250.")])])
    agent = Agent(model=model, capabilities=[balance], skills=[SAVE, REPORT], store=MemoryStore())
    events = await collect(agent.run("how much?", principal="alice", skill="report"))
    (message,) = [e for e in events if isinstance(e, UserMessage)]
    assert message.skill == "report"
    first, second = model.requests
    assert first.system[0] == DEFAULT_SYSTEM
    assert first.stable_layers == 1  # the skill layer changes: after the cached prefix
    layers = _skill_layers(model)
    assert layers[0] == layers[1]
    assert layers[0].startswith('<skill name="report">')
    assert "2. Say it plainly." in layers[0]
    assert "Save half" not in layers[0]
    assert [t.name for t in second.tools] == ["balance", "use_skill"]


async def test_no_skill_no_layer_and_an_unknown_one_is_refused() -> None:
    model = ScriptedModel([Script("", [Reply("Hello.")])])
    agent = Agent(model=model, capabilities=[balance], skills=[SAVE], store=MemoryStore())
    await collect(agent.run("hi", principal="alice"))
    (request,) = model.requests
    assert request.system == (DEFAULT_SYSTEM,)
    with pytest.raises(RunError, match="unknown skill 'nope' \\(available: save-first\\)"):
        await collect(agent.run("hi", principal="alice", skill="nope"))
    with pytest.raises(ConfigurationError, match="two skills are named 'report'"):
        Agent(model=model, capabilities=[balance], skills=[REPORT, REPORT])


async def test_the_model_chooses_a_skill_with_use_skill() -> None:
    script = Script(
        "",
        [
            ToolCalls([Call("use_skill")]),
            ToolCalls([Call("use_skill", {"skill": "save-first"})]),
            ToolCalls([Call("balance")]),
            Reply("Saved half."),
        ],
    )
    model = ScriptedModel([script])
    agent = Agent(model=model, capabilities=[balance], skills=[SAVE, REPORT], store=MemoryStore())
    events = await collect(agent.run("what should I do?", principal="alice", skill="report"))
    listed = json.loads(next(e for e in events if isinstance(e, ToolCallEnd)).output)
    assert [s["name"] for s in listed["skills"]] == ["report", "save-first"]
    layers = _skill_layers(model)
    assert [layer.split('"')[1] for layer in layers] == [
        "report",
        "report",  # listing is not choosing
        "save-first",  # opened by the model: it replaces the person's choice
        "save-first",
    ]


async def test_the_skill_stays_for_the_next_message_and_after_a_resume() -> None:
    store = MemoryStore()
    script = Script(
        "",
        [ToolCalls([Call("send", {"to": "bob", "amount": 500})]), Reply("Sent.")],
    )
    first = ScriptedModel([script])
    agent = Agent(
        model=first, capabilities=[balance, send], skills=[SAVE], store=store, authorize=allow_all
    )
    events = await collect(agent.run("send bob 500", principal="alice", skill="save-first"))
    pending = [e for e in events if e.type == "pending_action"]
    assert pending
    # another process (another agent on the same store) decides and resumes it
    later = ScriptedModel([script])
    other = Agent(
        model=later, capabilities=[balance, send], skills=[SAVE], store=store, authorize=allow_all
    )
    await other.approve(pending[0].approval_id, by="alice", confirm_amount="500")
    run_id = events[0].run_id
    await collect(other.resume(run_id))
    assert _skill_layers(later) == [_skill_layers(first)[0]]
    assert "Save half" in _skill_layers(later)[0]
    # a next message without a skill keeps the one chosen
    await collect(other.run("and now?", principal="alice", run_id=run_id))
    assert "Save half" in _skill_layers(later)[-1]


async def test_a_skill_grants_nothing() -> None:
    skills = load_skills(WALLET_SKILLS)
    script = Script(
        "",
        [
            ToolCalls([Call("send_transfer", {"to": "bob", "asset": "USDC", "amount": 5})]),
            Reply("I cannot send."),
        ],
    )
    model = ScriptedModel([script])
    agent = Agent(
        model=model,
        capabilities=[balance],
        skills=skills,
        store=MemoryStore(),
        authorize=allow_all,
    )
    events = await collect(
        agent.run("send bob 5 USDC", principal="alice", skill="send-and-save-contact")
    )
    assert "send_transfer" in _skill_layers(model)[0]  # the playbook names it ...
    (refused,) = [e for e in events if isinstance(e, ToolCallRejected)]
    assert refused.name == "send_transfer"
    assert refused.reason == "not_allowed"  # ... and it is still not the run's to call


async def test_a_whitelist_without_use_skill_cannot_open_one() -> None:
    script = Script("", [ToolCalls([Call("use_skill", {"skill": "save-first"})]), Reply("ok")])
    model = ScriptedModel([script])
    agent = Agent(model=model, capabilities=[balance], skills=[SAVE], store=MemoryStore())
    events = await collect(agent.run("hi", principal="alice", capabilities=["balance"]))
    (refused,) = [e for e in events if isinstance(e, ToolCallRejected)]
    assert refused.reason == "not_allowed"
    assert _skill_layers(model) == ["", ""]


def test_an_agent_with_its_own_use_skill_keeps_it() -> None:
    mine = skills_capability([REPORT])
    agent = Agent(model=ScriptedModel([]), capabilities=[mine], skills=[SAVE])
    assert agent.gates.get("use_skill") is mine

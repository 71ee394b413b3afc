"""External MCP tools as capabilities, against a real MCP server process (stdio and HTTP)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from fiduciary import Agent, Capability, Event, Kind, ToolCallEnd, ToolCallRejected, encode_event
from fiduciary.events import PendingAction
from fiduciary.exceptions import ConfigurationError
from fiduciary.mcp import McpServer, ToolPolicy, mcp_capabilities
from fiduciary.models.scripted import Step
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect
from tests.agent_support import make_agent

from .bank_server import SECRET
from .conftest import Bank

pytestmark = pytest.mark.timeout(90)


def scripted_agent(store: Store, caps: Sequence[Capability], steps: Sequence[Step]) -> Agent:
    return make_agent(None, store, None, Script("", steps), capabilities=caps)


def _ends(events: Sequence[Event]) -> dict[str, ToolCallEnd]:
    return {e.name: e for e in events if isinstance(e, ToolCallEnd)}


async def test_every_tool_is_a_write_unless_the_host_says_it_reads(bank: Bank) -> None:
    async with await mcp_capabilities(bank.server, reads={"rates"}) as untrusted:
        kinds = {c.name: c.kind for c in untrusted}
    assert kinds["rates"] is Kind.READ
    # readOnlyHint is not believed from a server the host does not trust
    assert {n for n, k in kinds.items() if k is Kind.EXECUTE} == {
        "balance",
        "transfer",
        "statement",
        "close_account",
        "hang",
    }
    async with await mcp_capabilities(bank.server, trust_read_only_hint=True) as trusted:
        hinted = {c.name for c in trusted if c.kind is Kind.READ}
        transfer = next(c for c in trusted if c.name == "transfer")
    assert hinted == {"balance", "rates", "statement", "close_account"}
    assert transfer.replay.value == "never"
    assert transfer.input_schema()["required"] == [
        "to",
        "amount",
    ]


async def test_two_reads_run_on_their_own_and_together(bank: Bank, store: Store) -> None:
    async with await mcp_capabilities(bank.server, reads={"balance", "rates"}) as tools:
        steps: list[Step] = [
            ToolCalls([Call("balance", {"account": "main"}), Call("rates", {"currency": "EUR"})]),
            Reply("done"),
        ]
        events = await collect(
            scripted_agent(store, list(tools), steps).run("look", principal="alice")
        )
    ends = _ends(events)
    assert not [e for e in events if isinstance(e, PendingAction)]
    for name in ("balance", "rates"):
        assert not ends[name].is_error
        # each read waited in the server until the other arrived: they ran concurrently
        assert json.loads(ends[name].output)["structured"]["together"] is True
    assert events[-1].type == "run_completed"


@pytest.mark.parametrize("amount", [5, 12.25])  # (a decimal one is approved as it was shown)
async def test_an_unmapped_tool_waits_for_a_person_then_runs_once(
    bank: Bank, store: Store, amount: float
) -> None:
    async with await mcp_capabilities(bank.server) as tools:
        steps: list[Step] = [
            ToolCalls([Call("transfer", {"to": "bob", "amount": amount})]),
            Reply("sent"),
        ]
        agent = scripted_agent(store, list(tools), steps)
        events = await collect(agent.run("pay bob", principal="alice"))
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        assert pending.tier == "confirm"
        assert pending.input == {"to": "bob", "amount": amount}
        assert bank.transfers() == []
        await agent.approve(pending.approval_id, by="alice", args_digest=pending.args_digest)
        resumed = await collect(agent.resume(events[0].run_id))
    assert bank.transfers() == [f"transfer bob {float(amount)}"]
    output = json.loads(_ends(resumed)["transfer"].output)["text"]
    assert output == f"sent {float(amount)} to bob"


async def test_an_operation_and_amount_put_a_small_transfer_under_the_policy(
    bank: Bank, store: Store
) -> None:
    ops = {"transfer": ToolPolicy("send", amount="amount")}
    async with await mcp_capabilities(bank.server, operations=ops, prefix="bank_") as tools:
        steps: list[Step] = [
            ToolCalls([Call("bank_transfer", {"to": "bob", "amount": 5})]),
            ToolCalls([Call("bank_transfer", {"to": "eve", "amount": 500})]),
            Reply("done"),
        ]
        events = await collect(
            scripted_agent(store, list(tools), steps).run("pay", principal="alice")
        )
    (pending,) = [e for e in events if isinstance(e, PendingAction)]  # $500: a person decides
    assert pending.input == {"to": "eve", "amount": 500}
    assert pending.amount_usd == 500
    assert bank.transfers() == ["transfer bob 5.0"]  # $5 went through on its own (auto)


async def test_input_is_checked_against_the_tools_schema_before_any_call(
    bank: Bank, store: Store
) -> None:
    async with await mcp_capabilities(bank.server) as tools:
        steps: list[Step] = [
            ToolCalls([Call("transfer", {"to": "bob", "amount": "lots"})]),
            Reply("no"),
        ]
        events = await collect(
            scripted_agent(store, list(tools), steps).run("pay", principal="alice")
        )
    (rejected,) = [e for e in events if isinstance(e, ToolCallRejected)]
    assert rejected.reason == "invalid_input"
    assert "amount" in rejected.message
    assert bank.transfers() == []


async def test_a_secret_in_a_tools_output_reaches_no_event_audit_row_or_model(
    bank: Bank, store: Store
) -> None:
    async with await mcp_capabilities(bank.server, reads={"statement"}) as tools:
        steps: list[Step] = [ToolCalls([Call("statement")]), Reply("here it is")]
        model = ScriptedModel([Script("", steps)])
        agent = Agent(model=model, capabilities=list(tools), store=store, authorize=allow_all)
        events = await collect(agent.run("my statement", principal="alice"))
    run_id = events[0].run_id
    stored = "\n".join(encode_event(e) for e in await store.read_events(run_id))
    audit = "\n".join(repr(a) for a in await store.audit_records(run_id))
    requests = "\n".join(repr(r) for r in model.requests)
    assert "Alice" in stored
    assert "Alice" in requests
    for seen in (stored, audit, requests):
        assert SECRET not in seen


async def test_two_servers_with_the_same_tool_names_need_a_prefix(bank: Bank) -> None:
    twin = McpServer(
        "twin",
        command=bank.server.command,
        args=bank.server.args,
        env=bank.server.env,
        cwd=bank.server.cwd,
        url=bank.server.url,
    )
    with pytest.raises(ConfigurationError) as refused:
        await mcp_capabilities([bank.server, twin])
    assert "'bank' and 'twin'" in str(refused.value)
    assert "prefix" in str(refused.value)
    prefixed = McpServer(
        "twin",
        command=twin.command,
        args=twin.args,
        env=twin.env,
        cwd=twin.cwd,
        url=twin.url,
        prefix="twin_",
    )
    async with await mcp_capabilities([bank.server, prefixed]) as both:
        assert {"transfer", "twin_transfer"} <= set(both.names)


async def test_a_write_that_times_out_is_unknown_and_never_retried(
    bank: Bank, store: Store
) -> None:
    async with await mcp_capabilities(bank.server, timeout=1.0) as tools:
        steps: list[Step] = [ToolCalls([Call("hang", {"note": "x"})]), Reply("checked")]
        agent = scripted_agent(store, list(tools), steps)
        events = await collect(agent.run("go", principal="alice"))
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        await agent.approve(pending.approval_id, by="alice")
        resumed = await collect(agent.resume(events[0].run_id))
    end = _ends(resumed)["hang"]
    assert end.is_error
    assert end.error_code == "timeout"
    assert "unknown" in end.output
    audits = [a for a in await store.audit_records(events[0].run_id) if a.capability == "hang"]
    assert audits[-1].outcome == "unknown"
    assert resumed[-1].type == "run_completed"


async def test_a_server_killed_mid_call_leaves_the_outcome_unknown_and_the_run_completes(
    bank: Bank, store: Store
) -> None:
    async with await mcp_capabilities(bank.server, reads={"rates"}) as tools:
        steps: list[Step] = [
            ToolCalls([Call("hang", {"note": "x"})]),
            ToolCalls([Call("rates", {"currency": "EUR"})]),
            Reply("done"),
        ]
        agent = scripted_agent(store, list(tools), steps)
        events = await collect(agent.run("go", principal="alice"))
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        await agent.approve(pending.approval_id, by="alice")

        async def kill_when_in_flight() -> None:
            # another process writes it: polled
            while not bank.marker.exists() or not bank.marker.read_text():  # noqa: ASYNC110
                await anyio.sleep(0.02)
            os.kill(int(bank.marker.read_text()), signal.SIGKILL)

        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_when_in_flight)
            resumed = await collect(agent.resume(events[0].run_id))
    ends = _ends(resumed)
    assert ends["hang"].is_error
    assert "unknown" in ends["hang"].output
    # the read right after: answered (reconnected) or refused at once; never a hang
    assert not ends["rates"].is_error or "mcp_unavailable" in ends["rates"].output
    assert resumed[-1].type == "run_completed"


async def test_a_dead_server_answers_a_refusal_at_once(tmp_path: Path, store: Store) -> None:
    from .conftest import start_http_bank

    process, url = start_http_bank({**os.environ, "PYTHONPATH": str(Path.cwd())})
    try:
        tools = await mcp_capabilities(McpServer.http("bank", url), reads={"rates"})
    finally:
        process.kill()
        process.wait()
    async with tools:
        steps: list[Step] = [
            ToolCalls([Call("rates", {"currency": "EUR"})]),
            ToolCalls([Call("rates", {"currency": "USD"})]),
            Reply("down"),
        ]
        events = await collect(
            scripted_agent(store, list(tools), steps).run("rates", principal="alice")
        )
    outputs = [e.output for e in events if isinstance(e, ToolCallEnd)]
    assert len(outputs) == 2
    assert all("mcp_unavailable" in o for o in outputs), outputs
    assert events[-1].type == "run_completed"


async def test_servers_from_a_toml_configuration(bank: Bank, tmp_path: Path) -> None:
    from fiduciary.mcp import mcp_capabilities_from_config

    server = bank.server
    where = (
        (
            f"command = {json.dumps(server.command)}\nargs = {json.dumps(list(server.args))}\n"
            f"cwd = {json.dumps(server.cwd)}\nenv = {json.dumps(dict(server.env or {}))}\n"
            if server.command is not None
            else f"url = {json.dumps(server.url)}\n"
        )
        .replace('": "', '" = "')
        .replace("{", "{ ")
        .replace("}", " }")
    )
    path = tmp_path / "server.toml"
    for prefix in ("", "b_"):
        path.write_text(
            f'[[mcp]]\nname = "bank"\n{where}reads = ["rates"]\n'
            f'[mcp.operations.transfer]\noperation = "send"\namount = "amount"\n'
            f'[[mcp]]\nname = "twin"\nprefix = "{prefix}"\n{where}',
            encoding="utf-8",
        )
        if not prefix:
            with pytest.raises(ConfigurationError, match="'bank' and 'twin'"):
                await mcp_capabilities_from_config(path)
            continue
        async with await mcp_capabilities_from_config(path) as tools:
            by_name = {c.name: c for c in tools}
    assert by_name["rates"].kind is Kind.READ
    assert by_name["transfer"].operation == "send"
    assert by_name["b_rates"].kind is Kind.EXECUTE  # the twin declared no reads


async def test_a_servers_prompts_are_skills(bank: Bank) -> None:
    async with await mcp_capabilities(bank.server) as tools:
        skills = await tools.skills()
    assert [s.name for s in skills] == ["careful-transfer"]
    assert skills[0].description == "Check the balance before any transfer."
    assert skills[0].body == "1. balance first.\n2. then transfer."


async def test_a_servers_prompt_is_a_skill_of_the_agent_like_any_other(
    bank: Bank, store: Store
) -> None:
    steps: list[Step] = [ToolCalls([Call("use_skill")]), Reply("Done.")]
    async with await mcp_capabilities(bank.server, reads={"rates"}) as tools:
        model = ScriptedModel([Script("", steps)])
        agent = Agent(
            model=model,
            capabilities=[*tools],
            skills=await tools.skills(),
            store=store,
            authorize=allow_all,
        )
        events = await collect(agent.run("move money", principal="alice", skill="careful-transfer"))
    listed = json.loads(_ends(events)["use_skill"].output)
    assert listed["skills"] == [
        {"name": "careful-transfer", "description": "Check the balance before any transfer."}
    ]
    for request in model.requests:  # the prompt's text is the skill layer of every call
        (layer,) = [s for s in request.system if s.startswith('<skill name="careful-transfer">')]
        assert "1. balance first.\n2. then transfer." in layer

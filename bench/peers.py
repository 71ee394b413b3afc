"""Benchmark: the loop's scenario through fiduciary and through peer agent frameworks.

Scenario (the one of ``bench/loop.py``): three model calls with a zero-latency scripted model —
turn 1 asks for two reads in parallel, turn 2 for one write, turn 3 gives the final text — and
the same handler functions behind the tools. Each system runs it with its own scripted model:

- fiduciary: ``ScriptedModel``, on ``SQLiteStore`` (durable) and on ``MemoryStore``;
- LangGraph: a ``StateGraph`` (model node, ``ToolNode``, ``tools_condition``) over a
  ``BaseChatModel`` that emits the tool calls, checkpointed by ``SqliteSaver`` on a temporary
  file (sync ``invoke``; its tools run in LangGraph's thread pool) and by ``AsyncSqliteSaver``
  (``ainvoke``, async tools);
- Pydantic AI: ``FunctionModel`` (in memory);
- OpenAI Agents SDK: a ``Model`` subclass returning scripted responses, tracing disabled (in
  memory).

No network. Each peer is optional (``pip install 'fiduciary[bench]'``); a missing one is
reported and skipped. For ``--rounds`` rounds, ``--runs`` runs of each system in turn; the
median ms/run of each system over the rounds, and its ratio to fiduciary on SQLite.

    python bench/peers.py [--rounds 5] [--runs 60]

Ends with one line of JSON: each system's ms_per_run and ratio_to_fiduciary_sqlite.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

from fiduciary.stores.memory import MemoryStore
from fiduciary.stores.sqlite import SQLiteStore
from workload import FINAL, MESSAGE, balance_fn, fiduciary_batch, make_agent, rate_fn, save_fn

INSTALL = "not installed: pip install 'fiduciary[bench]'"


@dataclass
class System:
    """n runs of the scenario; a check of one run (tools called, final text); a close."""

    batch: Callable[[int], Awaitable[None]]
    check: Callable[[], Awaitable[None]] | None = None
    close: Callable[[], Awaitable[Any]] | None = None


def tool_outputs_expected(count: int, final: str, system: str) -> None:
    """Every peer's run must have called 3 tools and ended with the final text."""
    if count != 3 or final != FINAL:
        raise AssertionError(f"{system}: {count} tool outputs, final {final!r}")


# the tools of the peers: loop.py's handlers under the names and docstrings of its capabilities


async def balance(account: str = "main") -> dict[str, str]:
    """The balance."""
    return await balance_fn(account)


async def rate(currency: str = "EUR") -> dict[str, str]:
    """An exchange rate."""
    return await rate_fn(currency)


async def save(amount: str) -> dict[str, str]:
    """Save money."""
    return await save_fn(amount)


TOOLS: list[Callable[..., Awaitable[dict[str, str]]]] = [balance, rate, save]


# --- fiduciary ------------------------------------------------------------------------------


def fiduciary_system(store: Any) -> System:
    agent = make_agent(store)

    async def batch(n: int) -> None:
        await fiduciary_batch(agent, n)

    return System(batch)


# --- Pydantic AI ----------------------------------------------------------------------------


def pydantic_ai_system() -> System:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def scripted(messages: list[Any], info: AgentInfo) -> Any:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn == 0:
            return ModelResponse(parts=[ToolCallPart("balance", {}), ToolCallPart("rate", {})])
        if turn == 1:
            return ModelResponse(parts=[ToolCallPart("save", {"amount": "5"})])
        return ModelResponse(parts=[TextPart(FINAL)])

    agent: Any = Agent(FunctionModel(scripted), tools=TOOLS)

    async def one() -> Any:
        return await agent.run(MESSAGE)

    async def batch(n: int) -> None:
        for _ in range(n):
            await one()

    async def check() -> None:
        result = await one()
        returns = [
            p
            for m in result.all_messages()
            for p in getattr(m, "parts", [])
            if isinstance(p, ToolReturnPart)
        ]
        tool_outputs_expected(len(returns), result.output, "pydantic_ai")

    return System(batch, check)


# --- OpenAI Agents SDK ----------------------------------------------------------------------


def openai_agents_system() -> System:
    from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
    from agents.models.interface import Model
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)

    def call(name: str, arguments: str) -> Any:
        return ResponseFunctionToolCall(
            id=f"fc_{uuid4().hex}",
            call_id=f"call_{uuid4().hex}",
            name=name,
            arguments=arguments,
            type="function_call",
            status="completed",
        )

    class ScriptedAgentsModel(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            items = kwargs["input"] if "input" in kwargs else args[1]
            outputs = sum(
                (i.get("type") if isinstance(i, dict) else getattr(i, "type", None))
                == "function_call_output"
                for i in (items if isinstance(items, list) else [])
            )
            output: list[Any]
            if outputs == 0:
                output = [call("balance", "{}"), call("rate", "{}")]
            elif outputs == 2:
                output = [call("save", '{"amount": "5"}')]
            else:
                text = ResponseOutputText(text=FINAL, type="output_text", annotations=[])
                output = [
                    ResponseOutputMessage(
                        id=f"msg_{uuid4().hex}",
                        content=[text],
                        role="assistant",
                        status="completed",
                        type="message",
                    )
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the bench does not stream")

    agent: Any = Agent(
        name="bench", model=ScriptedAgentsModel(), tools=[function_tool(f) for f in TOOLS]
    )

    async def one() -> Any:
        return await Runner.run(agent, MESSAGE)

    async def batch(n: int) -> None:
        for _ in range(n):
            await one()

    async def check() -> None:
        result = await one()
        outputs = [i for i in result.new_items if i.type == "tool_call_output_item"]
        tool_outputs_expected(len(outputs), result.final_output, "openai_agents")

    return System(batch, check)


# --- LangGraph ------------------------------------------------------------------------------


def langgraph_graph(checkpointer: Any, sync: bool) -> Any:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import StructuredTool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    def reply(messages: list[Any]) -> Any:
        outputs = sum(isinstance(m, ToolMessage) for m in messages)
        if outputs == 0:
            calls = [
                {"name": "balance", "args": {}, "id": f"call_{uuid4().hex}"},
                {"name": "rate", "args": {}, "id": f"call_{uuid4().hex}"},
            ]
        elif outputs == 2:
            calls = [{"name": "save", "args": {"amount": "5"}, "id": f"call_{uuid4().hex}"}]
        else:
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=FINAL))])
        message = AIMessage(content="", tool_calls=calls)
        return ChatResult(generations=[ChatGeneration(message=message)])

    class ScriptedChatModel(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            return reply(messages)

        async def _agenerate(self, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            return reply(messages)

    def balance_sync(account: str = "main") -> dict[str, str]:
        return {"account": account, "usd": "250.00"}

    def rate_sync(currency: str = "EUR") -> dict[str, str]:
        return {"currency": currency, "usd": "1.08"}

    def save_sync(amount: str) -> dict[str, str]:
        return {"saved": amount}

    sync_tools: list[Callable[..., dict[str, str]]] = [balance_sync, rate_sync, save_sync]
    # sync: the same results as loop.py's handlers, as plain functions (a sync graph cannot
    # await them); async: loop.py's handlers themselves
    tools: list[Any] = [
        StructuredTool.from_function(
            func=func if sync else None,
            coroutine=None if sync else coro,
            name=coro.__name__,
            description=coro.__doc__ or "",
        )
        for func, coro in zip(sync_tools, TOOLS, strict=True)
    ]
    model = ScriptedChatModel()

    def call_model(state: Any) -> Any:
        return {"messages": [model.invoke(state["messages"])]}

    async def acall_model(state: Any) -> Any:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder: Any = StateGraph(MessagesState)
    builder.add_node("model", call_model if sync else acall_model)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


def check_langgraph(state: Any, system: str) -> None:
    from langchain_core.messages import ToolMessage

    messages = state["messages"]
    outputs = sum(isinstance(m, ToolMessage) for m in messages)
    tool_outputs_expected(outputs, messages[-1].content, system)


def langgraph_sqlite_system(path: Path) -> System:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    connection = sqlite3.connect(path, check_same_thread=False)
    graph = langgraph_graph(SqliteSaver(connection), sync=True)

    def one() -> Any:
        config = {"configurable": {"thread_id": str(uuid4())}}
        return graph.invoke({"messages": [("user", MESSAGE)]}, config)

    async def batch(n: int) -> None:
        for _ in range(n):
            one()

    async def check() -> None:
        check_langgraph(one(), "langgraph_sqlite")

    return System(batch, check)


async def langgraph_aiosqlite_system(path: Path) -> System:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    connection: Any = await aiosqlite.connect(path)
    graph = langgraph_graph(AsyncSqliteSaver(connection), sync=False)

    async def one() -> Any:
        config = {"configurable": {"thread_id": str(uuid4())}}
        return await graph.ainvoke({"messages": [("user", MESSAGE)]}, config)

    async def batch(n: int) -> None:
        for _ in range(n):
            await one()

    async def check() -> None:
        check_langgraph(await one(), "langgraph_aiosqlite")

    return System(batch, check, connection.close)


# --- the bench ------------------------------------------------------------------------------


async def main(rounds: int, runs: int) -> dict[str, Any]:
    tmp = tempfile.TemporaryDirectory()
    directory = Path(tmp.name)
    sqlite_store = SQLiteStore(directory / "fiduciary.sqlite3")
    systems: dict[str, System] = {
        "fiduciary_sqlite": fiduciary_system(sqlite_store),
        "fiduciary_memory": fiduciary_system(MemoryStore()),
    }
    skipped: dict[str, str] = {}
    peers: list[tuple[str, Callable[[], Any]]] = [
        ("langgraph_sqlite", lambda: langgraph_sqlite_system(directory / "langgraph.sqlite3")),
        ("langgraph_aiosqlite", lambda: langgraph_aiosqlite_system(directory / "lg-aio.sqlite3")),
        ("pydantic_ai", pydantic_ai_system),
        ("openai_agents", openai_agents_system),
    ]
    for name, build in peers:
        try:
            built = build()
            if asyncio.iscoroutine(built):
                built = await built
        except ImportError as exc:
            skipped[name] = f"{INSTALL} ({exc.name})"
            print(f"{name}: {skipped[name]}")
            continue
        systems[name] = built
    # warm up every path (imports, schemas, caches), and check that each run does the scenario
    for system in systems.values():
        if system.check is not None:
            await system.check()
        await system.batch(3)
    times: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(rounds):
        for name, system in systems.items():
            gc.collect()
            t0 = time.perf_counter()
            await system.batch(runs)
            times[name].append((time.perf_counter() - t0) * 1000 / runs)
    for system in systems.values():
        if system.close is not None:
            await system.close()
    await sqlite_store.close()
    tmp.cleanup()

    base = statistics.median(times["fiduciary_sqlite"])
    result: dict[str, Any] = {"bench": "peers", "rounds": rounds, "runs": runs, "systems": {}}
    print(f"scenario: 2 parallel reads, 1 write, final text; median of {rounds} rounds of {runs}")
    for name, per_round in times.items():
        ms = statistics.median(per_round)
        ratio = ms / base
        spread = f"{min(per_round):.2f}-{max(per_round):.2f}"
        print(f"  {name:<20} {ms:>7.2f} ms/run ({spread})  {ratio:>5.2f}x fiduciary SQLite")
        result["systems"][name] = {
            "ms_per_run": round(ms, 3),
            "ratio_to_fiduciary_sqlite": round(ratio, 2),
        }
    for name, reason in skipped.items():
        result["systems"][name] = {"skipped": reason}
    return result


if __name__ == "__main__":
    warnings.simplefilter("ignore", DeprecationWarning)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.rounds, args.runs))))

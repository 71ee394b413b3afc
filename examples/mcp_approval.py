"""An external MCP server's tool behind fiduciary's approval card.

A tiny bank MCP server (written with the official SDK, started here as a child process over
stdio) offers ``balance`` and ``transfer``. fiduciary connects to it with
``mcp_capabilities``: ``balance`` is declared a read, ``transfer`` stays a write, so the
model's transfer waits on a card for a person; approved, it runs once.

    python examples/mcp_approval.py          # asks you on the terminal
    python examples/mcp_approval.py --yes    # approves for you
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from rich.console import Console

from fiduciary import Agent, PendingAction, ToolCallEnd
from fiduciary.cli.terminal import pending_card
from fiduciary.mcp import McpServer, mcp_capabilities
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all


def bank_server() -> None:
    """The external server: any MCP server would do."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bank")

    @server.tool()
    def balance(account: str) -> dict[str, str]:
        """The balance of an account, in USD."""
        return {"account": account, "usd": "250.00"}

    @server.tool()
    def transfer(to: str, amount: float) -> str:
        """Transfer USD to someone."""
        return f"sent {amount} USD to {to}"

    server.run("stdio")


async def main(yes: bool, out: Console) -> int:
    bank = McpServer.stdio("bank", sys.executable, __file__, "--serve-bank")
    async with await mcp_capabilities(bank, reads={"balance"}) as tools:
        script = Script(
            "",
            [
                ToolCalls([Call("balance", {"account": "main"})]),
                ToolCalls([Call("transfer", {"to": "bob", "amount": 40})]),
                Reply(lambda results: f"Done: {results['transfer']['text']}."),
            ],
        )
        agent = Agent(
            model=ScriptedModel([script]),
            capabilities=list(tools),
            authorize=allow_all,  # a demo: the host's own check goes here
        )
        events = [e async for e in agent.run("send bob $40", principal="alice")]
        for pending in (e for e in events if isinstance(e, PendingAction)):
            out.print(pending_card(pending))
            answer = "y" if yes else (await asyncio.to_thread(input, "approve? [y/N] ")).lower()
            if answer != "y":
                await agent.deny(pending.approval_id, by="alice", reason="not now")
            else:
                await agent.approve(pending.approval_id, by="alice")
            events += [e async for e in agent.resume(pending.run_id)]
    for end in (e for e in events if isinstance(e, ToolCallEnd)):
        out.print(f"{end.name}: {end.output}", markup=False)
    out.print(events[-1].type)
    return 0 if events[-1].type == "run_completed" else 1


if __name__ == "__main__":
    if "--serve-bank" in sys.argv:
        bank_server()
        raise SystemExit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--yes", action="store_true", help="approve without asking")
    raise SystemExit(asyncio.run(main(parser.parse_args().yes, Console())))

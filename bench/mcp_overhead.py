"""MCP overhead (bench/mcp_overhead.py; not mcp.py, which would shadow the SDK for mypy and
scripts): one read through fiduciary's MCP server (stdio, streamable HTTP) against the
same capability called in-process, in one run.

Four ways to read ``balance`` (the test agent's read, a SQLite file as the store):

- ``direct``: the capability's handler called in-process (no gates, no run): the baseline;
- ``gateway``: ``McpGateway.call`` in-process: a run through every gate, stored and audited;
- ``stdio``: the SDK's client against ``fiduciary mcp`` in a child process;
- ``http``: the SDK's client against ``fiduciary serve``'s ``/mcp`` (uvicorn on 127.0.0.1, in
  this process: client and server share one event loop and one core).

Each prints calls/s, p50 and p99 latency and its time ratio to ``direct``; the last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402
from tests.unit.mcp.served_agent import balance, mcp_agent  # noqa: E402

from fiduciary import Principal  # noqa: E402
from fiduciary.mcp import McpGateway  # noqa: E402
from fiduciary.server.app import create_app  # noqa: E402
from fiduciary.server.auth import MemoryKeyStore  # noqa: E402
from fiduciary.stores.sqlite import SQLiteStore  # noqa: E402

AGENT = "tests.unit.mcp.served_agent:mcp_agent"


async def timed(n: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    for _ in range(min(20, n)):  # warm-up
        await call()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        times.append(time.perf_counter() - start)
    return times


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def main(n: int) -> dict[str, Any]:
    import uvicorn

    tmp = tempfile.TemporaryDirectory()
    db = Path(tmp.name) / "bench.sqlite3"
    store = SQLiteStore(db)
    agent = mcp_agent(store)
    results: dict[str, list[float]] = {}

    async def direct() -> Any:
        return balance.handler(account="main")

    results["direct"] = await timed(n, direct)

    gateway = McpGateway(agent)
    alice = Principal("alice")

    async def through_gateway() -> Any:
        outcome = await gateway.call(alice, "balance", {"account": "main"})
        assert outcome.status == "done", outcome
        return outcome

    results["gateway"] = await timed(n, through_gateway)

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "fiduciary", "mcp", "--agent", AGENT, "--principal", "alice", "--db", str(db)],
        env={"PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )
    async with Client(params, cache=None) as client:

        async def over_stdio() -> Any:
            answer = await client.call_tool("balance", {"account": "main"})
            assert not answer.is_error, answer
            return answer

        results["stdio"] = await timed(n, over_stdio)

    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:read", "runs:write"])
    app = create_app(agent, keys=keys, resume_on_start=False)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    serving = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
        await asyncio.sleep(0.01)
    http = create_mcp_http_client(headers={"authorization": f"Bearer {key}"})
    url = f"http://127.0.0.1:{port}/mcp"
    async with http, Client(streamable_http_client(url, http_client=http), cache=None) as client:

        async def over_http() -> Any:
            answer = await client.call_tool("balance", {"account": "main"})
            assert not answer.is_error, answer
            return answer

        results["http"] = await timed(n, over_http)
    server.should_exit = True
    await serving
    await store.close()
    tmp.cleanup()

    base = statistics.fmean(results["direct"])
    out: dict[str, Any] = {"bench": "mcp", "calls": n}
    print(f"one read (balance), {n} calls each, SQLite store")
    for name, times in results.items():
        mean = statistics.fmean(times)
        ordered = sorted(times)
        p50 = ordered[len(ordered) // 2] * 1000
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
        ratio = mean / base
        print(
            f"  {name:<8} {1 / mean:>9.0f} calls/s  p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  "
            f"({ratio:,.0f}x direct's time)"
        )
        out[f"{name}_calls_per_s"] = round(1 / mean, 1)
        out[f"{name}_p50_ms"] = round(p50, 3)
        out[f"{name}_p99_ms"] = round(p99, 3)
        out[f"{name}_time_ratio_to_direct"] = round(ratio, 1)
    out["stdio_time_ratio_to_gateway"] = round(
        statistics.fmean(results["stdio"]) / statistics.fmean(results["gateway"]), 2
    )
    out["http_time_ratio_to_gateway"] = round(
        statistics.fmean(results["http"]) / statistics.fmean(results["gateway"]), 2
    )
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.calls))))

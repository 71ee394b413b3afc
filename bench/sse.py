"""Benchmark: live events from one run to many SSE subscribers, against a plain socket.

Scenario: one run on a ``SQLiteStore`` whose model streams ``--events`` text deltas as fast as
it can, followed over HTTP (uvicorn, loopback) by ``--subscribers`` clients at once, from
another process (so that the clients do not share the server's event loop). The clients speak
raw HTTP/1.1 and note when each event's ``id:`` arrives (``time.monotonic``, comparable across
processes). The commit time of an event is when a listener subscribed to the store first (before
any SSE client) receives it: the moment its commit was published.

Baseline, in the same run: a plain asyncio TCP server in this process writes the same SSE bytes
(the frames fiduciary sent) to the same number of connections of the same client code:
- throughput: all the bytes in one write per connection, the floor of delivering them (the
  clients still read and parse every event, as they do fiduciary's);
- delay: each commit's events written at the offset (from the first) at which fiduciary
  committed them, for the delay from write to arrival (p50/p99) under the same load shape.

    python bench/sse.py [--subscribers 100] [--events 3000] [--rounds 2] [--pace 200]
                        [--paced-events 600] [--coalesce 0]

Ends with one line of JSON: events/s and delays of fiduciary and the baseline, and the ratios
(fiduciary's events/s over the socket's; fiduciary's p50/p99 delay over the socket's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import re
import socket
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from uuid import UUID

from fiduciary import Agent
from fiduciary.events import RunCompleted
from fiduciary.models.base import ModelEvent, ModelRequest
from fiduciary.server import MemoryKeyStore, Server, create_app
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Reply, Script, ScriptedModel, allow_all

ID = re.compile(rb"(?:^|\n)id: (\d+)\n")
Timings = list[list[tuple[int, float]]]  # per client: (seq, arrival)


# --- the clients (another process) --------------------------------------------------------


class _Client(asyncio.Protocol):
    """One subscriber: notes when each ``id:`` arrives; cheap (a protocol, not a stream)."""

    def __init__(self, request: bytes, ready: asyncio.Queue[int], done: asyncio.Future[None]):
        self.request = request
        self.ready = ready
        self.done = done
        self.got: list[tuple[int, float]] = []
        self.buffer = b""
        self.opened = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self.buffer += data
        cut = self.buffer.rfind(b"\n\n")
        if cut < 0:
            return
        complete, self.buffer = self.buffer[: cut + 2], self.buffer[cut + 2 :]
        if not self.opened and b"retry: " in complete:
            self.opened = True
            self.ready.put_nowait(0)
        self.got.extend((int(m[1]), now) for m in ID.finditer(complete))
        if b"event: run_completed" in complete and not self.done.done():
            self.done.set_result(None)
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def _clients(host: str, port: int, path: str, key: str, count: int, pipe: Connection) -> None:
    request = (
        f"GET {path} HTTP/1.1\r\nhost: {host}:{port}\r\nauthorization: Bearer {key}\r\n"
        "accept: text/event-stream\r\n\r\n"
    ).encode()
    loop = asyncio.get_running_loop()
    ready: asyncio.Queue[int] = asyncio.Queue()
    clients: list[_Client] = []
    for _ in range(count):
        client = _Client(request, ready, loop.create_future())
        await loop.create_connection(lambda c=client: c, host, port)  # type: ignore[misc]
        clients.append(client)
    for _ in range(count):
        await ready.get()
    pipe.send("ready")
    await asyncio.gather(*(c.done for c in clients))
    pipe.send([c.got for c in clients])


def clients_main(host: str, port: int, path: str, key: str, count: int, pipe: Connection) -> None:
    asyncio.run(_clients(host, port, path, key, count, pipe))


def start_clients(
    port: int, path: str, key: str, count: int
) -> tuple[multiprocessing.process.BaseProcess, Connection]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=clients_main, args=("127.0.0.1", port, path, key, count, child))
    process.start()
    return process, parent


async def receive(pipe: Connection) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, pipe.recv)


# --- fiduciary ----------------------------------------------------------------------------


class GatedModel:
    """A scripted model that starts streaming when ``go`` is set: flat out, or ``per_second``
    text deltas a second (a model's pace)."""

    def __init__(self, events: int, per_second: float | None) -> None:
        text = "x" * (8 * events)
        self.inner = ScriptedModel([Script("stream", [Reply(text, chunk_chars=8)])])
        self.go = asyncio.Event()
        self.per_second = per_second

    @property
    def name(self) -> str:
        return "scripted"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        await self.go.wait()
        start = time.monotonic()
        sent = 0
        async for item in self.inner.stream(request):
            if self.per_second is None:
                await asyncio.sleep(0)  # a network stream yields between chunks
            else:
                delay = start + sent / self.per_second - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                sent += 1
            yield item


class GroupingStore(SQLiteStore):
    """Notes how many events each commit held: the baseline writes the same groups."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.groups: list[int] = []

    async def commit(self, run_id: UUID, **kwargs: Any) -> None:
        await super().commit(run_id, **kwargs)
        if kwargs.get("events"):
            self.groups.append(len(kwargs["events"]))


def listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock


@dataclass
class Measured:
    events: int
    seconds: float
    delays: list[float]
    frames: list[tuple[int, bytes]]
    commit_offsets: dict[int, float]
    groups: list[list[tuple[int, bytes]]]

    @property
    def rate(self) -> float:
        return self.events / self.seconds


async def run_fiduciary(
    directory: Path,
    subscribers: int,
    events: int,
    per_second: float | None,
    coalesce: float = 0.01,
) -> Measured:
    import uvicorn

    store = GroupingStore(directory / f"sse-{time.monotonic_ns()}.sqlite3")
    model = GatedModel(events, per_second)
    agent = Agent(model=model, capabilities=[], store=store, authorize=allow_all)
    keys = MemoryKeyStore()
    key, _ = await keys.create("bench", ["runs:read", "runs:write"])
    app = create_app(
        agent, keys=keys, subscriber_buffer=max(1000, events * 2), coalesce_seconds=coalesce
    )
    server: Server = app.state.server
    sock = listening_socket()
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(uv.serve(sockets=[sock]))
    committed: dict[int, float] = {}
    try:
        from fiduciary import Principal

        first = await server.drives.start("stream please", Principal("bench"))
        run_id: UUID = first.run_id
        sub = store.subscribe(run_id, buffer=events * 4)  # first listener: publish time

        async def note_commits() -> None:
            async for event in sub:
                committed[event.seq] = time.monotonic()
                if isinstance(event, RunCompleted):
                    return

        noter = asyncio.create_task(note_commits())
        port = sock.getsockname()[1]
        process, pipe = start_clients(port, f"/runs/{run_id}/events?after=2", key, subscribers)
        assert await receive(pipe) == "ready"
        model.go.set()
        timings: Timings = await receive(pipe)
        process.join(30)
        await noter
        log = await store.read_events(run_id, after_seq=2)
        frames = [(e.seq, _frame(e)) for e in log]
        sizes = store.groups  # the first two events were committed by create_run
    finally:
        uv.should_exit = True
        await serving
        await store.close()
    groups: list[list[tuple[int, bytes]]] = []
    at = 0
    for size in sizes:
        groups.append(frames[at : at + size])
        at += size
    assert at == len(frames), (at, len(frames))
    start = min(committed.values())
    return _measure(timings, committed, frames, start, len(log), groups)


def _frame(event: Any) -> bytes:
    from fiduciary.events import encode_sse

    return encode_sse(event).encode()


def _measure(
    timings: Timings,
    sent: dict[int, float],
    frames: list[tuple[int, bytes]],
    start: float,
    count: int,
    groups: list[list[tuple[int, bytes]]],
) -> Measured:
    for got in timings:
        assert [s for s, _ in got] == [s for s, _ in frames], "a client missed or repeated events"
    end = max(got[-1][1] for got in timings)
    delays = [t - sent[seq] for got in timings for seq, t in got]
    offsets = {seq: t - start for seq, t in sent.items()}
    return Measured(count, end - start, delays, frames, offsets, groups)


# --- the plain socket ---------------------------------------------------------------------


async def run_socket(
    groups: list[list[tuple[int, bytes]]], subscribers: int, pace: dict[int, float] | None
) -> Measured:
    """The same frames: all in one write per connection (the floor), or each commit's group
    at the offset fiduciary committed it."""
    writers: list[asyncio.StreamWriter] = []
    connected = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\nretry: 2000\n\n")
        await writer.drain()
        writers.append(writer)
        if len(writers) == subscribers:
            connected.set()

    sock = listening_socket()
    server = await asyncio.start_server(handle, sock=sock)
    sent: dict[int, float] = {}
    frames = [frame for group in groups for frame in group]
    async with server:
        process, pipe = start_clients(sock.getsockname()[1], "/events", "-", subscribers)
        await connected.wait()
        assert await receive(pipe) == "ready"
        start = time.monotonic()
        if pace is None:
            # flat out: every event's bytes in one write per connection, the floor of sending
            # them (what the clients must still read and parse, fiduciary's clients too)
            data = b"".join(frame for _, frame in frames)
            for seq, _ in frames:
                sent[seq] = start
            for writer in writers:
                writer.write(data)
            await asyncio.gather(*(w.drain() for w in writers))
        else:
            for group in groups:  # each commit's events when fiduciary committed them
                delay = start + pace[group[0][0]] - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                now = time.monotonic()
                data = b"".join(frame for _, frame in group)
                for seq, _ in group:
                    sent[seq] = now
                for writer in writers:
                    writer.write(data)
                    if writer.transport.get_write_buffer_size() > 1 << 16:
                        await writer.drain()
        timings: Timings = await receive(pipe)
        process.join(30)
        for writer in writers:
            writer.close()
    return _measure(timings, sent, frames, start, len(frames), groups)


# --- main ---------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(
    subscribers: int,
    events: int,
    rounds: int,
    per_second: float,
    paced_events: int,
    coalesce: float,
) -> dict[str, Any]:
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            # throughput: the model streams flat out; the socket writes the bytes in one go
            flat = await run_fiduciary(Path(tmp), subscribers, events, None, coalesce)
            fast = await run_socket(flat.groups, subscribers, None)
            # delay: the model streams at a model's pace; the socket writes at the same offsets
            paced = await run_fiduciary(Path(tmp), subscribers, paced_events, per_second, coalesce)
            same = await run_socket(paced.groups, subscribers, paced.commit_offsets)
            rows.append(
                {
                    "fid_rate": flat.rate,
                    "sock_rate": fast.rate,
                    "fid_p50": pct(paced.delays, 0.5),
                    "fid_p99": pct(paced.delays, 0.99),
                    "sock_p50": pct(same.delays, 0.5),
                    "sock_p99": pct(same.delays, 0.99),
                    "fid_flat_p50": pct(flat.delays, 0.5),
                    "sock_flat_p50": pct(fast.delays, 0.5),
                    "per_commit": (events + 3) / len(flat.groups),
                }
            )
    best = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(
        f"one run, {subscribers} SSE subscribers over loopback HTTP, clients in another process; "
        f"medians of {rounds} rounds"
    )
    print(
        f"throughput ({events + 3} events, {best['per_commit']:.1f} per commit): fiduciary "
        f"{best['fid_rate']:,.0f} events/s to every subscriber "
        f"({best['fid_rate'] * subscribers:,.0f} deliveries/s); plain socket, the same bytes "
        f"in one write: {best['sock_rate']:,.0f} events/s"
    )
    print(
        f"  (flat out, delays are queueing: fiduciary p50 {best['fid_flat_p50'] * 1e3:.0f} ms, "
        f"socket p50 {best['sock_flat_p50'] * 1e3:.0f} ms)"
    )
    print(
        f"delay ({paced_events + 3} events at {per_second:,.0f}/s): fiduciary commit -> arrival "
        f"p50 {best['fid_p50'] * 1e3:.2f} ms, p99 {best['fid_p99'] * 1e3:.2f} ms; plain socket "
        f"write -> arrival p50 {best['sock_p50'] * 1e3:.2f} ms, p99 {best['sock_p99'] * 1e3:.2f} ms"
    )
    result = {
        "bench": "sse",
        "subscribers": subscribers,
        "events": events + 3,
        "fiduciary_events_per_s": round(best["fid_rate"]),
        "socket_events_per_s": round(best["sock_rate"]),
        "rate_ratio": round(best["fid_rate"] / best["sock_rate"], 3),
        "paced_events_per_s": per_second,
        "fiduciary_p50_ms": round(best["fid_p50"] * 1e3, 2),
        "fiduciary_p99_ms": round(best["fid_p99"] * 1e3, 2),
        "socket_p50_ms": round(best["sock_p50"] * 1e3, 3),
        "socket_p99_ms": round(best["sock_p99"] * 1e3, 3),
        "p50_ratio": round(best["fid_p50"] / best["sock_p50"], 1),
        "p99_ratio": round(best["fid_p99"] / best["sock_p99"], 1),
        "coalesce_ms": coalesce * 1e3,
        "rounds": rounds,
    }
    print(
        f"ratios: events/s {result['rate_ratio']} of the socket's; delay "
        f"p50 {result['p50_ratio']}x, p99 {result['p99_ratio']}x the socket's"
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--events", type=int, default=3000, help="text deltas the model streams")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pace", type=float, default=200.0, help="deltas/s, delay measurement")
    parser.add_argument("--paced-events", type=int, default=600, help="deltas, delay measurement")
    parser.add_argument(
        "--coalesce", type=float, default=0.01, help="the server's coalesce_seconds"
    )
    args = parser.parse_args()
    result = main(
        args.subscribers, args.events, args.rounds, args.pace, args.paced_events, args.coalesce
    )
    print(json.dumps(asyncio.run(result)))

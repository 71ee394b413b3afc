"""A recording JSON-RPC proxy in front of anvil: it forwards each request as is and notes the
methods asked, so a test counts what a wallet asked the node from outside the wallet."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Recorder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._methods: list[str] = []
        self._called: list[str] = []  # each eth_call's 4-byte selector

    def note(self, body: bytes) -> None:
        loaded: Any = json.loads(body)
        asked = loaded if isinstance(loaded, list) else [loaded]
        with self._lock:
            self._methods += [str(r.get("method")) for r in asked if isinstance(r, dict)]
            self._called += [
                str(r["params"][0].get("data") or r["params"][0].get("input") or "")[:10]
                for r in asked
                if isinstance(r, dict) and r.get("method") == "eth_call" and r.get("params")
            ]

    def methods(self) -> list[str]:
        with self._lock:
            return list(self._methods)

    def selectors(self) -> list[str]:
        """The selector of each ``eth_call`` asked (``0x70a08231``: ``balanceOf``)."""
        with self._lock:
            return list(self._called)

    def clear(self) -> None:
        with self._lock:
            self._methods.clear()
            self._called.clear()


@contextmanager
def recording_proxy(upstream: str) -> Iterator[tuple[str, Recorder]]:
    """A proxy URL for ``upstream`` and what it recorded."""
    recorder = Recorder()

    class Forward(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            recorder.note(body)
            request = urllib.request.Request(
                upstream, data=body, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=30) as answer:
                reply = answer.read()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)

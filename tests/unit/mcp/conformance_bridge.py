"""What lets the MCP conformance suite (which speaks streamable HTTP and sends no credentials)
reach fiduciary's two MCP servers, changing nothing they answer:

- ``KeyProxy``: an HTTP proxy in front of a real ``fiduciary serve`` that adds
  ``Authorization: Bearer <key>`` and passes everything else through as it is (``Host`` and
  ``Origin`` included, so the DNS-rebinding scenario reaches ``/mcp`` as sent);
- ``StdioBridge``: streamable HTTP in front of a real ``fiduciary mcp`` process: each POSTed
  JSON-RPC message is written to its stdin as one line, and the answer with the same id is read
  from its stdout (an ``initialize`` starts a fresh process: a new session). Notifications are
  answered 202, as the transport says.

Both serve on 127.0.0.1 in a thread of the test process, until closed.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["KeyProxy", "StdioBridge"]

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection"}


class _Served:
    """A ThreadingHTTPServer on a free loopback port, served by a thread until ``close``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.http.daemon_threads = True
        self.port = int(self.http.server_address[1])
        self._thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self._thread.join(timeout=10)


def _body(handler: BaseHTTPRequestHandler) -> bytes:
    length = int(handler.headers.get("content-length") or 0)
    return handler.rfile.read(length) if length else b""


class KeyProxy(_Served):
    """``fiduciary serve``'s ``/mcp`` (``target``: its base URL), with a key added."""

    def __init__(self, target: str, key: str) -> None:
        upstream = urlsplit(target)

        class Forward(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                body = _body(self)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                headers["Authorization"] = f"Bearer {key}"
                conn = http.client.HTTPConnection(
                    upstream.hostname or "127.0.0.1", upstream.port or 80, timeout=60
                )
                try:
                    conn.putrequest(self.command, self.path, skip_host=True)
                    for name, value in headers.items():  # Host as the client sent it
                        conn.putheader(name, value)
                    conn.endheaders(body or None)
                    answer = conn.getresponse()
                    data = answer.read()
                    self.send_response(answer.status)
                    for name, value in answer.getheaders():
                        if name.lower() not in _HOP | {"content-length"}:
                            self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away first
                finally:
                    conn.close()

            def do_GET(self) -> None:
                self._forward()

            def do_POST(self) -> None:
                self._forward()

            def do_DELETE(self) -> None:
                self._forward()

        super().__init__(Forward)


class StdioBridge(_Served):
    """``command`` (a ``fiduciary mcp`` process over stdio), reached over streamable HTTP."""

    def __init__(self, command: Sequence[str], *, cwd: str, env: dict[str, str]) -> None:
        self.command = list(command)
        self.cwd = cwd
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        bridge = self

        class Relay(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                message = json.loads(_body(self) or b"null")
                answer = bridge.exchange(message)
                if answer is None:
                    self.send_response(202)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # no server-to-client stream over this bridge
                self.send_response(405)
                self.send_header("Allow", "POST")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_DELETE(self) -> None:
                self.do_GET()

        super().__init__(Relay)

    def _start(self) -> subprocess.Popen[bytes]:
        self._stop()
        self.process = subprocess.Popen(
            self.command,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        return self.process

    def _stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=30)
            for pipe in (self.process.stdin, self.process.stdout):
                if pipe is not None:
                    pipe.close()
            self.process = None

    def exchange(self, message: Any) -> Any:
        """Write ``message``; for a request, read up to the answer with its id."""
        with self.lock:
            is_request = isinstance(message, dict) and "id" in message and "method" in message
            process = self.process
            if process is None or (is_request and message["method"] == "initialize"):
                process = self._start()
            assert process.stdin is not None
            assert process.stdout is not None
            process.stdin.write(json.dumps(message).encode() + b"\n")
            process.stdin.flush()
            if not is_request:
                return None
            for line in process.stdout:  # notifications and the server's requests skipped
                answer = json.loads(line)
                if answer.get("id") == message["id"] and "method" not in answer:
                    return answer
            raise RuntimeError("the stdio server ended without answering")

    def close(self) -> None:
        super().close()
        with self.lock:
            self._stop()

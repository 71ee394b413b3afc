"""A local stand-in of the Telegram Bot API, over HTTP, for the channel's tests.

It speaks what the channel uses, as the real API does: ``POST /bot<token>/<method>`` with form
or JSON parameters (non-string values JSON-encoded), answering ``{"ok": true, "result": ...}``
or ``{"ok": false, "error_code": N, "description": "..."}``. ``getUpdates`` long-polls (waits
up to ``timeout`` seconds for an update) and forgets every update below ``offset`` (an update
is confirmed once getUpdates is called with a higher offset). ``sendMessage`` refuses text over
4096 characters (UTF-16 units) and buttons whose ``callback_data`` is over 64 bytes. A wrong
token gets 401 Unauthorized.

It runs in a thread (its own event loop; endpoints are synchronous, so a long poll blocks a
worker thread, not the loop); the test talks to it through thread-safe methods.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

BOT_USER = {"id": 123456, "is_bot": True, "first_name": "Fiduciary", "username": "fiduciary_bot"}


@dataclass
class Sent:
    chat_id: int
    message_id: int
    text: str
    reply_markup: dict[str, Any] | None


@dataclass
class BotApi:
    token: str
    updates: list[dict[str, Any]] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)
    answers: list[dict[str, Any]] = field(default_factory=list)
    edits: list[dict[str, Any]] = field(default_factory=list)
    offsets: list[int | None] = field(default_factory=list)
    delivered: list[int] = field(default_factory=list)  # update ids getUpdates returned
    next_update_id: int = 1000
    next_message_id: int = 1
    closing: bool = False

    def __post_init__(self) -> None:
        self.cond = threading.Condition()

    # --- what the test does --------------------------------------------------------------------
    def push_message(
        self, chat_id: int, text: str, *, user_id: int | None = None, chat_type: str | None = None
    ) -> int:
        """A message in ``chat_id`` from ``user_id`` (by default the chat's own user: a
        private chat's id is its user's id; a negative id is a supergroup)."""
        with self.cond:
            update_id = self.next_update_id
            self.next_update_id += 1
            self.updates.append(
                {
                    "update_id": update_id,
                    "message": {
                        "message_id": self._message_id(),
                        "date": int(time.time()),
                        "chat": _chat(chat_id, chat_type),
                        "from": _user(user_id or chat_id),
                        "text": text,
                    },
                }
            )
            self.cond.notify_all()
            return update_id

    def push_press(
        self,
        chat_id: int,
        message_id: int,
        data: str,
        *,
        user_id: int | None = None,
        chat_type: str | None = None,
    ) -> int:
        """A press on a button of message ``message_id`` in ``chat_id``, by ``user_id``
        (by default the chat's own user, as ``push_message``)."""
        with self.cond:
            update_id = self.next_update_id
            self.next_update_id += 1
            self.updates.append(
                {
                    "update_id": update_id,
                    "callback_query": {
                        "id": f"cq{update_id}",
                        "from": _user(user_id or chat_id),
                        "chat_instance": f"ci{chat_id}",
                        "data": data,
                        "message": {
                            "message_id": message_id,
                            "date": int(time.time()),
                            "chat": _chat(chat_id, chat_type),
                            "from": BOT_USER,
                            "text": "a card",
                        },
                    },
                }
            )
            self.cond.notify_all()
            return update_id

    def texts(self, chat_id: int) -> list[str]:
        with self.cond:
            return [s.text for s in self.sent if s.chat_id == chat_id]

    def cards(self, chat_id: int) -> list[Sent]:
        with self.cond:
            return [s for s in self.sent if s.chat_id == chat_id and s.reply_markup]

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> None:
        """Wait until ``predicate()`` holds (checked on each change of state)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the stand-in never saw what the test waited for")
                self.cond.wait(min(left, 0.2))

    def _message_id(self) -> int:
        self.next_message_id += 1
        return self.next_message_id

    # --- the API ---------------------------------------------------------------------------------
    def call(self, token: str, method: str, params: dict[str, Any]) -> tuple[int, Any]:
        if token != self.token:
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        handler = getattr(self, f"_{method}", None)
        if handler is None:
            return 404, {"ok": False, "error_code": 404, "description": "Not Found"}
        result = handler(params)
        if isinstance(result, tuple):
            return result
        return 200, {"ok": True, "result": result}

    def _getMe(self, params: dict[str, Any]) -> Any:  # noqa: N802 - the Bot API's names
        return BOT_USER

    def _getUpdates(self, params: dict[str, Any]) -> Any:  # noqa: N802
        offset = _int(params.get("offset"))
        timeout = float(params.get("timeout") or 0)
        deadline = time.monotonic() + timeout
        with self.cond:
            self.offsets.append(offset)
            self.cond.notify_all()
            if offset is not None:
                self.updates = [u for u in self.updates if u["update_id"] >= offset]
            while not self.updates and not self.closing:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            batch = list(self.updates[:100])
            self.delivered.extend(u["update_id"] for u in batch)
            return batch

    def _sendMessage(self, params: dict[str, Any]) -> Any:  # noqa: N802
        text = str(params.get("text", ""))
        if not text or len(text.encode("utf-16-le")) // 2 > 4096:
            return 400, _bad("message is too long" if text else "message text is empty")
        markup = _json(params.get("reply_markup"))
        for row in (markup or {}).get("inline_keyboard", []):
            for button in row:
                if len(str(button.get("callback_data", "")).encode()) > 64:
                    return 400, _bad("BUTTON_DATA_INVALID")
        chat_id = int(params["chat_id"])
        with self.cond:
            message_id = self._message_id()
            self.sent.append(Sent(chat_id, message_id, text, markup))
            self.cond.notify_all()
        message: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": _chat(chat_id, None),
            "from": BOT_USER,
            "text": text,
        }
        if markup:
            message["reply_markup"] = markup
        return message

    def _answerCallbackQuery(self, params: dict[str, Any]) -> Any:  # noqa: N802
        with self.cond:
            self.answers.append(dict(params))
            self.cond.notify_all()
        return True

    def _editMessageReplyMarkup(self, params: dict[str, Any]) -> Any:  # noqa: N802
        with self.cond:
            self.edits.append(dict(params))
            self.cond.notify_all()
        return {
            "message_id": int(params["message_id"]),
            "date": int(time.time()),
            "chat": _chat(int(params["chat_id"]), None),
            "text": "a card",
        }

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()


def _chat(chat_id: int, chat_type: str | None) -> dict[str, Any]:
    kind = chat_type or ("private" if chat_id > 0 else "supergroup")
    chat: dict[str, Any] = {"id": chat_id, "type": kind}
    if kind != "private":
        chat["title"] = f"group {chat_id}"
    return chat


def _user(user_id: int) -> dict[str, Any]:
    return {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"}


def _bad(description: str) -> dict[str, Any]:
    return {"ok": False, "error_code": 400, "description": f"Bad Request: {description}"}


def _int(value: Any) -> int | None:
    return None if value in (None, "") else int(value)


def _json(value: Any) -> Any:
    if value in (None, ""):
        return None
    return json.loads(value) if isinstance(value, str) else value


def app_for(api: BotApi) -> Starlette:
    def endpoint(request: Request, body: bytes) -> JSONResponse:
        path = request.url.path.removeprefix("/bot")
        token, _, method = path.rpartition("/")
        kind = request.headers.get("content-type", "")
        if kind.startswith("application/json"):
            params = json.loads(body or b"{}")
        else:
            params = dict(parse_qsl(body.decode(), keep_blank_values=True))
            params.update(request.query_params)
        status, payload = api.call(token, method, params)
        return JSONResponse(payload, status_code=status)

    async def route(request: Request) -> JSONResponse:
        from starlette.concurrency import run_in_threadpool

        body = await request.body()
        return await run_in_threadpool(endpoint, request, body)

    return Starlette(routes=[Route("/{path:path}", route, methods=["GET", "POST"])])


@contextmanager
def serving(api: BotApi) -> Iterator[str]:
    """Serve ``api`` on a free local port; yields its base URL (``http://127.0.0.1:N``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    server = uvicorn.Server(
        uvicorn.Config(app_for(api), log_level="critical", lifespan="off", ws="none")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        api.close()
        server.should_exit = True
        thread.join(30)
        sock.close()

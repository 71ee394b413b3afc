"""Canvases in the web console (Chromium): a chart drawn from a template shows in its frame,
and a hostile document, run in the same kind of frame, reaches nothing: not the console's page,
its key, its storage or cookies, not the top window, not the network (the server's own request
log says so), not a new window, not a form. A log holding every event type, the reserved
``pending_input`` included, renders without a script error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from fiduciary import Agent
from fiduciary.canvas import render_canvas, render_html_canvas
from fiduciary.models.scripted import Call, Reply, Script, ScriptedModel, ToolCalls
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import allow_all
from tests.contract.builders import every_event, make_run

from .served_page import PHONE, overflow, signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

MESSAGE = "show me my spending"
CHART = {
    "title": "Spending by month",
    "kind": "bar_chart",
    "labels": ["January", "February"],
    "series": [{"name": "Rent", "values": ["1250.10", "980"]}],
}

# every attempt is caught, so that the frame reports how far it got; whatever one reaches
# would show outside the frame: in the console's page, its URL, a new page or the server's log
HOSTILE = """<!doctype html><html><head>
<link rel="stylesheet" href="/pwned-stylesheet">
<style>body { background: url(/pwned-background); }</style>
</head><body>
<p id="report">not run</p>
<img src="/pwned-img">
<form id="form" action="/pwned-form" method="post"><input name="a" value="1"></form>
<script>
const KEY = "%(key)s";
const tried = [];
const waits = [];
function attempt(name, fn) {
  try {
    const out = fn();
    if (out && typeof out.then === "function") {
      const failed = (e) => tried.push(name + ":" + e.name);
      waits.push(out.then(() => tried.push(name + ":answered"), failed));
    } else tried.push(name + ":ran");
  } catch (e) { tried.push(name + ":" + e.name); }
}
attempt("parent-dom", () => parent.document.body.setAttribute("data-pwned", "parent"));
attempt("top-dom", () => top.document.body.setAttribute("data-pwned", "top"));
attempt("cookie", () => fetch("/pwned-cookie?c=" + encodeURIComponent(document.cookie)));
attempt("local-storage", () => localStorage.setItem("pwned", "1"));
attempt("session-key", () => fetch("/pwned-session?k=" + sessionStorage.getItem("fiduciary.key")));
attempt("fetch", () => fetch("/runs?pwned=fetch"));
attempt("post-with-key", () => fetch("/runs?pwned=post", { method: "POST",
  headers: { authorization: "Bearer " + KEY, "content-type": "application/json" },
  body: JSON.stringify({ message: "pwned" }) }));
attempt("xhr", () => { const x = new XMLHttpRequest(); x.open("GET", "/pwned-xhr"); x.send(); });
attempt("beacon", () => navigator.sendBeacon("/pwned-beacon", "x"));
attempt("image", () => { new Image().src = "/pwned-image"; });
attempt("websocket", () => new WebSocket("ws://" + location.host + "/pwned-ws"));
attempt("window-open", () => { const w = window.open("/pwned-open"); if (w) w.document.title; });
attempt("form-submit", () => document.getElementById("form").submit());
attempt("top-location", () => { top.location = "/pwned-top"; });
Promise.all(waits).then(() => {
  document.getElementById("report").textContent = "done " + tried.sort().join(" ");
});
</script></body></html>"""

# navigating its own frame elsewhere is not stopped by the sandbox: the console's frame-src is
NAVIGATOR = """<p>leaving</p><script>location.href = "/pwned-navigation?k=1";</script>"""


class RequestLog:
    """ASGI middleware: every request's method, path and query, as the server received it."""

    def __init__(self, app: ASGIApp, seen: list[str]) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            query = scope["query_string"].decode()
            self.seen.append(f"{scope.get('method', 'WS')} {scope['path']}?{query}")
        await self.app(scope, receive, send)


async def test_a_chart_shows_and_a_hostile_canvas_reaches_nothing(tmp_path: Path) -> None:
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
    calls = [
        Call("render_canvas", CHART),
        Call("render_html_canvas", {"title": "Hostile", "html": HOSTILE % {"key": key}}),
        Call("render_html_canvas", {"title": "Navigator", "html": NAVIGATOR}),
    ]
    script = Script(match=MESSAGE, steps=[ToolCalls(calls), Reply("Shown.")])
    store = SQLiteStore(tmp_path / "canvas.sqlite3")
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[render_canvas, render_html_canvas],
        store=store,
        authorize=allow_all,
    )
    app = create_app(agent, keys=keys, heartbeat_seconds=5)
    seen: list[str] = []
    app.add_middleware(RequestLog, seen=seen)
    try:
        async with signed_in(app, key) as shown:
            page = shown.page
            console_url = page.url
            await page.context.add_cookies([{"name": "secret", "value": "s3", "url": page.url}])
            # a violation of the console's own policy (the navigator's frame) is reported here
            await page.evaluate(
                """() => { window.violations = [];
                document.addEventListener("securitypolicyviolation",
                  (e) => window.violations.push(e.violatedDirective + " " + e.blockedURI)); }"""
            )
            await page.get_by_test_id("message").fill(MESSAGE)
            await page.get_by_test_id("send").click()
            await page.get_by_test_id("run-status").get_by_text("completed").wait_for()
            frames = page.get_by_test_id("canvas-frame")
            assert await frames.count() == 3
            for i in range(3):
                assert await frames.nth(i).get_attribute("sandbox") == "allow-scripts"

            chart = page.frame_locator('[data-testid="canvas-frame"] >> nth=0')
            await chart.get_by_text(
                "February", exact=True
            ).wait_for()  # the SVG's text, drawn in its frame
            await chart.get_by_text("Spending by month").wait_for()

            report = page.frame_locator('[data-testid="canvas-frame"] >> nth=1').locator("#report")
            await report.get_by_text("done", exact=False).wait_for()
            tried = (await report.inner_text()).split()[1:]
            assert len(tried) == 14
            # what ran harmlessly ran (a form's submit() or a blocked beacon says nothing) ...
            assert {t.split(":")[0]: t.split(":")[1] for t in tried}["parent-dom"] == (
                "SecurityError"
            )
            # ... and the outside says nothing got out
            await page.wait_for_function(
                "window.violations.some((v) => v.includes('pwned-navigation'))"
            )
            assert page.url == console_url
            assert len(page.context.pages) == 1  # no window opened
            assert await page.locator("[data-pwned]").count() == 0
            assert await page.evaluate("window.localStorage.length") == 0
            assert [s for s in seen if "pwned" in s] == []
            assert [s for s in seen if s.startswith("POST /runs?")] == ["POST /runs?"]  # ours
            assert [s for s in seen if "canvas-frame" in s] == ["GET /canvas-frame?"] * 3
            await page.set_viewport_size({"width": PHONE[0], "height": PHONE[1]})
            assert await overflow(page) == []  # a canvas fits a phone's width
    finally:
        await store.close()


async def test_a_log_of_every_event_type_renders_without_a_script_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "every.sqlite3")
    run = make_run(status="completed")
    events = every_event(run.run_id)
    await store.create_run(run, events)
    agent = Agent(model=ScriptedModel([]), capabilities=[], store=store, authorize=allow_all)
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:read"])
    app = create_app(agent, keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key) as shown:  # on leaving: no script error on the page
            page = shown.page
            await page.locator(f'#run-list li[data-run="{run.run_id}"]').click()
            waiting = page.get_by_test_id("pending-input")
            await waiting.wait_for()
            text: Any = await waiting.inner_text()
            assert "Which account should receive the refund?" in text
            await page.get_by_test_id("canvas").wait_for()
            frame = page.frame_locator('[data-testid="canvas-frame"]')
            await frame.get_by_text("March", exact=True).wait_for()
    finally:
        await store.close()

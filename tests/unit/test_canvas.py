"""Canvases: a chart or a table drawn from a template, or the model's own document, recorded as
a ``canvas`` event; the model gets a short line, never the document."""

from __future__ import annotations

import json
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from pydantic import ValidationError

from fiduciary import Agent, capability
from fiduciary.canvas import (
    CANVAS_FLAG,
    HtmlCanvas,
    TemplateCanvas,
    render_canvas,
    render_html_canvas,
)
from fiduciary.capabilities import Capability
from fiduciary.clock import ManualClock
from fiduciary.events import Canvas, ToolCallEnd, ToolCallRejected
from fiduciary.redaction import Redactor
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, collect
from tests.agent_support import make_agent

CHART: dict[str, Any] = {
    "title": "Spending <by> month",
    "kind": "bar_chart",
    "labels": ["Jan", "Feb", "<script>alert(1)</script>"],
    "series": [{"name": "Rent", "values": ["1250.10", "1250.10", "900"]}],
    "note": "Groceries & rent",
}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.texts.append(data)


def parsed(html: str) -> _Tags:
    tags = _Tags()
    tags.feed(html)
    return tags


async def drive(call: dict[str, Any], *, name: str = "render_canvas", **options: Any) -> list[Any]:
    script = Script("show", [ToolCalls([Call(name, call)]), Reply("shown")])
    agent = make_agent(
        model=ScriptedModel([script]),
        capabilities=[render_canvas, render_html_canvas],
        **options,
    )
    return await collect(agent.run("show", principal="ann"))


async def test_a_chart_is_recorded_as_a_canvas_and_the_model_gets_a_short_line() -> None:
    events = await drive(CHART)
    (canvas,) = [e for e in events if isinstance(e, Canvas)]
    (end,) = [e for e in events if isinstance(e, ToolCallEnd)]
    assert (canvas.title, canvas.kind, canvas.tool_use_id) == (
        "Spending <by> month",
        "bar_chart",
        end.tool_use_id,
    )
    assert json.loads(end.output) == {"shown": "bar_chart", "title": "Spending <by> month"}
    assert "<svg" not in end.output  # the model is not sent the drawing
    drawn = parsed(canvas.html)
    assert "script" not in drawn.tags  # the label is text, not markup
    assert "<script>alert(1)</script>" in drawn.texts
    assert "svg" in drawn.tags
    assert drawn.tags.count("rect") == 3
    assert "Rent, Jan: 1250.10" in drawn.texts  # the amount exactly, in the bar's tooltip
    big = TemplateCanvas.model_validate(
        CHART | {"series": [{"name": "Rent", "values": ["1.5E+3"] * 3}]}
    )
    assert "Rent, Jan: 1500" in parsed(big.document()).texts  # in full, never 1.5E+3


async def test_a_table_and_a_line_chart_are_drawn() -> None:
    table = TemplateCanvas(
        title="Payees", kind="table", labels=["name", "paid"], rows=[["Ann", "12.50"]]
    )
    assert parsed(table.document()).texts[-4:] == ["name", "paid", "Ann", "12.50"]
    line = TemplateCanvas.model_validate(CHART | {"kind": "line_chart"})
    assert parsed(line.document()).tags.count("polyline") == 1


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"series": [{"name": "Rent", "values": ["1"]}]}, "exactly 3 values"),
        ({"kind": "table"}, "rows of exactly 3 cells"),
        ({"series": [{"name": "Rent", "values": ["1", "NaN", "2"]}]}, "finite"),
        ({"series": [{"name": "Rent", "values": ["1", "1E+100000", "2"]}]}, "40 digits"),
        ({"script": "x"}, "Extra inputs"),
    ],
)
def test_a_malformed_canvas_is_refused_with_what_is_wrong(
    change: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValidationError, match=says):
        TemplateCanvas.model_validate(CHART | change)


async def test_an_invalid_canvas_is_told_to_the_model_and_nothing_is_shown() -> None:
    events = await drive(CHART | {"kind": "table"})
    assert [e for e in events if isinstance(e, Canvas)] == []
    (refused,) = [e for e in events if isinstance(e, ToolCallRejected)]
    assert refused.reason == "invalid_input"


async def test_the_models_own_document_is_recorded_as_is_but_redacted() -> None:
    secret = "sk-live-0123456789abcdefghij"
    html = f"<p>balance</p><script>document.title='{secret}'</script>"
    events = await drive(
        {"title": "Mine", "html": html},
        name="render_html_canvas",
        redactor=Redactor(known_secrets=[secret]),
    )
    (canvas,) = [e for e in events if isinstance(e, Canvas)]
    assert canvas.kind == "html"
    assert canvas.html.startswith("<p>balance</p><script>document.title='")
    assert secret not in canvas.html
    (end,) = [e for e in events if isinstance(e, ToolCallEnd)]
    assert "<script>" not in end.output
    assert '"characters"' in end.output


def test_a_document_too_long_is_refused() -> None:
    with pytest.raises(ValidationError, match="at most 100000 characters"):
        HtmlCanvas(title="big", html="x" * 100_001)


class Crash(BaseException):
    """The process dies inside the handler (nothing after it runs)."""


def crashing_canvas(crash: bool) -> Capability:
    """A canvas capability of the host's own (the flag and an input of fiduciary.canvas)."""

    @capability(name="chart", kind="read", flags=[CANVAS_FLAG], input_model=TemplateCanvas)
    async def chart(args: TemplateCanvas) -> dict[str, str]:
        """Show a chart."""
        if crash:
            raise Crash
        return {"shown": args.title}

    return chart


async def test_a_canvas_cut_off_by_a_crash_is_shown_when_its_read_is_run_again(
    store: Store, clock: ManualClock
) -> None:
    script = Script("show", [ToolCalls([Call("chart", CHART)]), Reply("shown")])

    def agent(crash: bool) -> Agent:
        chart = crashing_canvas(crash)
        return make_agent(None, store, clock, script, capabilities=[chart], lease_seconds=5)

    with pytest.raises(Crash):
        await collect(agent(True).run("show", principal="ann"))
    [run] = await store.list_runs(limit=10)
    clock.advance(timedelta(seconds=6))  # the dead process's lease lapses
    events = await collect(agent(False).resume(run.run_id))
    (end,) = [e for e in events if isinstance(e, ToolCallEnd)]
    assert end.recovery == "replayed"
    (canvas,) = [e for e in events if isinstance(e, Canvas)]
    assert (canvas.tool_use_id, canvas.title) == (end.tool_use_id, "Spending <by> month")


def test_neither_canvas_capability_looks_like_a_shell_a_file_sql_or_a_url() -> None:
    from tests.unit.test_no_dangerous_tools import powers

    assert powers(render_canvas) == []
    assert powers(render_html_canvas) == []

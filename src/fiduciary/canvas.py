"""Canvases: the model shows the person a chart or a table, drawn beside the conversation.

``render_canvas`` (a read: it changes nothing) takes a kind and the data — a bar chart, a line
chart or a table — and fiduciary draws the document from a fixed template, every value escaped:
no script, no link, no request. ``render_html_canvas`` takes a whole HTML document the model
wrote; add it only when the templates are not enough, as what it shows is the model's own.

Either way the loop records the document as a ``canvas`` event (redacted like any text of the
run), and the model's result is one short line, never the document echoed back. Clients show a
canvas only in a sandboxed frame with no network and no access to the page around it (the
console: ``GET /canvas-frame``, docs/canvases.md). Add them to an agent's capabilities:
``Agent(capabilities=[..., render_canvas])``.
"""

from __future__ import annotations

from decimal import Decimal
from html import escape
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .capabilities import capability

__all__ = [
    "CANVAS_FLAG",
    "CanvasInput",
    "ChartSeries",
    "HtmlCanvas",
    "TemplateCanvas",
    "render_canvas",
    "render_html_canvas",
]

CANVAS_FLAG = "canvas"  # a capability with this flag has its document recorded as an event
MAX_HTML = 100_000  # characters of a model-written document

_COLOURS = ("#2563eb", "#16a34a", "#d97706", "#dc2626", "#7c3aed", "#0891b2")
_STYLE = (
    "body{font:14px system-ui,sans-serif;margin:12px;color:#111}"
    "h1{font-size:16px;margin:0 0 8px}p{color:#555;margin:6px 0}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
    "svg text{font:11px system-ui,sans-serif;fill:#333}"
)


class CanvasInput(BaseModel):
    """What a canvas capability is called with: its ``title``, its ``kind`` and ``document()``,
    the whole HTML the loop records (the model is not sent it)."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=120, description="A short title for the person.")

    @property
    def canvas_kind(self) -> str:
        raise NotImplementedError

    def document(self) -> str:
        raise NotImplementedError


class ChartSeries(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=60)
    values: list[Decimal] = Field(min_length=1, max_length=200)


class TemplateCanvas(CanvasInput):
    kind: Literal["bar_chart", "line_chart", "table"] = Field(
        description="bar_chart and line_chart: one value per label in each series; "
        "table: one row of cells per line, one cell per column."
    )
    labels: list[str] = Field(
        min_length=1,
        max_length=200,
        description="A chart's categories (x axis), or a table's column headers.",
    )
    series: list[ChartSeries] = Field(default_factory=list, max_length=6)
    rows: list[list[str]] = Field(default_factory=list, max_length=500)
    note: str = Field(default="", max_length=500, description="One line under the title.")

    @model_validator(mode="after")
    def _shaped(self) -> TemplateCanvas:
        width = len(self.labels)
        if self.kind == "table":
            if not self.rows or any(len(row) != width for row in self.rows):
                raise ValueError(f"a table needs rows of exactly {width} cells (one per label)")
        elif not self.series or any(len(s.values) != width for s in self.series):
            raise ValueError(f"a chart needs series of exactly {width} values (one per label)")
        for value in (v for s in self.series for v in s.values):
            if not value.is_finite() or len(_plain(value)) > 40:
                raise ValueError("values must be finite numbers of at most 40 digits")
        return self

    @property
    def canvas_kind(self) -> str:
        return self.kind

    def document(self) -> str:
        body = _table(self) if self.kind == "table" else _chart(self)
        note = f"<p>{escape(self.note)}</p>" if self.note else ""
        return _page(self.title, f"<h1>{escape(self.title)}</h1>{note}{body}")


class HtmlCanvas(CanvasInput):
    html: str = Field(
        min_length=1,
        max_length=MAX_HTML,
        description="A whole HTML document (inline style and script only: the frame it is "
        "shown in allows no request of any kind).",
    )

    @property
    def canvas_kind(self) -> str:
        return "html"

    def document(self) -> str:
        return self.html


def _plain(value: Decimal) -> str:
    """A number written in full, as the person reads amounts (never 1.5E+3)."""
    return format(value, "f")


def _page(title: str, body: str) -> str:
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def _table(spec: TemplateCanvas) -> str:
    head = "".join(f"<th>{escape(label)}</th>" for label in spec.labels)
    rows = "".join(
        "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in spec.rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


_W, _H, _PAD = 640, 300, 40  # the chart's box and its margin for the axis labels


def _chart(spec: TemplateCanvas) -> str:
    values = [v for s in spec.series for v in s.values]
    low, high = min(min(values), Decimal(0)), max(max(values), Decimal(0))
    span = (high - low) or Decimal(1)
    plot_w, plot_h = _W - 2 * _PAD, _H - 2 * _PAD
    step = plot_w / len(spec.labels)

    def y(value: Decimal) -> float:  # screen position (a drawing, not an amount)
        return round(_PAD + plot_h * float((high - value) / span), 1)

    parts = [
        f'<line x1="{_PAD}" y1="{y(Decimal(0))}" x2="{_W - _PAD}" y2="{y(Decimal(0))}" '
        'stroke="#999"/>'
    ]
    for i, label in enumerate(spec.labels):
        x = round(_PAD + step * (i + 0.5), 1)
        parts.append(
            f'<text x="{x}" y="{_H - _PAD + 16}" text-anchor="middle">{escape(label)}</text>'
        )
    for n, series in enumerate(spec.series):
        colour = _COLOURS[n % len(_COLOURS)]
        name = escape(series.name)
        if spec.kind == "bar_chart":
            bar = step * 0.8 / len(spec.series)
            for i, value in enumerate(series.values):
                x = round(_PAD + step * i + step * 0.1 + bar * n, 1)
                top, bottom = sorted((y(value), y(Decimal(0))))
                parts.append(
                    f'<rect x="{x}" y="{top}" width="{round(bar, 1)}" '
                    f'height="{round(bottom - top, 1)}" fill="{colour}"><title>{name}, '
                    f"{escape(spec.labels[i])}: {_plain(value)}</title></rect>"
                )
        else:
            points = " ".join(
                f"{round(_PAD + step * (i + 0.5), 1)},{y(v)}" for i, v in enumerate(series.values)
            )
            parts.append(
                f'<polyline points="{points}" fill="none" stroke="{colour}" '
                f'stroke-width="2"><title>{name}</title></polyline>'
            )
        parts.append(f'<text x="{_PAD + 120 * n}" y="14" fill="{colour}">■ {name}</text>')
    most, least = _plain(high), _plain(low)
    parts.append(f'<text x="4" y="{_PAD}">{most}</text><text x="4" y="{_H - _PAD}">{least}</text>')
    return (
        f'<svg viewBox="0 0 {_W} {_H}" width="100%" role="img" '
        f'aria-label="{escape(spec.title)}">{"".join(parts)}</svg>'
    )


@capability(
    name="render_canvas",
    kind="read",
    flags=[CANVAS_FLAG],
    input_model=TemplateCanvas,
    description=(
        "Show the person a chart or a table beside the conversation: kind bar_chart or "
        "line_chart (labels on the x axis, one or more series of numbers, one per label) or "
        "table (labels are the column headers, rows the cells). It changes nothing; you get a "
        "short confirmation, not the drawing."
    ),
)
async def render_canvas(args: TemplateCanvas) -> dict[str, str]:
    return {"shown": args.kind, "title": args.title}


@capability(
    name="render_html_canvas",
    kind="read",
    flags=[CANVAS_FLAG],
    input_model=HtmlCanvas,
    description=(
        "Show the person an interactive HTML document beside the conversation (inline style "
        "and script; it can load nothing and reach nothing). Prefer render_canvas for charts "
        "and tables. You get a short confirmation, not the document."
    ),
)
async def render_html_canvas(args: HtmlCanvas) -> dict[str, str | int]:
    return {"shown": "html", "title": args.title, "characters": len(args.html)}

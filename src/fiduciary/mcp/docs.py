"""fiduciary's own documentation, served by its MCP server as two resources.

- ``docs://guide``: how the gates treat a call, how a person approves, what the policy decides,
  what a capability declares and its error codes: the pages ``GUIDE_PAGES`` of ``docs/``, shipped
  in the package (``fiduciary/mcp/guide/``: links to the pages of ``docs/`` in the repository,
  whose text the wheel carries).
- ``docs://api``: the tools this server offers, read from its live list at each request (the
  agent's whitelist, or the claude CLI provider's proposals): name, whether it only reads, its
  description and its input's JSON schema.

So an agent behind a CLI (the claude CLI provider) can be given a short prompt and read the rest
when it needs it. Both are markdown, readable by any caller (no key scope: they say nothing of
anyone's runs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import resources

from ._sdk import mcp_types

__all__ = ["API_URI", "GUIDE_PAGES", "GUIDE_URI", "api_text", "doc_resources", "guide_text"]

GUIDE_URI = "docs://guide"
API_URI = "docs://api"
GUIDE_PAGES = ("approvals.md", "policy.md", "capabilities.md")
_MARKDOWN = "text/markdown"


def guide_text() -> str:
    """The guide: the shipped pages, in order, under one title."""
    folder = resources.files("fiduciary.mcp").joinpath("guide")
    pages = [folder.joinpath(page).read_text(encoding="utf-8").strip() for page in GUIDE_PAGES]
    head = (
        "# fiduciary: the guide\n\n"
        "Every tool here runs through fiduciary's gates. The pages below say what the gates "
        "decide, when a person must approve, and what a refusal's error code means. The tools "
        f"themselves, with their input schemas, are in {API_URI}.\n"
    )
    return "\n\n".join([head, *pages]) + "\n"


def api_text(tools: Iterable[mcp_types.Tool]) -> str:
    """The tools offered, as markdown: each one's name, kind, description and input schema."""
    parts = [
        "# fiduciary: the API\n\n"
        "The tools this server offers now. A tool marked *write* goes through the policy and "
        f"may wait for a person's approval (see {GUIDE_URI}).\n"
    ]
    for tool in sorted(tools, key=lambda t: t.name):
        hints = tool.annotations
        kind = "read" if hints is not None and hints.read_only_hint else "write"
        schema = json.dumps(tool.input_schema, indent=2, sort_keys=True, ensure_ascii=False)
        parts.append(
            f"## {tool.name} ({kind})\n\n{(tool.description or '').strip()}\n\n"
            f"Input (JSON schema):\n\n```json\n{schema}\n```\n"
        )
    return "\n".join(parts)


def doc_resources() -> list[mcp_types.Resource]:
    """The two resources, as ``resources/list`` shows them."""
    return [
        mcp_types.Resource(
            uri=GUIDE_URI,
            name="guide",
            description="How fiduciary's gates, approvals and policy treat a tool call, and "
            "its error codes (markdown).",
            mime_type=_MARKDOWN,
        ),
        mcp_types.Resource(
            uri=API_URI,
            name="api",
            description="The tools this server offers: names, descriptions and input schemas "
            "(markdown).",
            mime_type=_MARKDOWN,
        ),
    ]

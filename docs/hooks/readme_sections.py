"""A mkdocs hook: a page shows a section of README.md instead of a copy of it.

A line ``<!-- readme: ## Quick start -->`` in a page is replaced by the README's section titled
"Quick start" (whatever its level there), its heading set at the level the marker's hashes give,
and its subsections shifted with it. ``readme-only:`` stops at the section's first subsection;
``<!-- readme: ## Title as Other title -->`` shows the section under another heading.
Links are rewritten for the site: ``docs/x.md`` becomes ``x.md``, and ``#anchor`` of a README
heading that another page shows becomes ``that-page.md#anchor``. A marker naming no README
heading fails the build.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from markdown.extensions.toc import slugify

README = Path(__file__).resolve().parent.parent.parent / "README.md"
MARKER = re.compile(r"^<!-- (readme|readme-only): (#+) (.+?)(?: as (.+?))? -->$", re.M)
HEADING = re.compile(r"^(#{1,6}) (.+)$")
FENCE = re.compile(r"^(```|~~~)")

# README heading slug -> the page (path under docs/) that shows it
_homes: dict[str, str] = {}


def _headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line index, level, title) of each heading outside code fences."""
    found: list[tuple[int, int, str]] = []
    fenced = False
    for index, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.append((index, len(match.group(1)), match.group(2).strip()))
    return found


def _section(title: str, *, only: bool) -> tuple[int, list[str]]:
    """The README section titled ``title``: its level and its lines (heading included)."""
    lines = README.read_text(encoding="utf-8").splitlines()
    heads = _headings(lines)
    for position, (start, level, text) in enumerate(heads):
        if text != title:
            continue
        end = len(lines)
        for later, later_level, _ in heads[position + 1 :]:
            if later_level <= level or only:
                end = later
                break
        return level, lines[start:end]
    raise ValueError(f"README.md has no heading {title!r} (a docs page includes it)")


def _slugs(lines: list[str]) -> set[str]:
    return {slugify(text, "-") for _, _, text in _headings(lines)}


def on_files(files: Any, config: Any) -> Any:
    """Learn which page shows which README headings, so anchors can point across pages."""
    _homes.clear()
    docs = Path(config["docs_dir"])
    for page in sorted(docs.rglob("*.md")):
        for match in MARKER.finditer(page.read_text(encoding="utf-8")):
            _, lines = _section(match.group(3), only=match.group(1) == "readme-only")
            for slug in _slugs(lines):
                _homes.setdefault(slug, page.relative_to(docs).as_posix())
    return files


def _rewrite(text: str, here: str, local: set[str]) -> str:
    def anchor(match: re.Match[str]) -> str:
        slug = match.group(1)
        home = _homes.get(slug)
        if slug in local or home is None or home == here:
            return match.group(0)
        return f"]({home}#{slug})"

    text = re.sub(r"\]\(docs/", "](", text)
    return re.sub(r"\]\(#([a-z0-9_-]+)\)", anchor, text)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    here = page.file.src_uri

    def include(match: re.Match[str]) -> str:
        level, lines = _section(match.group(3), only=match.group(1) == "readme-only")
        shift = len(match.group(2)) - level
        if match.group(4):
            lines = [f"{'#' * level} {match.group(4)}", *lines[1:]]
        shifted: list[str] = []
        fenced = False
        for line in lines:
            if FENCE.match(line):
                fenced = not fenced
            heading = None if fenced else HEADING.match(line)
            if heading:
                depth = min(6, max(1, len(heading.group(1)) + shift))
                line = f"{'#' * depth} {heading.group(2)}"
            shifted.append(line)
        return _rewrite("\n".join(shifted), here, _slugs(lines))

    return MARKER.sub(include, markdown)

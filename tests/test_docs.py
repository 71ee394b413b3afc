"""The documentation stays true: the event reference matches the event union, and the site builds.

docs/events.md is written by hand (it says when each event is emitted, which a schema cannot);
these tests hold it to ``fiduciary.events``: one section per event type, no section for a type
that does not exist, and every field of a type named in its section.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest
from pydantic import BaseModel

import fiduciary
from fiduciary.events import Event, EventBase

ROOT = Path(__file__).resolve().parent.parent
EVENTS_MD = ROOT / "docs" / "events.md"
COMMON = set(EventBase.model_fields) | {"type"}


def _event_models() -> list[type[BaseModel]]:
    union = get_args(Event)[0]
    models: list[type[BaseModel]] = list(get_args(union))
    return models


def _type_of(model: type[BaseModel]) -> str:
    default = model.model_fields["type"].default
    assert isinstance(default, str)
    return default


def _sections() -> dict[str, str]:
    """``### `a`, `b` `` headings under "Event types" → the text of their section, per type."""
    text = EVENTS_MD.read_text(encoding="utf-8")
    part = text.split("\n## Event types\n", 1)[1].split("\n## ", 1)[0]
    sections: dict[str, str] = {}
    for block in re.split(r"\n(?=### )", part):
        heading, _, body = block.partition("\n")
        if not heading.startswith("### "):
            continue
        for name in re.findall(r"`([a-z_]+)`", heading):
            sections[name] = body
    return sections


def test_every_event_type_has_a_section_and_no_other() -> None:
    documented = set(_sections())
    defined = {_type_of(model) for model in _event_models()}
    assert documented - defined == set(), "docs/events.md documents types events.py lacks"
    assert defined - documented == set(), "events.py has types docs/events.md does not document"


@pytest.mark.parametrize("model", _event_models(), ids=_type_of)
def test_every_field_is_named_in_its_section(model: type[BaseModel]) -> None:
    body = _sections()[_type_of(model)]
    named = set(re.findall(r"`([a-z_]+)`", body))
    missing = sorted(set(model.model_fields) - COMMON - named)
    assert missing == [], f"docs/events.md, {_type_of(model)}: fields not described: {missing}"


def test_common_fields_are_the_base_fields() -> None:
    text = EVENTS_MD.read_text(encoding="utf-8")
    common = text.split("\n## Common fields\n", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", common, re.M))
    assert rows == COMMON


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """``mkdocs build --strict``: a broken link, a missing page or a bad docstring fails it."""
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("mkdocs is missing: install the docs extra (pip install -e '.[docs]')")
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "mkdocs"),
            "build",
            "--strict",
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'id="(fiduciary\.[A-Za-z_]+)"', api))
    missing = sorted(name for name in fiduciary.__all__ if f"fiduciary.{name}" not in anchors)
    assert missing == [], f"the API reference lacks {missing}"


def _literal_values(annotation: object) -> set[str]:
    """The string values a field's annotation allows, through Optional and unions."""
    if get_origin(annotation) is Literal:
        return {value for value in get_args(annotation) if isinstance(value, str)}
    found: set[str] = set()
    for inner in get_args(annotation):
        found |= _literal_values(inner)
    return found


@pytest.mark.parametrize("model", _event_models(), ids=_type_of)
def test_every_enumerated_value_is_named_in_its_section(model: type[BaseModel]) -> None:
    """A reason, a decision, a recovery or a verdict a client may receive is described."""
    body = _sections()[_type_of(model)]
    named = set(re.findall(r'`"?([a-z_]+)"?`', body))
    values: set[str] = set()
    for name, field in model.model_fields.items():
        if name not in COMMON:
            values |= _literal_values(field.annotation)
    missing = sorted(values - named)
    assert missing == [], f"docs/events.md, {_type_of(model)}: values not described: {missing}"

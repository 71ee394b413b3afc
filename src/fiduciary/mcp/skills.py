"""Skills: multi-step playbooks as ``SKILL.md`` files (the Agent Skills format).

A skill is a directory holding ``SKILL.md``: a front matter with ``name`` and ``description``,
then a markdown body. ``load_skills(path)`` reads every ``*/SKILL.md`` under ``path``. The same
skills are MCP prompts (``skill-<name>``, ``server``), a ``use_skill`` read capability a model can
list and open (``skills_capability``), and bodies for the system prompt's skill slot
(``Skill.body``).

A skill grants nothing: it is text. A playbook naming a capability outside the run's whitelist
still gets ``not_allowed`` at the gates.

This module does not need the MCP SDK.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..capabilities import Capability, capability
from ..exceptions import CapabilityError, ConfigurationError

__all__ = ["Skill", "load_skills", "parse_skill", "skills_capability"]

_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_MAX_NAME = 64
_MAX_DESCRIPTION = 1024


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    body: str
    path: Path | None = None


def parse_skill(text: str, *, path: Path | None = None) -> Skill:
    """One ``SKILL.md``: ``---`` front matter (``name``, ``description``) ``---``, then a body."""
    where = str(path) if path is not None else "a skill"
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise ConfigurationError(f"{where}: a SKILL.md starts with '---' front matter")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise ConfigurationError(f"{where}: the front matter is not closed with '---'") from None
    fields: dict[str, str] = {}
    for line in lines[1:end]:
        key, sep, value = line.partition(":")
        if sep and not line.startswith((" ", "\t")):
            fields[key.strip()] = value.strip().strip("\"'")
    name, description = fields.get("name", ""), fields.get("description", "")
    if not _NAME.match(name) or len(name) > _MAX_NAME:
        raise ConfigurationError(
            f"{where}: name must be lower-case letters, digits and hyphens (at most 64)"
        )
    if not description or len(description) > _MAX_DESCRIPTION:
        raise ConfigurationError(f"{where}: a description of 1 to 1024 characters is required")
    if path is not None and path.parent.name != name:
        raise ConfigurationError(f"{where}: the skill {name!r} must live in a folder named {name}")
    body = "\n".join(lines[end + 1 :]).strip()
    return Skill(name, description, body, path)


def load_skills(path: str | Path) -> list[Skill]:
    """Every ``*/SKILL.md`` under ``path``, by name; two skills of one name are refused."""
    root = Path(path)
    if not root.is_dir():
        raise ConfigurationError(f"no skills directory at {root}")
    skills: dict[str, Skill] = {}
    for file in sorted(root.glob("*/SKILL.md")):
        skill = parse_skill(file.read_text(encoding="utf-8"), path=file)
        if skill.name in skills:
            raise ConfigurationError(f"two skills are named {skill.name!r}")
        skills[skill.name] = skill
    return list(skills.values())


def skills_capability(skills: Iterable[Skill], *, name: str = "use_skill") -> Capability:
    """A read capability: without a name, the list of skills; with one, its playbook."""
    table = {s.name: s for s in skills}

    @capability(name=name, kind="read")
    def use_skill(skill: str = "") -> dict[str, Any]:
        """List the available playbooks (skills), or open one by name to follow its steps.
        A playbook only describes steps: each tool call still needs to be allowed."""
        if not skill:
            return {"skills": [{"name": s.name, "description": s.description} for s in _sorted()]}
        found = table.get(skill)
        if found is None:
            raise CapabilityError(
                "unknown_skill",
                f"There is no skill {skill!r}. Available: {', '.join(sorted(table)) or 'none'}.",
            )
        return {"name": found.name, "description": found.description, "playbook": found.body}

    def _sorted() -> Sequence[Skill]:
        return [table[k] for k in sorted(table)]

    return use_skill

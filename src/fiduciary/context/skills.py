"""Skills: multi-step playbooks as ``SKILL.md`` files (the Agent Skills format), and the skill
layer of the system prompt.

A skill is a directory holding ``SKILL.md``: a front matter with ``name`` and ``description``,
then a markdown body. ``load_skills(path)`` reads every ``*/SKILL.md`` under ``path``; an
external MCP server's prompts become skills too (``McpToolset.skills()``).

An agent given skills (``Agent(skills=...)``) offers the ``use_skill`` read capability (with no
name it lists the skills, with one it opens that playbook), and puts the active skill's playbook
in the skill layer of the system prompt (``context/layers.py``, after the domain context and
recalled memory). The active skill is the one the person chose (``agent.run(..., skill=...)``,
recorded on the ``user_message``), unless the model opened another with ``use_skill`` since
(its call, in the log). Both are read back from the log, so a resumed run sends the same.

A skill grants nothing: it is text. A playbook naming a capability outside the run's whitelist
still gets ``not_allowed`` at the gates, and every call it suggests meets the policy as any.

This module does not need the MCP SDK.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..capabilities import Capability, capability
from ..exceptions import CapabilityError, ConfigurationError, RunError

__all__ = [
    "SKILL_FLAG",
    "Skill",
    "active_skill",
    "chosen_skill",
    "load_skills",
    "parse_skill",
    "skill_layer",
    "skill_table",
    "skills_capability",
    "with_skills",
]

SKILL_FLAG = "skill_choice"  # a capability with this flag opens a skill: ``{"skill": name}``
USE_SKILL = "use_skill"

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


def skill_table(skills: Iterable[Skill]) -> dict[str, Skill]:
    """Skills by name; two of one name are refused."""
    table: dict[str, Skill] = {}
    for skill in skills:
        if not isinstance(skill, Skill):
            raise ConfigurationError(f"{skill!r} is not a Skill (see load_skills)")
        if skill.name in table:
            raise ConfigurationError(f"two skills are named {skill.name!r}")
        table[skill.name] = skill
    return table


def skills_capability(
    skills: Iterable[Skill] | Mapping[str, Skill], *, name: str = USE_SKILL
) -> Capability:
    """A read capability: without a name, the list of skills; with one, its playbook (which an
    agent that has the skill also puts in its system prompt's skill layer). Given a mapping, it
    follows it: skills added to it later are offered too (an agent's ``skills``)."""
    table = skills if isinstance(skills, Mapping) else {s.name: s for s in skills}

    @capability(name=name, kind="read", flags=[SKILL_FLAG], max_result_chars=40_000)
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


def chosen_skill(skills: Mapping[str, Skill], name: str | None) -> str | None:
    """A skill the person chose for a run (``agent.run(..., skill=...)``): one of ``skills``."""
    if name is None or name in skills:
        return name
    available = ", ".join(sorted(skills)) or "none"
    raise RunError("invalid", f"unknown skill {name!r} (available: {available})")


def with_skills(
    capabilities: Iterable[Capability], skills: Mapping[str, Skill]
) -> list[Capability]:
    """An agent's capabilities, with ``use_skill`` over its skills when it has any (and has no
    capability of that name already)."""
    caps = list(capabilities)
    if skills and not any(getattr(c, "name", None) == USE_SKILL for c in caps):
        caps.append(skills_capability(skills))
    return caps


def active_skill(
    skills: Mapping[str, Skill],
    chosen: str | None,
    calls: Sequence[Any],
    capability_of: Callable[[str], Capability | None],
) -> Skill | None:
    """The active skill: the last one the model opened with a ``SKILL_FLAG`` capability
    (``calls``: the run's calls since the person last chose one, as the fold records them),
    else the person's choice; None when it is not one of ``skills``."""
    for call in reversed(calls):
        name = call.input.get("skill") if isinstance(call.input, dict) else None
        cap = capability_of(call.name)
        opens = cap is not None and SKILL_FLAG in cap.flags
        if call.ok and opens and isinstance(name, str) and name in skills:
            return skills[name]
    return skills.get(chosen) if chosen is not None else None


def skill_layer(skill: Skill | None) -> str:
    """The system prompt's skill layer ('' without an active skill)."""
    if skill is None:
        return ""
    return (
        f'<skill name="{skill.name}">\nThe playbook to follow now ({skill.description}). It only '
        "describes steps: every tool call is still checked, and some wait for the person.\n\n"
        f"{skill.body}\n</skill>"
    )

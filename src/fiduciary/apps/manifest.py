"""App manifests: ``apps/<id>/app.md`` — YAML frontmatter, then the app's instructions.

The frontmatter declares what an app is and what it may do: its hooks, its tick tier, the
capabilities it may call (a whitelist of the engine's), the operations it asks permission for and
their USD limits, its sources and its config (``approve``, error policies, ``mode``). The markdown
body is the instructions every hook invocation is given. Every error names the field at fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

from ..exceptions import ConfigurationError

__all__ = [
    "HOOKS",
    "TIER_SECONDS",
    "AppConfig",
    "ErrorPolicy",
    "Manifest",
    "ManifestError",
    "load_manifest",
    "load_manifests",
    "parse_manifest",
]

HOOKS = ("init", "tick", "message", "execute", "result", "shutdown")
# default tick interval of each tier, in seconds (configurable per engine: AppEngine(tiers=...))
TIER_SECONDS: dict[str, float] = {
    "sniper": 5.0,
    "active": 30.0,
    "standard": 60.0,
    "slow": 300.0,
    "maintenance": 3600.0,
}
_SOURCE_FAIL = ("skip", "pause", "retry")
_EXECUTE_FAIL = ("skip", "pause")
_KNOWN = frozenset(
    {
        "id",
        "name",
        "hooks",
        "tier",
        "autoStart",
        "capabilities",
        "permissions",
        "limits",
        "sources",
        "config",
        "description",
        "session",
    }
)


class ManifestError(ConfigurationError):
    """A manifest that cannot be used; the message names the file and the field."""


@dataclass(frozen=True, slots=True)
class ErrorPolicy:
    source_fail: Literal["skip", "pause", "retry"] = "skip"
    execute_fail: Literal["skip", "pause"] = "skip"


@dataclass(frozen=True, slots=True)
class AppConfig:
    """``config``: ``approve`` (batch intents need one approval), ``errors``, ``mode``; any other
    key is the app's own and reaches its hooks unchanged."""

    approve: bool = True
    errors: ErrorPolicy = ErrorPolicy()
    mode: Literal["paper", "live"] = "paper"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def as_context(self) -> dict[str, Any]:
        return {
            **dict(self.extra),
            "approve": self.approve,
            "mode": self.mode,
            "errors": {
                "sourceFail": self.errors.source_fail,
                "executeFail": self.errors.execute_fail,
            },
        }


@dataclass(frozen=True, slots=True)
class Manifest:
    id: str
    name: str
    hooks: frozenset[str]
    tier: str
    auto_start: bool
    capabilities: tuple[str, ...]
    permissions: tuple[str, ...]
    limits: Mapping[str, Decimal]
    sources: tuple[str, ...]
    config: AppConfig
    instructions: str
    path: str = ""
    session: bool = False  # its tick and message hooks each keep one conversation (hooks.py)

    @property
    def needs_approval(self) -> bool:
        """Enabling it needs a person's approval: it declares permissions or limits, or is live."""
        return bool(self.permissions or self.limits) or self.config.mode == "live"


def _fail(where: str, field_name: str, message: str) -> ManifestError:
    return ManifestError(f"{where}: {field_name}: {message}")


def _flag(where: str, raw: Mapping[str, Any], name: str) -> bool:
    value = raw.get(name, False)
    if not isinstance(value, bool):
        raise _fail(where, name, "must be true or false")
    return value


def _strings(where: str, name: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(where, name, "must be a list of non-empty strings")
    return tuple(dict.fromkeys(value))


def _config(where: str, raw: Any) -> AppConfig:
    if raw is None:
        return AppConfig()
    if not isinstance(raw, dict):
        raise _fail(where, "config", "must be a mapping")
    extra = {k: v for k, v in raw.items() if k not in ("approve", "errors", "mode")}
    approve = raw.get("approve", True)
    if not isinstance(approve, bool):
        raise _fail(where, "config.approve", "must be true or false")
    mode = raw.get("mode", "paper")
    if mode not in ("paper", "live"):
        raise _fail(where, "config.mode", f"unknown mode {mode!r}; choose paper or live")
    errors = raw.get("errors") or {}
    if not isinstance(errors, dict):
        raise _fail(where, "config.errors", "must be a mapping")
    unknown = sorted(set(errors) - {"sourceFail", "executeFail"})
    if unknown:
        raise _fail(where, f"config.errors.{unknown[0]}", "unknown error policy")
    source = errors.get("sourceFail", "skip")
    if source not in _SOURCE_FAIL:
        raise _fail(
            where,
            "config.errors.sourceFail",
            f"{source!r}; choose one of {', '.join(_SOURCE_FAIL)}",
        )
    execute = errors.get("executeFail", "skip")
    if execute not in _EXECUTE_FAIL:
        raise _fail(
            where,
            "config.errors.executeFail",
            f"{execute!r}; choose one of {', '.join(_EXECUTE_FAIL)}",
        )
    return AppConfig(approve=approve, errors=ErrorPolicy(source, execute), mode=mode, extra=extra)


def parse_manifest(
    text: str,
    *,
    where: str = "app.md",
    capabilities: Mapping[str, str | None],
    sources: Iterable[str] = (),
    folder_id: str | None = None,
    tiers: Iterable[str] = TIER_SECONDS,
) -> Manifest:
    """Parse and validate one manifest. ``capabilities``: the engine's capability names and the
    operation each performs (None for reads); ``sources``: the source names the engine knows."""
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise ImportError("fiduciary.apps needs PyYAML: pip install 'fiduciary[apps]'") from exc
    if not text.startswith("---"):
        raise _fail(where, "frontmatter", "the file must start with a '---' YAML block")
    parts = text.split("\n---", 1)
    if len(parts) != 2:
        raise _fail(where, "frontmatter", "the YAML block is not closed by a '---' line")
    head, body = parts[0][3:], parts[1].split("\n", 1)[1] if "\n" in parts[1] else ""
    try:
        raw = yaml.safe_load(head)
    except yaml.YAMLError as exc:
        raise _fail(where, "frontmatter", f"not valid YAML ({exc})") from exc
    if not isinstance(raw, dict):
        raise _fail(where, "frontmatter", "must be a mapping")
    unknown = sorted(str(k) for k in raw if k not in _KNOWN)
    if unknown:
        raise _fail(where, unknown[0], "unknown field")
    app_id = raw.get("id")
    if not isinstance(app_id, str) or not app_id or not app_id.replace("-", "").isalnum():
        raise _fail(where, "id", "must be letters, digits and dashes")
    if folder_id is not None and app_id != folder_id:
        raise _fail(where, "id", f"{app_id!r} differs from its folder {folder_id!r}")
    hooks = _strings(where, "hooks", raw.get("hooks"))
    for i, hook in enumerate(hooks):
        if hook not in HOOKS:
            raise _fail(
                where, f"hooks[{i}]", f"unknown hook {hook!r}; choose from {', '.join(HOOKS)}"
            )
    tier = raw.get("tier", "standard")
    tier_names = list(tiers)
    if tier not in tier_names:
        raise _fail(where, "tier", f"unknown tier {tier!r}; choose from {', '.join(tier_names)}")
    auto_start, session = _flag(where, raw, "autoStart"), _flag(where, raw, "session")
    caps = _strings(where, "capabilities", raw.get("capabilities"))
    for i, name in enumerate(caps):
        if name not in capabilities:
            raise _fail(where, f"capabilities[{i}]", f"no capability named {name!r}")
    operations = {op for n in caps if (op := capabilities[n]) is not None}
    permissions = _strings(where, "permissions", raw.get("permissions"))
    for i, op in enumerate(permissions):
        if op not in operations:
            raise _fail(
                where,
                f"permissions[{i}]",
                f"{op!r} is not an operation of the app's capabilities "
                f"({', '.join(sorted(operations)) or 'none'})",
            )
    limits_raw = raw.get("limits") or {}
    if not isinstance(limits_raw, dict):
        raise _fail(where, "limits", "must map operations to USD amounts")
    limits: dict[str, Decimal] = {}
    for op, amount in limits_raw.items():
        if op not in permissions:
            raise _fail(where, f"limits.{op}", "a limit needs the operation in permissions")
        try:
            value = Decimal(str(amount))
        except InvalidOperation as exc:
            raise _fail(where, f"limits.{op}", "must be a USD amount") from exc
        if not value.is_finite() or value < 0:
            raise _fail(where, f"limits.{op}", "must be a non-negative USD amount")
        limits[op] = value
    source_names = set(sources)
    declared = _strings(where, "sources", raw.get("sources"))
    for i, name in enumerate(declared):
        if name not in source_names:
            raise _fail(where, f"sources[{i}]", f"no source named {name!r}")
    name = raw.get("name", app_id)
    if not isinstance(name, str):
        raise _fail(where, "name", "must be text")
    return Manifest(
        id=app_id,
        name=name,
        hooks=frozenset(hooks),
        tier=tier,
        auto_start=auto_start,
        capabilities=caps,
        permissions=permissions,
        limits=limits,
        sources=declared,
        config=_config(where, raw.get("config")),
        instructions=body.strip(),
        path=where,
        session=session,
    )


def load_manifest(
    path: Path,
    *,
    capabilities: Mapping[str, str | None],
    sources: Iterable[str] = (),
    tiers: Iterable[str] = TIER_SECONDS,
) -> Manifest:
    return parse_manifest(
        path.read_text(encoding="utf-8"),
        where=str(path),
        capabilities=capabilities,
        sources=sources,
        folder_id=path.parent.name,
        tiers=tiers,
    )


def load_manifests(
    root: Path,
    *,
    capabilities: Mapping[str, str | None],
    sources: Iterable[str] = (),
    tiers: Iterable[str] = TIER_SECONDS,
) -> list[Manifest]:
    """Every ``<root>/<id>/app.md``, sorted by id."""
    names = list(sources)
    return [
        load_manifest(p, capabilities=capabilities, sources=names, tiers=tiers)
        for p in sorted(root.glob("*/app.md"))
    ]

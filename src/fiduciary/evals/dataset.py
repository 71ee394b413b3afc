"""Reading a pydantic-evals dataset file (YAML or JSON) into cases fiduciary can run."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..exceptions import ConfigurationError
from .checks import Check, make_check, not_failed

__all__ = ["EvalCase", "EvalDataset", "Evaluator", "load_dataset"]

Evaluator = str | dict[str, Any]  # pydantic-evals' spec: `Name`, `Name: arg`, `Name: {kwargs}`


class CaseInputs(BaseModel):
    """What a case sends: the person's message, as whom, and whether its approvals are given
    (``approve``: every pending action is approved by the principal, so the run goes on)."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1)
    principal: str = "eval-user"
    approve: bool = False


class EvalCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = ""
    inputs: CaseInputs
    expected_output: Any = None
    metadata: dict[str, Any] | None = None
    evaluators: list[Evaluator] = Field(default_factory=list)

    @field_validator("inputs", mode="before")
    @classmethod
    def _message(cls, value: Any) -> Any:
        return {"message": value} if isinstance(value, str) else value


class EvalDataset(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = ""
    cases: list[EvalCase] = Field(min_length=1)
    evaluators: list[Evaluator] = Field(default_factory=list)

    def checks(self, case: EvalCase) -> list[tuple[str, Check, Any]]:
        """The case's checks, its own then the dataset's, with their labels; an
        ``expected_output`` is always checked (``EqualsExpected``), and a case that names no
        ``Status`` fails when its run fails (``NotFailed``)."""
        specs = [*case.evaluators, *self.evaluators]
        if case.expected_output is not None and "EqualsExpected" not in specs:
            specs.append("EqualsExpected")
        out: list[tuple[str, Check, Any]] = []
        for spec in specs:
            name, arg = _parse(spec)
            check, value = make_check(name, arg, case.expected_output)
            out.append((_label(name, arg), check, value))
        if not any(label.startswith("Status") for label, _, _ in out):
            out.append(("NotFailed", not_failed, None))
        return out


def _parse(spec: Evaluator) -> tuple[str, Any]:
    if isinstance(spec, str):
        return spec, None
    if isinstance(spec, Mapping) and len(spec) == 1:
        ((name, arg),) = spec.items()
        return str(name), arg
    raise ConfigurationError(f"an evaluator is a name or a one-key mapping, not {spec!r}")


def _label(name: str, arg: Any) -> str:
    if arg is None:
        return name
    shown = json.dumps(arg, default=str, separators=(",", ":"))
    return f"{name}({shown if len(shown) <= 60 else shown[:57] + '...'})"


def load_dataset(path: str | Path) -> EvalDataset:
    """The dataset in ``path`` (``.yaml``/``.yml`` need PyYAML, the ``apps`` extra; ``.json``
    needs nothing); every evaluator is checked now, before any case runs."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from exc
    data: Any
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:  # pragma: no cover - the apps extra
            raise ConfigurationError(
                "YAML cases need PyYAML: pip install 'fiduciary[apps]' (or write JSON)"
            ) from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigurationError(f"{path} is not valid YAML: {exc}") from exc
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"{path} is not valid JSON: {exc}") from exc
    try:
        dataset = EvalDataset.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ConfigurationError(f"{path} is not a dataset of cases: {problems}") from exc
    for case in dataset.cases:
        dataset.checks(case)  # unknown evaluators are refused before anything runs
    return dataset

"""The loop is given a runtime, never the agent: ``fiduciary._loop`` imports nothing of
``fiduciary.agent`` (nor of the decisions and the cancelling built on it), and none of the
engine's modules is part of an import circle."""

from __future__ import annotations

import ast
from pathlib import Path

import fiduciary

SRC = Path(fiduciary.__file__).parent
ENGINE = ("fiduciary._loop", "fiduciary.gates", "fiduciary.agent", "fiduciary.events")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports (at any level)."""
    files = {module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                # ``from . import x`` imports the submodule x when there is one
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in files]
                found.update(subs or [target])
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        graph[name] = {m for m in found if m in files}
    return graph


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        current = todo.pop()
        if current == goal:
            return True
        if current not in seen:
            seen.add(current)
            todo.extend(graph.get(current, ()))
    return False


def test_the_loop_does_not_import_the_agent() -> None:
    graph = imports()
    loop = [m for m in graph if m == "fiduciary._loop" or m.startswith("fiduciary._loop.")]
    assert len(loop) > 1
    for name in loop:
        for forbidden in ("fiduciary.agent", "fiduciary._decisions", "fiduciary._cancelling"):
            assert not reaches(graph, name, forbidden), f"{name} imports {forbidden}"


def test_no_engine_module_is_in_an_import_circle() -> None:
    graph = imports()
    engine = [m for m in graph if any(m == e or m.startswith(e + ".") for e in ENGINE)]
    circular = [m for m in engine if reaches(graph, m, m)]
    assert circular == []

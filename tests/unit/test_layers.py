"""The layering is a test: every import of ``src/fiduciary`` (at run time, under
``TYPE_CHECKING``, inside a function, or by name with ``import_module("fiduciary....")``)
points down or sideways in the layers ``docs/architecture.md`` draws, and no import circle
joins two modules of ``src/`` or of ``bench/``.

What still breaks the rule today is listed below, each with the step of issue 26 that removes
it: a new arrow pointing up or a new circle fails, and so does an entry of these lists that the
code no longer has (the list only shrinks).
"""

from __future__ import annotations

import ast
from collections.abc import Container, Iterable, Mapping
from functools import cache
from pathlib import Path

import fiduciary

SRC = Path(fiduciary.__file__).parent
ROOT = SRC.parents[1]
BENCH = ROOT / "bench"
DOC = ROOT / "docs" / "architecture.md"

# (importer, imported): arrows that point up today
KNOWN_UP: dict[tuple[str, str], str] = {}
# each a set of modules that import one another
KNOWN_CIRCLES: dict[frozenset[str], str] = {}

LAYERS = ("core", "features", "domains", "interfaces")


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, package: str, modules: Container[str]) -> set[str]:
    """Every module name ``tree`` imports; ``package``: where relative imports start. ``from x
    import y`` is ``x.y`` when that is one of ``modules``, else ``x`` (y is a name of x)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value)
    return found


def _is_import_module(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id == "import_module"


def graph_of(files: Mapping[str, Path]) -> dict[str, set[str]]:
    """Each module → the modules of ``files`` it imports."""
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        names = imported(ast.parse(path.read_text(encoding="utf-8")), package, files)
        graph[name] = {n for n in names if n in files} - {name}
    return graph


@cache  # every test reads the same tree: parse its ~250 files once per test process
def src_graph() -> dict[str, set[str]]:
    return graph_of({module_name(p, SRC.parent): p for p in SRC.rglob("*.py")})


def bench_graph() -> dict[str, set[str]]:
    return graph_of({p.stem: p for p in BENCH.glob("*.py")})


def documented_layers() -> dict[str, int]:
    """The table of ``docs/architecture.md``: module or package → its layer's rank."""
    text = DOC.read_text(encoding="utf-8")
    table = text.split("| layer | modules |", 1)[1].split("\n\n", 1)[0]
    layers: dict[str, int] = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rank = LAYERS.index(cells[0])
        for entry in cells[1].split(","):
            layers[entry.strip().strip("`")] = rank
    assert sorted(set(layers.values())) == list(range(len(LAYERS))), table
    return layers


def layer_of(module: str, layers: Mapping[str, int]) -> int | None:
    if module == "fiduciary":
        return layers.get("fiduciary.__init__")
    best = max(
        (e for e in layers if module == e or module.startswith(e + ".")), key=len, default=None
    )
    return None if best is None else layers[best]


def arrows_up(
    graph: Mapping[str, Iterable[str]], layers: Mapping[str, int]
) -> set[tuple[str, str]]:
    up: set[tuple[str, str]] = set()
    for module, targets in graph.items():
        here = layer_of(module, layers)
        assert here is not None, f"{module} is in no layer of {DOC.name}"
        for target in targets:
            there = layer_of(target, layers)
            assert there is not None, f"{target} is in no layer of {DOC.name}"
            if there > here:
                up.add((module, target))
    return up


def circles(graph: Mapping[str, Iterable[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def test_every_module_has_a_documented_layer() -> None:
    layers = documented_layers()
    graph = src_graph()
    assert len(graph) > 200
    unplaced = sorted(m for m in graph if layer_of(m, layers) is None)
    assert unplaced == [], f"add them to the layer table of {DOC}"
    assert layer_of("fiduciary.observability.otel", layers) == LAYERS.index("features")
    assert layer_of("fiduciary.wallet.cli", layers) == LAYERS.index("interfaces")
    assert layer_of("fiduciary", layers) == LAYERS.index("interfaces")


def test_no_import_points_up_a_layer() -> None:
    up = arrows_up(src_graph(), documented_layers())
    new = sorted(up - set(KNOWN_UP))
    assert new == [], f"imports pointing up a layer (docs/architecture.md, Layers): {new}"
    gone = sorted(set(KNOWN_UP) - up)
    assert gone == [], f"no longer in the code: remove them from KNOWN_UP: {gone}"


def test_no_import_circle_in_src_or_bench() -> None:
    found = circles(src_graph()) | circles(bench_graph())
    new = sorted(sorted(c) for c in found - set(KNOWN_CIRCLES))
    assert new == [], f"import circles: {new}"
    gone = sorted(sorted(c) for c in set(KNOWN_CIRCLES) - found)
    assert gone == [], f"no longer in the code: remove them from KNOWN_CIRCLES: {gone}"


def test_the_loop_does_not_import_the_agent() -> None:
    """The loop is given a frozen ``Runtime``, never the agent (nor what is built on it)."""
    graph = src_graph()
    loop = [m for m in graph if m == "fiduciary._loop" or m.startswith("fiduciary._loop.")]
    assert len(loop) > 1
    reached: set[str] = set()
    todo = [t for m in loop for t in graph[m]]
    while todo:
        current = todo.pop()
        if current not in reached:
            reached.add(current)
            todo.extend(graph.get(current, ()))
    agent = {"fiduciary.agent", "fiduciary._agent.decisions", "fiduciary._agent.cancelling"}
    assert agent & reached == set()


def test_the_reader_sees_type_checking_function_and_by_name_imports() -> None:
    """What the rules above rely on: no kind of import escapes the reader."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "import importlib\n"
        "from . import sibling\n"
        "if TYPE_CHECKING:\n"
        "    from ..agent import Agent\n"
        "def later():\n"
        "    from ..server.webhooks import sign\n"
        "    return importlib.import_module('fiduciary.observability.otel')\n"
    )
    names = imported(ast.parse(source), "fiduciary.pkg", {"fiduciary.pkg.sibling"})
    assert names == {
        "typing",
        "importlib",
        "fiduciary.pkg.sibling",
        "fiduciary.agent",
        "fiduciary.server.webhooks",
        "fiduciary.observability.otel",
    }
    layers = {"fiduciary.core": 0, "fiduciary.feature": 1}
    graph = {"fiduciary.core.a": {"fiduciary.feature.b"}, "fiduciary.feature.b": set()}
    assert arrows_up(graph, layers) == {("fiduciary.core.a", "fiduciary.feature.b")}
    circle = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(circle) == {frozenset({"a", "b", "c"})}

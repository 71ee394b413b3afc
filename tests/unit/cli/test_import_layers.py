"""The command line's layers: the terminal below the commands, domains registering their own.

Every ``import`` statement in ``src/fiduciary`` (deferred ones inside functions too) is an edge;
no cycle may pass through ``fiduciary.cli`` or ``fiduciary.wallet`` (imports under
``if TYPE_CHECKING:`` do not run, so they are not edges)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:`` (imports for the type checker only)."""
    nodes: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        nodes.append(node)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return nodes


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in (SRC / "fiduciary").rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                # `from package import module` reaches the module; otherwise the package itself
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names
                ]
            graph[name].update(t for t in targets if t in files and t != name)
    return graph


def _cycles_through(graph: dict[str, set[str]], prefixes: tuple[str, ...]) -> list[list[str]]:
    """One cycle per module of ``prefixes`` that reaches itself again."""
    found = []
    for start in sorted(n for n in graph if n.startswith(prefixes)):
        paths = {start: [start]}
        frontier = [start]
        while frontier:
            nxt: list[str] = []
            for node in frontier:
                for target in sorted(graph[node]):
                    if target == start:
                        found.append([*paths[node], start])
                        nxt = []
                        frontier = []
                        break
                    if target not in paths:
                        paths[target] = [*paths[node], target]
                        nxt.append(target)
                else:
                    continue
                break
            frontier = nxt
    return found


def test_no_import_cycle_passes_through_the_cli_or_the_wallet() -> None:
    graph = _graph()
    assert "fiduciary.cli.terminal" in graph["fiduciary.wallet.console"]  # the edge is seen
    assert _cycles_through(graph, ("fiduciary.cli", "fiduciary.wallet")) == []


def test_the_terminal_layer_imports_no_command_and_no_domain() -> None:
    graph = _graph()
    for below in ("fiduciary.cli._common", "fiduciary.cli.terminal"):
        above = {
            m
            for m in graph[below]
            if m in {"fiduciary.cli", "fiduciary.cli.app", "fiduciary.cli.runs"}
            or m.startswith(("fiduciary.wallet", "fiduciary.server"))
        }
        assert above == set(), below

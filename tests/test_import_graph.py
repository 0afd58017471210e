"""No import cycle anywhere in the tree: the installed packages, bench/ and examples/ (issue 22).

The graph has one node per module, named as Python imports it (`client/cli/__init__.py` is `fp8_policy.client.cli`, see
setup.py; `bench/run.py` is `bench.run`). Every import counts, those inside functions too: a lazy import that
closes a loop is still a loop a reader has to hold in their head (bench/run.py, live.py and scale.py imported each
other that way). `from pkg import name` is an edge to the module `pkg.name` when there is one, else to `pkg`.
Strongly connected components (Tarjan) of more than one module are the cycles.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "client": "fp8_policy.client",
    "db": "fp8_policy.db",
    "policy": "fp8_policy.policy",
    "service": "fp8_policy.service",
    "fp8_policy": "fp8_policy",
    "bench": "bench",
    "examples": "examples",
}


def tree_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the tree by its import name."""
    modules: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([package, *parts])] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(source: str, modules: dict[str, Path]) -> set[str]:
    """The tree's modules that `source` imports, anywhere in it (relative imports are not used in this tree)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(t for t in (_resolve(n, modules) for n in names) if t)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_tree_has_no_import_cycle():
    modules = tree_modules()
    assert "bench.run" in modules and "fp8_policy.client.cli" in modules and "examples.closed_loop" in modules
    graph = {name: imports_of(path.read_text(), modules) - {name} for name, path in modules.items()}
    assert cycles(graph) == []


def test_a_lazy_import_that_closes_a_loop_is_a_cycle():
    modules = {"bench.run": Path("run.py"), "bench.live": Path("live.py"), "bench.trees": Path("trees.py")}
    run = "from bench import live\nfrom bench.trees import OUT\n"
    live = "def main():\n    from bench.run import ensure_log_tree\n"
    graph = {"bench.run": imports_of(run, modules), "bench.live": imports_of(live, modules), "bench.trees": set()}
    assert graph["bench.run"] == {"bench.live", "bench.trees"}
    assert cycles(graph) == [["bench.live", "bench.run"]]
    graph["bench.live"] = set()
    assert cycles(graph) == []

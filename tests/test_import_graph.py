"""No import cycle anywhere in the tree: the installed packages, bench/ and examples/ (issue 22); inside service/,
no import climbs back up the flow of its feature packages (SERVICE_FLOW) and no route calls a repository.

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


# --- service/: no import climbs back up the flow ------------------------------------------------------------------
# The feature packages of service/ in the order a run flows through them: a package may import the ones before it,
# never one after it (the one that reads what it made, or that it would have to know about to be called back).
SERVICE = "fp8_policy.service"
SERVICE_FLOW = (
    "ingest",  # an upload's archive becomes stored series (the summary that follows is wired by the app)
    "runs",  # the stored runs: read, edit, delete, retry
    "scalars",  # every run's training scalars, kept and served
    "analysis",  # analysis and recommendation of a stored run
    "experiments",  # arms trained from a recommendation, judged against it
    "visual",  # heatmaps and charts
    "compare",  # runs side by side
    "configs",  # rendered configs kept with a run
    "alerts",  # webhooks for live events
    "live",  # live runs: pieces, events, their heatmap; finalize hands over to ingest
    "docs",
    "web",
)
# Rooms every feature shares; they import no feature package themselves.
SERVICE_SHARED = frozenset(
    {
        "errors",
        "limits",
        "settings",
        "deps",
        "openapi",
        "schema_base",
        "lanes",
        "single_flight",
        "storage",
        "auth",
        "transport",
        "security",
        "health",
    }
)
# What composes the features (imports anything, imported by no feature): the app, the commands, the demo.
SERVICE_TOP = frozenset({"app", "cli", "worker_cli", "after_ingest", "demo"})
# Climbs still there, each with why; an entry is removed when its import is (the test fails while it stays listed).
KNOWN_CLIMBS: dict[tuple[str, str], str] = {}


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and module.startswith(SERVICE + ".") else None


def climbing_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported), both without the `fp8_policy.service.` prefix, for every import inside service/ that
    goes against SERVICE_FLOW: a feature importing a later feature or the top, a shared room importing a feature
    or the top; a room in none of the lists is reported too (as importing itself), so a new package is placed."""
    order = {name: i for i, name in enumerate(SERVICE_FLOW)}
    found: set[tuple[str, str]] = set()
    for module, targets in graph.items():
        src = _room(module)
        if src is None:
            continue
        short = module.removeprefix(SERVICE + ".")
        if src not in order and src not in SERVICE_SHARED and src not in SERVICE_TOP:
            found.add((short, short))
            continue
        for target in targets:
            dst = _room(target)
            if dst is None or dst == src or src in SERVICE_TOP:
                continue
            climbs = (
                dst in SERVICE_TOP
                or (src in SERVICE_SHARED and dst not in SERVICE_SHARED)
                or (src in order and dst in order and order[dst] > order[src])
            )
            if climbs:
                found.add((short, target.removeprefix(SERVICE + ".")))
    return found


def _service_graph() -> dict[str, set[str]]:
    modules = tree_modules()
    return {
        name: imports_of(path.read_text(), modules) - {name}
        for name, path in modules.items()
        if name.startswith(SERVICE + ".")
    }


def test_no_import_climbs_back_up_inside_service() -> None:
    graph = _service_graph()
    rooms = {_room(name) for name in graph} - {None}
    assert {"ingest", "scalars", "compare", "storage", "configs"} <= rooms  # the walk sees the real packages
    climbs = climbing_imports(graph)
    assert climbs - set(KNOWN_CLIMBS) == set(), "imports against the flow (or a room in no list)"
    assert set(KNOWN_CLIMBS) - climbs == set(), "a known climb is gone: remove it from KNOWN_CLIMBS"


def test_the_flow_rule_catches_a_climbing_import_and_a_room_in_no_list() -> None:
    s = SERVICE + "."
    graph = {
        s + "ingest.pipeline": {s + "analysis.summary", s + "errors", s + "storage.archive"},
        s + "compare.actions": {s + "scalars.actions", s + "runs.actions"},
        s + "visual.actions": {s + "live.actions"},
        s + "storage.archive": {s + "runs.actions"},
        s + "runs.actions": {s + "app"},
        s + "app": {s + "live.routes"},
        s + "newroom.routes": set(),
    }
    assert climbing_imports(graph) == {
        ("ingest.pipeline", "analysis.summary"),
        ("visual.actions", "live.actions"),
        ("storage.archive", "runs.actions"),
        ("runs.actions", "app"),
        ("newroom.routes", "newroom.routes"),
    }


def test_no_route_calls_a_repository() -> None:
    """Routes go through their feature's `actions` (or reads); the SQL behind those is db/'s."""
    modules = tree_modules()
    found = []
    for name, path in modules.items():
        if not name.startswith(SERVICE + ".") or not name.rpartition(".")[2].endswith("routes"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fp8_policy.db"):
                found += [f"{name}: {a.name}" for a in node.names if a.name.endswith(("Repository", "RankStore"))]
    assert found == []


def test_every_folder_of_modules_is_a_package() -> None:
    """setup.py ships what `find_packages` finds: a folder of modules without `__init__.py` imports in the source
    tree (a namespace package) but is left out of the wheel. Folders shipped as package data are not packages."""
    data = {"client/collect/te_features"}  # files nvdlfw_inspect loads (pyproject.toml package-data)
    missing = [
        str(folder.relative_to(ROOT))
        for top in ("client", "db", "policy", "service")
        for folder in sorted({path.parent for path in (ROOT / top).rglob("*.py")})
        if "__pycache__" not in folder.parts and not (folder / "__init__.py").is_file()
    ]
    assert sorted(set(missing) - data) == []

"""No module over MAX_LINES lines in the code folders and in tests/ (Python and JavaScript): a module a reader can
hold at once. Test files have the same cap as the code: a test module is read to learn what the code promises, and a
long one is split by topic as a long code module is split along a seam (its shared fixtures and helpers in the
folder's conftest.py or in tests/support/).

OVER_LIMIT names the modules still over the limit, each with the seam to split it along; the test fails when a
module not named there goes over, and when a named one is back under the limit (so the list only ever shrinks).
A split module gets a docstring saying what belongs in each part.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("client", "db", "policy", "service", "fp8_policy", "bench", "examples", "tests")
SUFFIXES = (".py", ".js", ".mjs")
MAX_LINES = 400

# Still over MAX_LINES: module -> the seam to split it along.
OVER_LIMIT: dict[str, str] = {}


def line_counts(root: Path = ROOT) -> dict[str, int]:
    """Lines of every Python and JavaScript module under FOLDERS, by path relative to `root`."""
    counts: dict[str, int] = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                with path.open("rb") as handle:
                    counts[path.relative_to(root).as_posix()] = sum(1 for _ in handle)
    return counts


def size_problems(counts: dict[str, int], allowed: dict[str, str], limit: int = MAX_LINES) -> list[str]:
    problems = [
        f"{name}: {lines} lines (limit {limit}); split it along a seam"
        for name, lines in sorted(counts.items())
        if lines > limit and name not in allowed
    ]
    for name in sorted(allowed):
        if counts.get(name, 0) <= limit:
            problems.append(f"{name}: now {counts.get(name, 0)} lines (<= {limit}); remove it from OVER_LIMIT")
    return problems


def test_no_module_over_the_limit_beyond_the_named_ones() -> None:
    problems = size_problems(line_counts(), OVER_LIMIT)
    assert not problems, "\n".join(problems)


def test_the_check_sees_python_and_javascript_modules() -> None:
    counts = line_counts()
    assert "db/runs.py" in counts and "service/web/static/heatmap.js" in counts
    assert "tests/test_module_sizes.py" in counts and "tests/support/archives.py" in counts
    assert all(name.endswith(SUFFIXES) for name in counts)


def test_size_problems_names_new_and_shrunk_modules() -> None:
    counts = {"a.py": 401, "b.py": 420, "c.js": 300, "d.py": 400}
    problems = size_problems(counts, {"b.py": "seam", "c.js": "seam"})
    assert problems == [
        "a.py: 401 lines (limit 400); split it along a seam",
        "c.js: now 300 lines (<= 400); remove it from OVER_LIMIT",
    ]

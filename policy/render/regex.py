"""Exact-name regexes for nvdlfw_inspect's `layer_name_regex_pattern` (matched with `re.search`).

Belongs here: turning a set of layer names into an anchored, escaped alternation that matches exactly
those names, and its complement via a negative lookahead. Must not be here: YAML emission or any
knowledge of features.

Names that share a prefix and suffix around their first numeric path segment are factored, so
`model.layers.1.fc1`, `model.layers.2.fc1`, `model.layers.1.fc2`, `model.layers.2.fc2` become
`model\\.layers\\.(?:1|2)\\.(?:fc1|fc2)`. The factoring groups suffixes by their *identical* number
set, so the pattern denotes exactly the cross product that was given — never more.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

_NUMBERED = re.compile(r"^(?P<prefix>.+?)\.(?P<number>\d+)\.(?P<rest>.+)$")


def _alt(parts: Iterable[str]) -> str:
    parts = list(parts)
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def _numbered_groups(names: Iterable[str]) -> tuple[dict[str, dict[frozenset[str], set[str]]], list[str]]:
    """prefix -> number set -> suffixes, plus the names without a numeric segment."""
    by_prefix_rest: dict[tuple[str, str], set[str]] = defaultdict(set)
    plain: list[str] = []
    for name in names:
        match = _NUMBERED.match(name)
        if match is None:
            plain.append(name)
        else:
            by_prefix_rest[(match["prefix"], match["rest"])].add(match["number"])
    grouped: dict[str, dict[frozenset[str], set[str]]] = defaultdict(lambda: defaultdict(set))
    for (prefix, rest), numbers in by_prefix_rest.items():
        grouped[prefix][frozenset(numbers)].add(rest)
    return grouped, plain


def _number_key(number: str) -> tuple[int, str]:
    return (int(number), number)


def alternation(names: Iterable[str]) -> str:
    """An unanchored regex alternation that, once anchored, matches exactly `names` (escaped)."""
    unique = sorted(set(names))
    if not unique:
        raise ValueError("alternation needs at least one name")
    grouped, plain = _numbered_groups(unique)
    branches = [re.escape(name) for name in plain]
    for prefix in sorted(grouped):
        for numbers, rests in sorted(grouped[prefix].items(), key=lambda kv: sorted(kv[0], key=_number_key)):
            number_alt = _alt(sorted(numbers, key=_number_key))
            rest_alt = _alt(re.escape(rest) for rest in sorted(rests))
            branches.append(f"{re.escape(prefix)}\\.{number_alt}\\.{rest_alt}")
    return "|".join(branches)


def exact(names: Iterable[str]) -> str:
    """`^(...)$`: matches exactly the given names under `re.search`."""
    return f"^({alternation(names)})$"


def excluding(names: Iterable[str]) -> str:
    """Matches every name except the given ones (negative lookahead); `.*` when nothing is excluded."""
    names = list(names)
    if not names:
        return ".*"
    return f"^(?!(?:{alternation(names)})$).*"

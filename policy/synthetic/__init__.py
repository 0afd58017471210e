"""Synthetic Transformer Engine / nvdlfw_inspect debug-log trees with planted, machine-readable ground truth.

Belongs here: the module and layer naming of the model families we emulate, value profiles (`healthy`, `level`,
`ramp`, `step_at`, ...), `Scenario` (which profile each layer/tensor/stat gets), the named `SCENARIOS` with their
`PlantedTruth`, and `write_run`, which writes one metadata log and one statistics log per rank in the exact
formats of TE debug API / nvdlfw_inspect logs (https://github.com/NVIDIA/nvidia-dlfw-inspect). Used by the benchmark, the demo data, tests and the evaluation suite.
Must not be here: parsing or analysing logs, and any web or database import. The only side effect is
`write_run` writing the files it is asked to write; everything else is deterministic in `SyntheticRun.seed`.

Layout: `families` (model families, layer naming, `LayerSpec`) → `profiles` (`ProfileContext`, value profiles,
selectors, `Rule`, `Scenario`) → `sensitivity` (loss-sensitivity lines and values, `SyntheticRun.sensitivity`) →
`run` (`SyntheticRun`, `stats_matrix`, `sensitivity_matrix`) → `writer` (`write_run`, `WrittenRun`, line formats)
and `scenarios` (`PATTERNS`, `PlantedTruth`, `make_case`, `SCENARIOS`). Import from the package;
every public name is re-exported here.
"""

from __future__ import annotations

from fp8_policy.policy.synthetic.families import FAMILIES, Family, LayerSpec
from fp8_policy.policy.synthetic.profiles import (
    Profile,
    ProfileContext,
    Rule,
    Scenario,
    Value,
    Where,
    all_of,
    any_of,
    blocks,
    e8m0,
    everywhere,
    first_blocks,
    heads,
    healthy,
    last_blocks,
    level,
    named,
    ramp,
    roles,
    scale_jumps,
    split_stat,
    step_at,
    with_values,
)
from fp8_policy.policy.synthetic.run import (
    DEFAULT_STATS,
    PLAN_WORDS,
    SyntheticRun,
    matching_layers,
    sensitivity_matrix,
    stats_matrix,
)
from fp8_policy.policy.synthetic.scenarios import (
    FRONTIER_SCENARIOS,
    PATTERNS,
    SCENARIOS,
    PlantedTruth,
    ScenarioCase,
    make_case,
)
from fp8_policy.policy.synthetic.sensitivity import SENSITIVITY_FORMATS, sensitivity_name
from fp8_policy.policy.synthetic.writer import (
    DEFAULT_START,
    LINE_US,
    PLAN_ORDER,
    RankFiles,
    WrittenRun,
    stats_line,
    write_run,
)

__all__ = [
    "DEFAULT_START",
    "DEFAULT_STATS",
    "FAMILIES",
    "FRONTIER_SCENARIOS",
    "LINE_US",
    "PATTERNS",
    "PLAN_ORDER",
    "PLAN_WORDS",
    "SCENARIOS",
    "SENSITIVITY_FORMATS",
    "Family",
    "LayerSpec",
    "PlantedTruth",
    "Profile",
    "ProfileContext",
    "RankFiles",
    "Rule",
    "Scenario",
    "ScenarioCase",
    "SyntheticRun",
    "Value",
    "Where",
    "WrittenRun",
    "all_of",
    "any_of",
    "blocks",
    "e8m0",
    "everywhere",
    "first_blocks",
    "heads",
    "healthy",
    "last_blocks",
    "level",
    "make_case",
    "matching_layers",
    "named",
    "ramp",
    "roles",
    "scale_jumps",
    "sensitivity_matrix",
    "sensitivity_name",
    "split_stat",
    "stats_line",
    "stats_matrix",
    "step_at",
    "with_values",
    "write_run",
]

"""What each rendered artifact really keeps in BF16, read back from the artifact itself, and the check that it is
at least the JSON recommendation's BF16 set (issue 12: one decision, told the same way in every format).

Readers (one per format; the names of the run's layers are mapped the way each tool sees them):
* te-yaml: nvdlfw_inspect's `ConfigManager` resolves every layer name to its section (done by `ConfigChecker`,
  which passes the per-layer features here): Disable*Layer -> whole layer, Disable*GEMM -> its `gemms`.
* megatron: the `FP8_POLICY_ARGS` array (`--first-last-layers-bf16` with start/end counts: Megatron's rule
  `layer_no < start or layer_no >= num_layers - end` over the logged blocks) and the heredoc's precision-config
  matchers (`fnmatch` over each layer's Megatron `named_modules()` path, as Megatron's matcher does); heads are BF16
  in every script (output_layer is a plain ColumnParallelLinear, not a TE module: policy/render/megatron_head.py).
* hydra: the blocks missing from `fp8_layers` run wholly in BF16; heads are BF16 in bionemo by default.
* torchao: the snippet is executed and `module_filter_fn(nn.Linear, fqn)` asked for every layer.
The check: every skipped layer and every layer that ran in BF16 (`precision.whole_bf16_layers`) is wholly BF16 and every overridden GEMM is BF16 (its layer wholly, or that GEMM),
except the layers the format states it cannot apply (`not_applied` in its `AppliedPolicy`); and what the artifact
applies equals what the JSON's `formats` section says it applies.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from fp8_policy.policy.records import GEMMS, LayerGroup, PolicyDecision
from fp8_policy.policy.render import applied
from fp8_policy.policy.render.applied import AppliedPolicy, missing
from fp8_policy.policy.render.layout import body_blocks, is_one_based, layer_index, module_index, torch_fqn
from fp8_policy.policy.render.megatron import megatron_path
from fp8_policy.policy.render.precision import whole_bf16_layers

Applied = tuple[set[str], dict[str, set[str]]]  # (whole layers in BF16, layer -> GEMMs in BF16)


def te_yaml_applied(
    features_by_layer: Mapping[str, Mapping[str, Any]], layer_disable: frozenset[str], gemm_disable: frozenset[str]
) -> Applied:
    whole: set[str] = set()
    gemms: dict[str, set[str]] = {}
    for name, features in features_by_layer.items():
        if layer_disable & set(features):
            whole.add(name)
        for feature in gemm_disable & set(features):
            gemms.setdefault(name, set()).update(features[feature].get("gemms", ()))
    return whole, gemms


def _array(text: str) -> list[str]:
    match = re.search(r"^FP8_POLICY_ARGS=\($(.*?)^\)$", text, re.S | re.M)
    return shlex.split(match[1]) if match else []


def megatron_applied(text: str, decision: PolicyDecision) -> Applied:
    args = _array(text)
    whole = {layer.name for layer in decision.layers if layer.structure.group is LayerGroup.HEAD}
    blocks = body_blocks(decision)
    if "--first-last-layers-bf16" in args:
        start = int(args[args.index("--num-layers-at-start-in-bf16") + 1])
        end = int(args[args.index("--num-layers-at-end-in-bf16") + 1])
        ordered = list(blocks)
        for layer_no, index in enumerate(ordered):
            if layer_no < start or layer_no >= len(ordered) - end:
                whole.update(blocks[index])
    heredoc = re.search(r"<<'(\w+)'\n(.*?)\n\1$", text, re.S | re.M)
    if heredoc and "--te-precision-config-file" in args:
        config = yaml.safe_load(heredoc[2])
        patterns = [
            m["pattern"]
            for m in config["matchers"].values()
            if m.get("enabled", True)
            and m.get("type") == "glob"
            and config["configs"][m["config"]].get("training_recipe") == {}
        ]
        one_based = is_one_based(decision)
        for layer in decision.layers:
            if any(fnmatch.fnmatchcase(megatron_path(layer, one_based), p) for p in patterns):
                whole.add(layer.name)
    return whole, {}


def hydra_applied(text: str, decision: PolicyDecision) -> Applied:
    values = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, value = shlex.split(line)[0].split("=", 1)
            values[key] = value
    whole = {layer.name for layer in decision.layers if layer.structure.group is LayerGroup.HEAD}
    if "fp8_layers" in values:
        kept = set(yaml.safe_load(values["fp8_layers"]))
        one_based = is_one_based(decision)
        for index, names in body_blocks(decision).items():
            if module_index(index, one_based) + 1 not in kept:
                whole.update(names)
    return whole, {}


def torchao_applied(keep: Callable[[Any, str], bool], linear: Any, decision: PolicyDecision) -> Applied:
    one_based = is_one_based(decision)
    index = layer_index(decision)
    names = dict.fromkeys(
        [
            *(layer.name for layer in decision.layers),
            *whole_bf16_layers(decision),
            *(o.layer for o in decision.gemm_overrides),
        ]
    )
    return {name for name in names if not keep(linear, torch_fqn(name, index.get(name), one_based))}, {}


def compare(fmt: str, got: Applied, decision: PolicyDecision) -> list[str]:
    """Errors: requested BF16 the artifact does not apply (beyond what the format states), or a mismatch with
    the format's own `applied()` claim (what the JSON reports)."""
    claim = applied(decision, fmt)
    whole, gemms = got
    read = AppliedPolicy(
        fmt,
        tuple(sorted(whole)),
        {k: tuple(g for g in GEMMS if g in v) for k, v in gemms.items() if k not in whole},
        claim.not_applied,
    )
    errors = [f"{fmt} applies less than the JSON: {problem}" for problem in missing(read, decision)]
    if set(claim.bf16_layers) != whole:
        errors.append(f"{fmt}: the JSON says {sorted(claim.bf16_layers)} run in BF16, the artifact {sorted(whole)}")
    if claim.bf16_gemms != read.bf16_gemms:
        errors.append(f"{fmt}: the JSON says GEMMs {claim.bf16_gemms} in BF16, the artifact {read.bf16_gemms}")
    return errors

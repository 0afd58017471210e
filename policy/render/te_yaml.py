"""Transformer Engine debug-API config (nvdlfw_inspect YAML) for a `PolicyDecision`.

Belongs here: the sections of the TE debug YAML — layers disabled whole, one section per distinct
GEMM set of the per-GEMM overrides, a section for layers that already ran in high precision (disabled too, with
LogTensorStats), and FP8-stats monitoring for every remaining layer — plus their YAML emission.
Must not be here: regex construction (see `regex`), other dialects.

Rules followed (TE debug features in transformer_engine/debug/features, https://github.com/NVIDIA/TransformerEngine, and nvdlfw_inspect's ConfigManager): names are matched with anchored, escaped
`layer_name_regex_pattern`s (never `exact_layer_names`); every layer matches at most one enabled
section, the monitoring section being the complement of all others via a negative lookahead.
`DisableQuantization*` is emitted when TE >= 2.13 is known, `DisableFP8*` otherwise (it exists in
every TE with the debug API and is only deprecated on >= 2.13). The monitoring stats are the ones TE accepts for
the run's recipe and parameters (`precision`): `LogNvfp4TensorStats` under NVFP4, `overflows%` only under delayed
scaling, no weight `underflows%` / `overflows%` / `mse` with FP8/FP4 parameters. The debug API can only turn
quantization off, so a ladder rung other than BF16 is not applied here (the header says so).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import yaml

from fp8_policy.policy.records import QUANTIZED_TENSORS, PolicyDecision
from fp8_policy.policy.render import pipeline, precision, regex
from fp8_policy.policy.render.applied import AppliedPolicy
from fp8_policy.policy.render.layout import merged_overrides, te_version_tuple
from fp8_policy.policy.render.options import RenderedPolicy, RenderOptions
from fp8_policy.policy.vocabulary import MEDIA_TYPES

MEDIA_TYPE = MEDIA_TYPES["te-yaml"]
FILENAME = "fp8_debug_config.yaml"
HIGH_PRECISION_STATS = ("min", "max", "mean", "std", "l1_norm")


class _Dumper(yaml.SafeDumper):
    """SafeDumper with single-quoted regexes and flow-style short lists."""


class _Quoted(str):
    pass


class _Flow(list[str]):
    pass


_Dumper.add_representer(_Quoted, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", str(v), style="'"))
_Dumper.add_representer(_Flow, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", list(v), flow_style=True))


def disable_feature_names(decision: PolicyDecision, options: RenderOptions) -> tuple[str, str]:
    """(layer feature, GEMM feature) to emit, from the forced option or the TE version."""
    family = options.disable_features
    if family not in (None, "fp8", "quantization"):
        raise ValueError(f"disable_features must be 'fp8', 'quantization' or None, not {family!r}")
    if family is None:
        version = te_version_tuple(decision.te_version)
        family = "quantization" if version is not None and version >= (2, 13) else "fp8"
    if family == "quantization":
        return "DisableQuantizationLayer", "DisableQuantizationGEMM"
    return "DisableFP8Layer", "DisableFP8GEMM"


def fp8_stats(decision: PolicyDecision) -> list[str]:
    """LogFp8TensorStats stats of the outer recipe's activation/gradient: TE 2.4-2.6 only knows underflows%;
    overflows% needs DelayedScaling (weights may get fewer, see `precision.fp8_stats`)."""
    return precision.fp8_stats(decision, decision.recipe.name, "activation")


def gemm_overrides(decision: PolicyDecision) -> dict[str, tuple[str, ...]]:
    """Per-GEMM overrides of the layers not disabled whole."""
    skipped = set(precision.skipped_layers(decision))
    return {name: gemms for name, gemms in merged_overrides(decision).items() if name not in skipped}


def applied(decision: PolicyDecision) -> AppliedPolicy:
    """Exact: DisableFP8Layer for skipped layers and for layers that ran in BF16, DisableFP8GEMM with exactly the
    overridden GEMMs."""
    result = AppliedPolicy("te-yaml", tuple(precision.whole_bf16_layers(decision)), gemm_overrides(decision))
    return pipeline.qualify(result, decision)  # names not known to be global blocks: never exact


def quant_stats_feature(decision: PolicyDecision, recipe_name: str, freq: int) -> dict[str, Any]:
    """{feature: config} watching the quantized tensors of layers that run under `recipe_name`."""
    nvfp4 = recipe_name == precision.NVFP4
    structs = []
    for tensor in QUANTIZED_TENSORS:
        if nvfp4:
            stats = precision.nvfp4_stats(decision, tensor)
        else:
            stats = precision.fp8_stats(decision, recipe_name, tensor)
        if stats:
            structs.append({"tensor": tensor, "stats": _Flow(stats), "freq": freq})
    feature = "LogNvfp4TensorStats" if nvfp4 else "LogFp8TensorStats"
    return {feature: {"enabled": True, "tensors_struct": structs}}


def log_tensor_stats(freq: int) -> dict[str, Any]:
    """TE's LogTensorStats on the three GEMM inputs: safe on layers that run in high precision."""
    return {
        "enabled": True,
        "stats": _Flow(HIGH_PRECISION_STATS),
        "tensors": _Flow(QUANTIZED_TENSORS),
        "freq": freq,
    }


def section(names: list[str], features: dict[str, Any]) -> dict[str, Any]:
    """An enabled section matching exactly `names`."""
    return {
        "enabled": True,
        "layers": {"layer_name_regex_pattern": _Quoted(regex.exact(names))},
        "transformer_engine": features,
    }


def rest_section(excluded: set[str], features: dict[str, Any]) -> dict[str, Any]:
    """An enabled section matching every layer except `excluded` (the complement of the other sections)."""
    return {
        "enabled": True,
        "layers": {"layer_name_regex_pattern": _Quoted(regex.excluding(sorted(excluded)))},
        "transformer_engine": features,
    }


def dump_sections(header: list[str], sections: list[tuple[str, str, dict[str, Any]]]) -> str:
    """Header comment lines, then each section under its own comment."""
    parts = ["\n".join(header)]
    for name, comment, body in sections:
        dumped = yaml.dump({name: body}, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=2**31 - 1)
        parts.append(f"# {comment}\n{dumped.rstrip()}")
    return "\n\n".join(parts) + "\n"


def _covered(decision: PolicyDecision) -> set[str]:
    """Layers with a disable section: skipped whole or with per-GEMM overrides."""
    return set(precision.skipped_layers(decision)) | set(gemm_overrides(decision))


def _already_high_precision(decision: PolicyDecision, covered: set[str]) -> list[str]:
    """Layers that ran in high precision without being skipped (e.g. a head under autocast(enabled=False)) and stay
    there (`precision.ran_in_bf16`)."""
    return [name for name in precision.ran_in_bf16(decision) if name not in covered]


def build_sections(decision: PolicyDecision, options: RenderOptions) -> list[tuple[str, str, dict[str, Any]]]:
    """(section name, comment, section body) in emission order; bodies are plain YAML-able dicts."""
    layer_feature, gemm_feature = disable_feature_names(decision, options)
    freq = options.stats_freq
    monitor = {"LogTensorStats": log_tensor_stats(freq)} if options.monitor_disabled else {}
    sections: list[tuple[str, str, dict[str, Any]]] = []
    skipped = precision.skipped_layers(decision)
    if skipped:
        features = {layer_feature: {"enabled": True}, **monitor}
        comment = f"{len(skipped)} layer(s) run fully in high precision (all of fprop/dgrad/wgrad)"
        sections.append(("fp8_disabled_layers", comment, section(skipped, features)))
    by_gemms: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for layer, gemms in gemm_overrides(decision).items():
        by_gemms[gemms].append(layer)
    for gemms, layers in by_gemms.items():
        features = {gemm_feature: {"enabled": True, "gemms": _Flow(gemms)}, **monitor}
        comment = f"{len(layers)} layer(s) keep GEMM(s) {', '.join(gemms)} in high precision"
        sections.append((f"fp8_disabled_gemms_{'_'.join(gemms)}", comment, section(layers, features)))
    covered = _covered(decision)
    high = _already_high_precision(decision, covered)
    if high:
        # The disable feature keeps them in BF16 even if the model stops doing so; on a layer that already runs in
        # high precision TE never consults it (transformer_engine/debug/pytorch/debug_quantization.py,
        # DebugQuantizer.get_tensors_plan asks fp8_gemm_enabled only with a parent quantizer).
        comment = "already ran in high precision in the analysed run: kept there, high-precision stats only"
        features = {layer_feature: {"enabled": True}, "LogTensorStats": log_tensor_stats(freq)}
        sections.append(("high_precision_layers_stats", comment, section(high, features)))
    remaining = rest_section(covered | set(high), quant_stats_feature(decision, decision.recipe.name, freq))
    comment = "every other TE linear layer stays quantized; keep monitoring its quantization stats"
    sections.append(("fp8_stats_remaining_layers", comment, remaining))
    return sections


def stats_note(decision: PolicyDecision, freq: int) -> str:
    """The header line saying which quantization-stats feature watches the quantized layers, and why."""
    if decision.recipe.name == precision.NVFP4:
        line = f"# Quantized layers log LogNvfp4TensorStats (nvfp4_underflows%, nvfp4_mse) every {freq} steps"
        line += " (LogFp8TensorStats' bare stats raise under NVFP4)"
    else:
        line = f"# Quantized layers log LogFp8TensorStats every {freq} steps"
        if decision.recipe.name != "delayed":
            line += " (no overflows%: TE accepts it only under delayed scaling)"
    if decision.fp8_param:
        line += "; FP8/FP4 parameters: no weight underflows%/overflows%/mse (no high-precision weight)"
    elif not decision.weights_logged:
        line += (
            "; the analysed run logged no weight statistics (FP8 primary weights?): no weight underflows%/overflows%"
            "/mse, which TE refuses without a high-precision weight"
        )
    return line + "."


def unapplied_note(decision: PolicyDecision) -> list[str]:
    """Header lines for ladder `bf16` rungs the JSON's BF16 set does not contain (not applied)."""
    names = precision.unapplied_bf16(decision)
    if not names:
        return []
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return [
        f"# NOT applied: the precision ladder finds no low-precision rung for {len(names)} layer(s) the"
        f" recommendation keeps in FP8 ({shown}); follow its rationale (e.g. re-run with the new recipe first).",
    ]


def closing_notes(decision: PolicyDecision, options: RenderOptions) -> list[str]:
    """The header's last lines, the same in the te-yaml and te-monitor files: the unapplied ladder rungs, what
    the quantized layers log, and how TE's debug API loads the file."""
    return [
        *unapplied_note(decision),
        stats_note(decision, options.stats_freq),
        "# Sections are disjoint (nvdlfw allows one enabled section per layer); names match exactly.",
        "# Use: debug_api.initialize(config_file=<this file>,"
        " feature_dirs=[<transformer_engine>/debug/features], log_dir=...)",
    ]


def _header(decision: PolicyDecision, options: RenderOptions, high: int) -> list[str]:
    layer_feature, gemm_feature = disable_feature_names(decision, options)
    version = decision.te_version or "unknown"
    lines = [
        "# Transformer Engine debug-API config (nvdlfw_inspect) generated by fp8-policy.",
        f"# {applied(decision).statement()}",
        f"# FP8 recipe: {decision.recipe.name} ({decision.recipe.class_path})",
        f"# TE version: {version} -> {layer_feature} / {gemm_feature}"
        " (DisableQuantization* needs TE >= 2.13; DisableFP8* works on TE >= 2.4).",
    ]
    skipped = precision.skipped_layers(decision)
    if skipped:
        lines.append(f"# Runs these {len(skipped)} layer(s) fully in high precision (BF16):")
        lines += [f"#   {name}" for name in skipped]
    overrides = gemm_overrides(decision)
    if overrides:
        lines.append(f"# Keeps selected GEMMs of these {len(overrides)} layer(s) in high precision:")
        lines += [f"#   {name}: {', '.join(gemms)}" for name, gemms in overrides.items()]
    if high:
        lines.append(
            f"# {high} layer(s) already ran in high precision without being skipped (e.g. a head under"
            f" te.autocast(enabled=False)): kept there ({layer_feature}), with LogTensorStats, not LogFp8TensorStats."
        )
    recipes = precision.layer_recipes(decision)
    if recipes:
        rungs = sorted(set(recipes.values()))
        lines.append(
            f"# NOT applied here: {len(recipes)} layer(s) of the precision ladder run under another recipe"
            f" ({', '.join(rungs)}); the debug API can only turn quantization off. Apply them with"
            " apply_policy(backend='te') or the Megatron --te-precision-config-file."
        )
    return lines + closing_notes(decision, options)


def render(decision: PolicyDecision, options: RenderOptions) -> RenderedPolicy:
    """The TE debug YAML for `decision` (one pipeline stage's, `options.pp_stage`, when the logs name blocks per
    stage: `pipeline.for_stage`)."""
    decision, stage_lines = pipeline.for_stage(decision, options.pp_stage, "te-yaml")
    high_count = len(_already_high_precision(decision, _covered(decision)))
    header = _header(decision, options, high_count) + stage_lines
    content = dump_sections(header, build_sections(decision, options))
    filename = pipeline.stage_filename(FILENAME, options.pp_stage)
    return RenderedPolicy(content=content, media_type=MEDIA_TYPE, filename=filename)

"""Tests for policy.parse.metadata_log: line formats (fp8-log-format.md §1.3), merging, the real bionemo logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fp8_policy.policy.names import split_metric_name
from fp8_policy.policy.parse.metadata_log import MetadataLog, merge_metadata, parse_metadata_lines
from fp8_policy.policy.records import LayerPlan, Precision
from fp8_policy.policy.synthetic import PLAN_ORDER

FIXTURES = Path(__file__).resolve().parents[3].parent / "shared/fixtures/bionemo"
METADATA_LOGS = {
    "esm2": FIXTURES / "dummy_logs_esm2/rank_0/nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-0.log",
    "llama3": FIXTURES / "dummy_logs_llama3/rank_0/nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-0.log",
}
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"real bionemo logs not found at {FIXTURES}")

TS = "2026-11-21 23:19:16,265 - INFO - "
QKV = "model.module.decoder.layers.3.self_attention.linear_qkv"
GEMMS = PLAN_ORDER


def _plan_lines(layer: str, plan: str, gemms: tuple[tuple[str, str], ...] = GEMMS) -> list[str]:
    return [f"{TS}LAYER={layer}: Tensor: {tensor}, gemm {gemm} - {plan}" for tensor, gemm in gemms]


# --- one line at a time -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "layer", "expected"),
    [
        # TE <= 2.12 (real ESM2 lines)
        (
            "2026-01-15 23:06:33,943 - INFO - LAYER=model.esm.encoder.layers.1.self_attention.layernorm_qkv: "
            "Tensor: activation, gemm fprop - FP8 Quantize",
            "model.esm.encoder.layers.1.self_attention.layernorm_qkv",
            LayerPlan(
                "model.esm.encoder.layers.1.self_attention.layernorm_qkv", {("activation", "fprop"): "FP8 Quantize"}
            ),
        ),
        (
            "2026-01-15 23:06:39,688 - INFO - LAYER=model.esm.encoder.layers.1.layernorm_mlp.fc1: "
            "Tensor: gradient, gemm wgrad - FP8 Quantize",
            "model.esm.encoder.layers.1.layernorm_mlp.fc1",
            LayerPlan("model.esm.encoder.layers.1.layernorm_mlp.fc1", {("gradient", "wgrad"): "FP8 Quantize"}),
        ),
        (
            "2026-01-15 23:06:34,116 - INFO - LAYER=model.esm.encoder.layers.1.self_attention.layernorm_qkv: "
            "Feature=LogFp8TensorStats, API=inspect_tensor: activation",
            "model.esm.encoder.layers.1.self_attention.layernorm_qkv",
            LayerPlan("model.esm.encoder.layers.1.self_attention.layernorm_qkv", features={"LogFp8TensorStats"}),
        ),
        (
            "2026-01-15 23:06:34,116 - INFO - LAYER=model.lm_head: FP8 Disabled",
            "model.lm_head",
            LayerPlan("model.lm_head", disabled=True),
        ),
        # TE >= 2.13 (TE-style lines)
        (
            f"{TS}LAYER={QKV}: Tensor: gradient, gemm wgrad - Quantize",
            QKV,
            LayerPlan(QKV, {("gradient", "wgrad"): "Quantize"}),
        ),
        (
            f"{TS}LAYER=model.module.output_layer: Tensor: activation, gemm fprop - High Precision",
            "model.module.output_layer",
            LayerPlan("model.module.output_layer", {("activation", "fprop"): "High Precision"}),
        ),
        (
            f"{TS}LAYER={QKV}: Tensor: weight, gemm fprop - modify_tensor()",
            QKV,
            LayerPlan(QKV, {("weight", "fprop"): "modify_tensor()"}),
        ),
        (
            f"{TS}LAYER={QKV}: Tensor: output, gemm fprop - High Precision",
            QKV,
            LayerPlan(QKV, {("output", "fprop"): "High Precision"}),
        ),
        *(
            (f"{TS}LAYER={QKV}: Feature={feature}, API={api}", QKV, LayerPlan(QKV, features={feature}))
            for feature, api in (
                ("LogFp8TensorStats", "inspect_tensor: gradient"),
                ("LogTensorStats", "look_at_tensor_before_process: activation"),
                ("LogNvfp4TensorStats", "inspect_tensor: weight"),
                ("PerTensorScaling", "process_tensor: fprop, activation"),
                ("FakeQuant", "process_tensor: dgrad, gradient"),
            )
        ),
        (
            f"{TS}LAYER=model.module.decoder.layers.1.mlp.linear_fc2: Quantization Disabled",
            "model.module.decoder.layers.1.mlp.linear_fc2",
            LayerPlan("model.module.decoder.layers.1.mlp.linear_fc2", disabled=True),
        ),
        # nvdlfw generic LogTensorStats
        (
            "2026-11-21 23:20:55,701 - INFO - LAYER=model.fc1: Feature=LogTensorStats, API=log_tensor_stats, "
            "TENSOR=activation: Called",
            "model.fc1",
            LayerPlan("model.fc1", features={"LogTensorStats"}),
        ),
    ],
)
def test_parse_metadata_lines_reads_layer_messages(line: str, layer: str, expected: LayerPlan) -> None:
    log = parse_metadata_lines([line])

    assert log.plans == {layer: expected}
    assert log.layer_order == [layer]
    assert (log.lines_read, log.lines_unrecognised) == (1, 0)


@pytest.mark.parametrize(
    "line",
    [
        "2026-01-15 23:06:30,348 - INFO - Default logging to file enabled at ./logs/fp8_stats_logs_esm2/rank_0",
        "2026-01-15 23:06:31,042 - INFO - Reading config from ./fp8_stats.yaml.",
        "2026-01-15 23:06:31,042 - INFO - Reading config from Python dictionary.",
        "2026-01-15 23:06:31,042 - INFO - Loaded configs for ['example_fp8_tensor_stat_collection'].",
        "2026-01-15 23:06:31,042 - DEBUG - Debug API call 'inspect_tensor' encountered at the line: a.py.12",
        "2026-01-15 23:06:31,042 - DEBUG - Registered feature LogTensorStats in base.",
        "2026-11-21 23:20:55,701 - WARNING - LAYER=model.fc1: `reduction_group` not found and `skip_reduction` is "
        "False. Skipping reduction.",
    ],
)
def test_parse_metadata_lines_accepts_informational_messages(line: str) -> None:
    log = parse_metadata_lines([line])

    assert log == MetadataLog(lines_read=1)


@pytest.mark.parametrize(
    "line",
    [
        "garbage",
        "Traceback (most recent call last):",
        "2026-01-15 23:06:31,042 - INFO - something new",
        f"{TS}LAYER={QKV}: Tensor: activation, gemm fprop - Maybe",
        f"{TS}LAYER={QKV}: an unknown message",
    ],
)
def test_parse_metadata_lines_counts_unrecognised_lines(line: str) -> None:
    log = parse_metadata_lines([line])

    assert log == MetadataLog(lines_read=1, lines_unrecognised=1)


def test_assigned_names_keep_order_and_are_unique() -> None:
    lines = [f"{TS}Assigned layer name: {name}" for name in ("model", "model.fc1", "model", "model.fc2", "model.fc1")]

    log = parse_metadata_lines(lines)

    assert log.assigned == ["model", "model.fc1", "model.fc2"]
    assert log.plans == {}
    assert (log.lines_read, log.lines_unrecognised) == (5, 0)


def test_crlf_blank_lines_and_a_whole_string_are_tolerated() -> None:
    text = "\r\n".join([f"{TS}Assigned layer name: model.fc1", "", "   ", *_plan_lines("model.fc1", "Quantize"), ""])

    from_lines = parse_metadata_lines(text.splitlines(keepends=True))
    from_string = parse_metadata_lines(text)

    assert from_lines.assigned == ["model.fc1"]
    assert from_lines.plans["model.fc1"].precision is Precision.FP8
    assert from_lines.lines_unrecognised == 0
    assert from_string.plans == from_lines.plans
    assert from_string.lines_unrecognised == 0


@pytest.mark.parametrize(
    ("lines", "precision"),
    [
        (_plan_lines(QKV, "Quantize"), Precision.FP8),
        (_plan_lines(QKV, "FP8 Quantize"), Precision.FP8),
        (_plan_lines(QKV, "High Precision"), Precision.HIGH),
        (_plan_lines(QKV, "Quantize", GEMMS[:4]) + _plan_lines(QKV, "High Precision", GEMMS[4:]), Precision.MIXED),
        (_plan_lines(QKV, "Quantize", GEMMS[:2]) + _plan_lines(QKV, "modify_tensor()", GEMMS[2:]), Precision.MIXED),
        ([*_plan_lines(QKV, "Quantize"), f"{TS}LAYER={QKV}: Quantization Disabled"], Precision.HIGH),
        ([f"{TS}LAYER={QKV}: Feature=LogFp8TensorStats, API=inspect_tensor: gradient"], Precision.UNKNOWN),
        # a repeated plan line (a second session appended to the file) keeps the high-precision one
        ([*_plan_lines(QKV, "High Precision"), *_plan_lines(QKV, "Quantize")], Precision.HIGH),
    ],
)
def test_plans_give_layer_precision(lines: list[str], precision: Precision) -> None:
    assert parse_metadata_lines(lines).plans[QKV].precision is precision


def test_layer_order_follows_first_layer_line() -> None:
    lines = [
        f"{TS}Assigned layer name: model.b",
        f"{TS}LAYER=model.c: Feature=LogFp8TensorStats, API=inspect_tensor: gradient",
        *_plan_lines("model.a", "Quantize"),
        *_plan_lines("model.c", "Quantize"),
        f"{TS}LAYER=model.d: FP8 Disabled",
    ]

    assert parse_metadata_lines(lines).layer_order == ["model.c", "model.a", "model.d"]


def test_known_layers_covers_assigned_and_planned_names() -> None:
    lines = [
        f"{TS}Assigned layer name: model.layers.1.layernorm_mlp",
        *_plan_lines("model.layers.1.layernorm_mlp.fc1", "Quantize"),
    ]

    assert parse_metadata_lines(lines).known_layers() == {
        "model.layers.1.layernorm_mlp",
        "model.layers.1.layernorm_mlp.fc1",
    }


# --- merge_metadata -----------------------------------------------------------------------------------------------


def test_merge_metadata_combines_ranks() -> None:
    rank0 = parse_metadata_lines(
        [
            f"{TS}Assigned layer name: model.a",
            f"{TS}Assigned layer name: model.b",
            *_plan_lines("model.a", "Quantize"),
            *_plan_lines("model.b", "Quantize"),
            f"{TS}LAYER=model.a: Feature=LogFp8TensorStats, API=inspect_tensor: gradient",
            "garbage",
        ]
    )
    rank1 = parse_metadata_lines(
        [
            f"{TS}Assigned layer name: model.b",
            f"{TS}Assigned layer name: model.c",
            *_plan_lines("model.c", "Quantize"),
            *_plan_lines("model.b", "Quantize"),
            f"{TS}LAYER=model.b: Quantization Disabled",
            f"{TS}LAYER=model.a: Feature=LogTensorStats, API=look_at_tensor_before_process: activation",
            *_plan_lines("model.a", "High Precision", GEMMS[:1]),
        ]
    )
    before = (repr(rank0), repr(rank1))

    merged = merge_metadata([rank0, rank1])

    assert merged.assigned == ["model.a", "model.b", "model.c"]
    assert merged.layer_order == ["model.a", "model.b", "model.c"]
    assert merged.plans["model.a"].precision is Precision.MIXED
    assert merged.plans["model.a"].features == {"LogFp8TensorStats", "LogTensorStats"}
    assert merged.plans["model.b"].precision is Precision.HIGH
    assert merged.plans["model.c"].precision is Precision.FP8
    assert (merged.lines_read, merged.lines_unrecognised) == (rank0.lines_read + rank1.lines_read, 1)
    assert (repr(rank0), repr(rank1)) == before


def test_merge_metadata_of_nothing_is_empty() -> None:
    assert merge_metadata([]) == MetadataLog()


# --- the real bionemo logs ----------------------------------------------------------------------------------------


def _real(run: str) -> MetadataLog:
    with METADATA_LOGS[run].open(encoding="utf-8", newline="") as handle:
        return parse_metadata_lines(handle)


@needs_fixtures
@pytest.mark.parametrize(
    ("run", "lines", "assigned", "plan_lines", "layers"),
    [("esm2", 253, 76, 156, 26), ("llama3", 91, 28, 54, 9)],
)
def test_real_metadata_logs_parse_completely(run: str, lines: int, assigned: int, plan_lines: int, layers: int) -> None:
    log = _real(run)

    assert (log.lines_read, log.lines_unrecognised) == (lines, 0)
    assert len(log.assigned) == assigned
    assert sum(len(plan.gemm_plans) for plan in log.plans.values()) == plan_lines
    assert len(log.layer_order) == layers
    assert all(len(plan.gemm_plans) == 6 for plan in log.plans.values())


@needs_fixtures
def test_real_metadata_logs_total_counts() -> None:
    logs = [_real(run) for run in sorted(METADATA_LOGS)]
    merged = merge_metadata(logs)

    assert sum(len(log.assigned) for log in logs) == 104  # the reference's 76 / 156 are the ESM2 log alone
    assert sum(len(plan.gemm_plans) for log in logs for plan in log.plans.values()) == 210
    assert merged.lines_read == 253 + 91


@needs_fixtures
def test_real_llama3_precisions() -> None:
    log = _real("llama3")

    assert log.plans["model.lm_head"].precision is Precision.HIGH
    assert log.plans["model.model.layers.1.layernorm_mlp.fc1"].precision is Precision.FP8
    assert "model.model.layers.1.layernorm_mlp" in log.assigned
    assert "model.model.layers.1.layernorm_mlp" not in log.plans
    assert "model.model.layers.1.layernorm_mlp.fc1" not in log.assigned
    assert log.plans["model.model.layers.1.self_attention.layernorm_qkv"].features == {"LogFp8TensorStats"}
    assert log.plans["model.model.layers.1.self_attention.proj"].features == set()


@needs_fixtures
def test_real_esm2_precisions() -> None:
    log = _real("esm2")

    high = {layer for layer, plan in log.plans.items() if plan.precision is Precision.HIGH}
    assert high == {"model.lm_head.dense", "model.lm_head.decoder"}
    assert log.layer_order[:4] == [
        "model.esm.encoder.layers.1.self_attention.layernorm_qkv",
        "model.esm.encoder.layers.1.self_attention.proj",
        "model.esm.encoder.layers.1.layernorm_mlp.fc1",
        "model.esm.encoder.layers.1.layernorm_mlp.fc2",
    ]
    assert not any(plan.disabled for plan in log.plans.values())


@needs_fixtures
@pytest.mark.parametrize("run", sorted(METADATA_LOGS))
def test_real_known_layers_split_real_metric_names_like_plain_splitting(run: str) -> None:
    stats_log = METADATA_LOGS[run].parents[1] / "nvdlfw_inspect_statistics_logs" / METADATA_LOGS[run].name
    names = {line.split(" - ", 2)[2].split()[0] for line in stats_log.read_text().splitlines()}
    known = _real(run).known_layers()

    split = {name: split_metric_name(name, known) for name in names}

    assert all(metric is not None and metric == split_metric_name(name) for name, metric in split.items())
    assert {metric.layer for metric in split.values() if metric} <= known


def test_renamed_logs_of_two_stages_merge_into_their_own_blocks() -> None:
    """Local naming: both pipeline stages log `layers.0`; renamed per rank first, their plans stay apart (stage 1's
    block 0 in BF16 does not turn stage 0's block 0 high precision, as merging first would)."""
    from fp8_policy.policy.parse.metadata_log import renamed

    def stage(plan: str) -> MetadataLog:
        lines = ["2026-01-15 23:06:31,201 - INFO - Assigned layer name: model.layers.0.fc1"]
        lines += [
            f"2026-01-15 23:06:31,201 - INFO - LAYER=model.layers.0.fc1: Tensor: {t}, gemm {g} - {plan}"
            for t, g in PLAN_ORDER
        ]
        return parse_metadata_lines(lines)

    merged = merge_metadata(
        [renamed(stage("Quantize"), lambda n: n), renamed(stage("High Precision"), lambda n: n.replace(".0.", ".4."))]
    )
    assert merged.assigned == ["model.layers.0.fc1", "model.layers.4.fc1"]
    assert (merged.plans["model.layers.0.fc1"].precision, merged.plans["model.layers.4.fc1"].precision) == (
        Precision.FP8,
        Precision.HIGH,
    )
    assert merge_metadata([stage("Quantize"), stage("High Precision")]).plans["model.layers.0.fc1"].precision == (
        Precision.HIGH
    )

"""Loss sensitivity on CPU (client/collect/sensitivity.py): its formulas, the collector's lines, and their ingest."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from fp8_policy.client.collect.emulated import emulated_dgrad, emulated_fprop, emulated_wgrad
from fp8_policy.client.collect.sensitivity import (
    MICRONATS,
    SENSITIVITY_FORMATS,
    GemmErrors,
    gemm_errors,
    layer_sensitivity,
    stat_name,
)
from fp8_policy.client.packing import pack_directory
from fp8_policy.collect import FP8StatsCollector
from fp8_policy.policy.names import split_metric_name
from tests.client.collect.test_ingest import Model
from tests.conftest import wait_for_run

LINE = re.compile(r"INFO - (\S+)\s+iteration=(\d+)\s+value=(\S+)")


def operands(seed: int = 0, outliers: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 32, generator=generator)
    w = torch.randn(48, 32, generator=generator) / 6
    if outliers:  # one value per 16-element block far above the rest, its weights damped (as trained models do)
        x[:, ::16] *= 64.0
        w[:, ::16] /= 64.0
    g = torch.randn(64, 48, generator=generator) / 64  # the gradient of a loss averaged over 64 tokens
    return x, w, g


def test_the_logged_values_follow_the_documented_formulas() -> None:
    x, w, g = operands()
    generator = torch.Generator().manual_seed(3)
    errors = gemm_errors(x, w, g, "mxfp8", generator)
    y, dx, dw = x @ w.t(), g @ w, g.t() @ x
    fisher_error = float(((g * (emulated_fprop(x, w, "mxfp8") - y)) ** 2).sum())
    assert errors.rows == 64 and errors.fprop_error == pytest.approx(fisher_error, rel=1e-6)
    values = errors.values()
    assert values["fprop"] == pytest.approx(0.5 * 64 * fisher_error * MICRONATS, rel=1e-6)
    dgrad_ratio = float(((emulated_dgrad(g, w, "mxfp8") - dx) ** 2).sum() / (dx**2).sum())
    input_fisher = float(((dx * x) ** 2).sum())
    assert values["dgrad"] == pytest.approx(0.5 * 64 * input_fisher * dgrad_ratio * MICRONATS, rel=1e-5)
    wgrad_ratio = float(((emulated_wgrad(g, x, "mxfp8") - dw) ** 2).sum() / (dw**2).sum())
    assert values["wgrad"] == pytest.approx(0.5 * 64 * float(((g * y) ** 2).sum()) * wgrad_ratio * MICRONATS, rel=1e-5)


def test_nothing_is_cast_in_bf16_and_finer_formats_cost_less() -> None:
    x, w, g = operands()
    assert gemm_errors(x, w, g, "bf16").values() == {"fprop": 0.0, "dgrad": 0.0, "wgrad": 0.0}
    plain = layer_sensitivity(x, w, g, ["nvfp4", "mxfp8"], torch.Generator().manual_seed(0))
    assert all(plain["nvfp4"][gemm] > plain["mxfp8"][gemm] > 0 for gemm in ("fprop", "dgrad", "wgrad"))


def test_outlier_channels_raise_the_nvfp4_fprop_sensitivity_far_more_than_mxfp8s() -> None:
    plain = layer_sensitivity(*operands(), ["nvfp4", "mxfp8"])
    spiky = layer_sensitivity(*operands(outliers=True), ["nvfp4", "mxfp8"])
    ratio = {name: run["nvfp4"]["fprop"] / run["mxfp8"]["fprop"] for name, run in (("plain", plain), ("spiky", spiky))}
    assert ratio["spiky"] > 10 * ratio["plain"]  # NVFP4's 16-element blocks flush the values beside each outlier
    # the same flushing with undamped weights: the outliers then carry the output and the error hardly matters
    x, w, g = operands(outliers=True)
    loud = layer_sensitivity(x, w * torch.where(torch.arange(32) % 16 == 0, 64.0, 1.0), g, ["nvfp4", "mxfp8"])
    assert loud["nvfp4"]["fprop"] / loud["mxfp8"]["fprop"] < 2 * ratio["plain"]


def test_feeds_of_one_step_add_up() -> None:
    x, w, g = operands()
    one, two = gemm_errors(x[:32], w, g[:32], "current"), gemm_errors(x[32:], w, g[32:], "current")
    both = GemmErrors()
    both.add(one)
    both.add(two)
    assert both.rows == 64 and both.fprop_error == pytest.approx(one.fprop_error + two.fprop_error)


def test_a_nan_in_a_feed_is_logged_as_not_finite() -> None:
    x, w, g = operands()
    x[0, 0] = float("nan")
    assert not math.isfinite(gemm_errors(x, w, g, "current").values()["fprop"])


def sensitivity_run(log_dir: Path, formats: list[str], steps: int = 4) -> list[tuple[str, int, float]]:
    torch.manual_seed(0)
    model = Model(n_layers=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    with FP8StatsCollector(model, log_dir, freq=2, sensitivity=formats) as collector:
        for _ in range(steps):
            for _micro in range(2):  # two micro-batches per step: fed and summed like TE's buffers
                model(torch.randn(4, 8, 32, generator=generator)).logsumexp(-1).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            collector.step()
        text = collector.stats_log.read_text()
    found = [LINE.search(line) for line in text.splitlines()]
    return [(m[1], int(m[2]), float(m[3])) for m in found if m is not None and m[1].endswith("_sensitivity")]


def test_the_collector_writes_one_line_per_layer_gemm_and_format_on_logged_steps(tmp_path: Path) -> None:
    lines = sensitivity_run(tmp_path / "logs", ["nvfp4", "block"])
    subs = ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")
    layers = [f"model.decoder.layers.{n}.{sub}" for n in (1, 2) for sub in subs] + ["model.output_layer"]
    assert {it for _, it, _ in lines} == {0, 2}
    expected = {
        stat_name(layer, gemm, fmt)
        for layer in layers
        for gemm in ("fprop", "dgrad", "wgrad")
        for fmt in ("nvfp4", "block")
    }
    names = {name for name, it, _ in lines if it == 0}
    assert names == expected and len(lines) == 2 * len(expected) and all(value >= 0 for *_, value in lines)
    for name in names:
        metric = split_metric_name(name)
        assert metric is not None and metric.stat == "sensitivity" and metric.layer in layers
        assert metric.tensor in ("output", "dgrad", "wgrad") and metric.recipe in ("nvfp4", "fp8_block_scaling")


def test_unknown_sensitivity_formats_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sensitivity formats"):
        FP8StatsCollector(Model(), tmp_path, sensitivity=["fp16"])
    assert set(SENSITIVITY_FORMATS) == {"nvfp4", "mxfp8", "current", "delayed", "block"}


def test_sensitivity_lines_ingest_with_zero_skipped_lines(client: TestClient, project: str, tmp_path: Path) -> None:
    lines = sensitivity_run(tmp_path / "logs", list(SENSITIVITY_FORMATS), steps=2)
    with pack_directory(tmp_path / "logs") as archive:
        response = client.post(
            "/api/v1/runs",
            files={"file": ("run.tar.gz", archive.read(), "application/gzip")},
            data={"project": project},
        )
    run = wait_for_run(client, response.json()["id"])
    assert run["status"] == "ready", run["error"]
    assert run["lines_skipped"] == 0 and run["ingest_report"]["unsplit_metric_names"] == []
    layers = {layer["name"]: layer for layer in client.get(f"/api/v1/runs/{run['id']}/layers").json()}
    stats = {(s["tensor"], s["stat"]) for s in layers["model.decoder.layers.1.mlp.linear_fc1"]["stats"]}
    assert {("output", "fp8_delayed_scaling_sensitivity"), ("wgrad", "nvfp4_sensitivity")} <= stats
    assert len(lines) == 9 * 3 * 5  # iteration 0 only: 9 layers x 3 GEMMs x 5 formats

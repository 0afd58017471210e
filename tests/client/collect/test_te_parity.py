"""Ground truth from Transformer Engine itself: the CPU collector reproduces what TE 2.20.2 logged on an H100.

The fixture (`../shared/fixtures/te_h100_parity`, next to the checkout) holds three `log_dir`s TE wrote for two
bias-free linears fed known tensors for four steps (growing activations, shrinking gradients): current scaling,
delayed scaling (with a current-scaling what-if) and block-scaling what-ifs. The tensors are regenerated here
exactly as its README describes, the collector runs with the same options, and every value must match: printed
values identical, mse to 2e-7 relative. mse is a float32 sum of 65536 squared errors, and its order differs
between TE's GPU reduction and the CPU: on `model.fc2_activation_mse` at iteration 3, TE logged 241560.6250, the
exactly rounded value is 241560.6650 (1.7e-7 away) and the collector writes 241560.6562 (1.3e-7 away), so 1e-7
cannot be promised for every line without TE's reduction order; all other mse lines agree to 1e-7. TE's own
`fp8_block_scaling_scale_inv_min/max` are not compared: TE reads them from its padded scale buffer (one is
-95602196480.0000); the last test checks that the analysis does not let such values drive a finding.

Skipped when the fixture folder is absent, except under CI (`CI=true`), where its absence fails the test.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from fp8_policy.collect import FP8StatsCollector

PARITY = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "te_h100_parity"
STATS_LOG = Path("nvdlfw_inspect_statistics_logs") / "nvdlfw_inspect_globalrank-0.log"
LINE = re.compile(r" - INFO - (?P<name>\S+) \t\t\t\t iteration=(?P<it>\d+) \t\t\t\t value=(?P<value>\S+)$")
TENSORS = ("activation", "gradient", "weight")
OPTIONS = {
    "current": {"recipe": "current", "stats": ["underflows%", "scale_inv_min", "scale_inv_max", "mse"]},
    "delayed": {
        "recipe": "delayed",
        "amax_history_len": 16,
        "amax_compute_algo": "max",
        "margin": 0,
        "stats": [
            "underflows%",
            "overflows%",
            "scale_inv_min",
            "scale_inv_max",
            "mse",
            "fp8_current_scaling_underflows%",
        ],
    },
    "whatif": {
        "recipe": "current",
        "stats": [
            "fp8_block_scaling_underflows%",
            "fp8_block_scaling_mse",
            "fp8_block_scaling_underflows%_columnwise",
        ],
    },
}
UNTRUSTED = ("fp8_block_scaling_scale_inv_min", "fp8_block_scaling_scale_inv_max")


@pytest.fixture(scope="module")
def parity() -> Path:
    if not PARITY.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"TE parity fixture missing at {PARITY}")
        pytest.skip(f"TE parity fixture not found at {PARITY}")
    return PARITY


def read_log(path: Path) -> dict[tuple[str, int], str]:
    out = {}
    for line in path.read_text().splitlines():
        match = LINE.search(line)
        assert match, line
        out[(match["name"], int(match["it"]))] = match["value"]
    return out


class Pair(nn.Module):
    """Two independent bias-free float32 linears, named model.fc1 and model.fc2 as nvdlfw_inspect names them."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(256, 512, bias=False)
        self.fc2 = nn.Linear(512, 256, bias=False)


def regenerate() -> tuple[Pair, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """The README's tensors: per layer x0, w, g0 from one generator seeded 1234, in this order."""
    g = torch.Generator().manual_seed(1234)
    model = Pair()
    inputs = {}
    for name, (fin, fout) in (("fc1", (256, 512)), ("fc2", (512, 256))):
        x0 = torch.randn(128, fin, generator=g) * torch.exp(torch.randn(128, fin, generator=g) * 2.5)
        w = torch.randn(fout, fin, generator=g) * 0.02 * torch.exp(torch.randn(fout, fin, generator=g) * 1.5)
        g0 = torch.randn(128, fout, generator=g) * torch.exp(torch.randn(128, fout, generator=g) * 3.0) * 1e-3
        with torch.no_grad():
            getattr(model, name).weight.copy_(w)
        inputs[name] = (x0, g0)
    return model, inputs


def collect(log_dir: Path, options: dict) -> dict[tuple[str, int], str]:
    model, inputs = regenerate()
    with FP8StatsCollector(model, log_dir, tensors=TENSORS, **options) as collector:
        for t in range(4):
            loss = torch.zeros(())
            for name in ("fc1", "fc2"):
                x0, g0 = inputs[name]
                x = (x0 * 4.0**t).requires_grad_(True)
                y = getattr(model, name)(x)
                loss = loss + (y.float() * (g0 * 0.5**t)).sum()
            loss.backward()
            collector.step()
    return read_log(log_dir / "rank_0" / STATS_LOG)


@pytest.mark.parametrize("run", sorted(OPTIONS))
def test_collector_reproduces_every_value_te_logged(parity: Path, tmp_path: Path, run: str) -> None:
    expected = {k: v for k, v in read_log(parity / run / STATS_LOG).items() if not k[0].endswith(UNTRUSTED)}
    ours = collect(tmp_path, OPTIONS[run])
    assert set(ours) == set(expected)
    assert len(expected) == {"current": 96, "delayed": 144, "whatif": 72}[run]
    mismatches, beyond_1e7 = [], []
    for key, te_value in sorted(expected.items()):
        value = ours[key]
        if key[0].endswith("mse") and value != te_value:
            if not math.isclose(float(value), float(te_value), rel_tol=2e-7, abs_tol=0.0):
                mismatches.append((key, te_value, value))
            if not math.isclose(float(value), float(te_value), rel_tol=1e-7, abs_tol=0.0):
                beyond_1e7.append(key)
        elif value != te_value:
            mismatches.append((key, te_value, value))
    assert not mismatches, mismatches
    assert len(beyond_1e7) <= 3, beyond_1e7  # the three large activation mse values of fc2 (see module docstring)


def test_analysis_is_not_moved_by_tes_impossible_block_scale_inv_values(parity: Path, tmp_path: Path) -> None:
    """The whatif run as TE logged it and the same run with the block scale_inv lines the collector computes
    (the padding-free values) give the same findings; the impossible value is named in a note, never a finding."""
    from bench.eval_ingest import parse_tree
    from fp8_policy.policy.analysis import analyze
    from fp8_policy.policy.recommend import recommend

    whatif = parity / "whatif"
    raw = read_log(whatif / STATS_LOG)
    assert raw[("model.fc1_weight_fp8_block_scaling_scale_inv_min", 0)] == "-95602196480.0000"
    options = {**OPTIONS["whatif"], "stats": [*OPTIONS["whatif"]["stats"], *UNTRUSTED]}
    ours = collect(tmp_path / "ours", options)
    assert ours[("model.fc1_weight_fp8_block_scaling_scale_inv_min", 0)] == "0.0156"
    assert ours[("model.fc1_activation_fp8_block_scaling_scale_inv_min", 2)] == "512.0000"  # TE: 0.0312
    assert ours[("model.fc2_gradient_fp8_block_scaling_scale_inv_max", 3)] == "0.0005"  # TE: 0.0625

    truth = tmp_path / "truth"
    (truth / STATS_LOG).parent.mkdir(parents=True)
    (truth / "nvdlfw_inspect_logs").mkdir()
    (truth / "nvdlfw_inspect_logs" / "nvdlfw_inspect_globalrank-0.log").write_text(
        (whatif / "nvdlfw_inspect_logs" / "nvdlfw_inspect_globalrank-0.log").read_text()
    )
    lines = []
    for line in (whatif / STATS_LOG).read_text().splitlines():
        match = LINE.search(line)
        assert match
        if match["name"].endswith(UNTRUSTED):
            line = line[: match.start("value")] + ours[(match["name"], int(match["it"]))]
        lines.append(line)
    (truth / STATS_LOG).write_text("\n".join(lines) + "\n")

    runs = parse_tree(whatif), parse_tree(truth)
    as_logged, corrected = analyze(runs[0]), analyze(runs[1])
    assert [f.to_dict() for f in as_logged.findings] == [f.to_dict() for f in corrected.findings]
    assert [row.to_dict() for row in as_logged.layers] == [row.to_dict() for row in corrected.layers]
    advice = [recommend(run).to_dict() for run in runs]
    for key in ("fp8_skip_layers", "gemm_overrides", "recipe", "findings", "precision_ladder", "expected_cost"):
        assert advice[0][key] == advice[1][key], key
    named = "model.fc1_weight_fp8_block_scaling_scale_inv_min rank 0 iteration 0 = -9.56022e+10 (negative)"
    assert any(named in note for note in as_logged.notes), as_logged.notes
    assert not any(named in note for note in corrected.notes)
    assert not any("fc1_weight_fp8_block_scaling_scale_inv" in f.summary for f in as_logged.findings)

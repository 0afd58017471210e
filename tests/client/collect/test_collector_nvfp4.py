"""NVFP4 in the collector (`nvfp4_underflows%` / `nvfp4_mse` lines) and emulated per-layer precision training."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from fp8_policy.client.collect.emulated import EmulatedLinear, convert_to_emulated_training, fake_quantize
from fp8_policy.client.collect.nvfp4 import quantize_nvfp4
from fp8_policy.collect import FP8StatsCollector, quantization_stats
from tests.client.collect.test_collector import fmt, read_metadata, read_stats


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 48, bias=False)
        self.fc2 = nn.Linear(48, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def one_step(model: nn.Module, collector: FP8StatsCollector) -> dict[str, torch.Tensor]:
    """One forward/backward; returns the operands fc1 saw (input, weight, output gradient)."""
    seen: dict[str, torch.Tensor] = {}
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(5)) * 3.0
    seen["activation"] = x
    seen["weight"] = model.fc1.weight.detach().clone()
    hidden = model.fc1(x)
    hidden.register_hook(lambda g: seen.__setitem__("gradient", g.clone()))
    model.fc2(torch.relu(hidden)).square().sum().backward()
    collector.step()
    return seen


class TestNvfp4Training:
    def test_lines_are_log_nvfp4_tensor_stats_of_the_operands(self, tmp_path: Path) -> None:
        torch.manual_seed(0)
        model = Pair()
        convert_to_emulated_training(model)
        stats = ["nvfp4_underflows%", "nvfp4_mse"]
        with FP8StatsCollector(
            model, tmp_path, recipe="nvfp4", stats=stats, nvfp4_stochastic_rounding=False
        ) as collector:
            seen = one_step(model, collector)
        lines = read_stats(tmp_path)
        assert {name for name, _ in lines} == {
            f"model.{layer}_{tensor}_{stat}"
            for layer in ("fc1", "fc2")
            for tensor in ("activation", "weight", "gradient")
            for stat in stats
        }
        for tensor, x in seen.items():
            expected = quantization_stats(x, recipe="nvfp4", two_d=tensor == "weight")
            assert lines[(f"model.fc1_{tensor}_nvfp4_underflows%", 0)] == fmt(expected["underflows%"])
            assert lines[(f"model.fc1_{tensor}_nvfp4_mse", 0)] == fmt(expected["mse"])
        metadata = read_metadata(tmp_path)
        assert "LAYER=model.fc1: Feature=LogNvfp4TensorStats, API=inspect_tensor: activation" in metadata
        assert not any("LogFp8TensorStats" in line for line in metadata)

    def test_weights_use_16x16_tiles(self, tmp_path: Path) -> None:
        model = Pair()
        with torch.no_grad():
            model.fc1.weight.fill_(1.0)
            model.fc1.weight[0, 0] = 1e3  # flushes its whole 16x16 tile under 2-D scaling, one row under 1x16
        with FP8StatsCollector(model, tmp_path, recipe="nvfp4", stats=["nvfp4_underflows%"], tensors=["weight"]) as c:
            one_step(model, c)
        assert read_stats(tmp_path)[("model.fc1_weight_nvfp4_underflows%", 0)] == fmt(100 * 255 / (48 * 32))

    def test_bare_fp8_stats_are_refused_under_nvfp4_as_te_refuses_them(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="LogNvfp4TensorStats"):
            FP8StatsCollector(Pair(), tmp_path, recipe="nvfp4", stats=["underflows%"])

    @pytest.mark.parametrize("stat", ["nvfp4_scale_inv_min", "nvfp4_underflows%_columnwise", "nvfp4_overflows%"])
    def test_stats_log_nvfp4_tensor_stats_does_not_know_are_refused(self, tmp_path: Path, stat: str) -> None:
        with pytest.raises(ValueError):
            FP8StatsCollector(Pair(), tmp_path, recipe="nvfp4", stats=[stat])


def test_nvfp4_what_if_next_to_fp8_current_scaling(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = Pair()
    stats = ["underflows%", "mse", "nvfp4_underflows%", "nvfp4_mse"]
    with FP8StatsCollector(model, tmp_path, stats=stats, nvfp4_stochastic_rounding=False) as collector:
        seen = one_step(model, collector)
    lines = read_stats(tmp_path)
    for tensor, x in seen.items():
        fp8 = quantization_stats(x, fp8_format="E5M2" if tensor == "gradient" else "E4M3")
        fp4 = quantization_stats(x, recipe="nvfp4", two_d=tensor == "weight")
        assert lines[(f"model.fc1_{tensor}_underflows%", 0)] == fmt(fp8["underflows%"])
        assert lines[(f"model.fc1_{tensor}_nvfp4_underflows%", 0)] == fmt(fp4["underflows%"])
        assert lines[(f"model.fc1_{tensor}_nvfp4_mse", 0)] == fmt(fp4["mse"])
    metadata = read_metadata(tmp_path)
    for feature in ("LogFp8TensorStats", "LogNvfp4TensorStats"):
        assert f"LAYER=model.fc1: Feature={feature}, API=inspect_tensor: gradient" in metadata


class TestEmulatedTraining:
    def test_forward_is_the_gemm_of_the_quantized_operands(self) -> None:
        model = Pair()
        assert convert_to_emulated_training(model, {"model.fc2": "bf16"}) == {"model.fc1": "nvfp4", "model.fc2": "bf16"}
        assert isinstance(model.fc1, EmulatedLinear)
        x = torch.randn(16, 32, generator=torch.Generator().manual_seed(2))
        expected = quantize_nvfp4(x).dequantized @ quantize_nvfp4(model.fc1.weight.detach(), two_d=True).dequantized.t()
        torch.testing.assert_close(model.fc1(x), expected)
        torch.testing.assert_close(model.fc2(torch.ones(2, 48)), torch.ones(2, 48) @ model.fc2.weight.t())

    @pytest.mark.parametrize("precision", ["nvfp4", "mxfp8", "block", "current"])
    def test_gradients_stay_close_to_full_precision(self, precision: str) -> None:
        torch.manual_seed(3)
        reference, emulated = Pair(), Pair()
        emulated.load_state_dict(reference.state_dict())
        convert_to_emulated_training(emulated, default=precision)
        x = torch.randn(64, 32, generator=torch.Generator().manual_seed(4))
        for model in (reference, emulated):
            model(x).square().mean().backward()
        for ref, emu in zip(reference.parameters(), emulated.parameters(), strict=True):
            assert emu.grad is not None and ref.grad is not None
            cosine = torch.nn.functional.cosine_similarity(ref.grad.flatten(), emu.grad.flatten(), dim=0)
            assert cosine > (0.95 if precision == "nvfp4" else 0.98), precision
            assert not torch.equal(ref.grad, emu.grad)

    def test_wgrad_hadamard_transform_cancels_without_quantization(self) -> None:
        from fp8_policy.client.collect.emulated import _rht_last_dim

        a, b = torch.randn(8, 48), torch.randn(5, 48)
        torch.testing.assert_close(_rht_last_dim(a) @ _rht_last_dim(b).t(), a @ b.t(), rtol=1e-5, atol=1e-5)

    def test_bf16_is_the_identity_and_unknown_precisions_or_layers_raise(self) -> None:
        x = torch.randn(4, 16)
        assert fake_quantize(x, "bf16", "input") is x
        with pytest.raises(ValueError, match="unknown precision"):
            convert_to_emulated_training(Pair(), default="fp2")
        with pytest.raises(ValueError, match="model.fc9"):
            convert_to_emulated_training(Pair(), {"model.fc9": "mxfp8"})


class TestTeConfig:
    SECTION = {
        "nvfp4_stats": {
            "enabled": True,
            "layers": {"layer_name_regex_pattern": "fc1"},
            "transformer_engine": {
                "LogNvfp4TensorStats": {
                    "enabled": True,
                    "tensors_struct": [
                        {"tensor": "activation", "stats": ["underflows%", "mse"], "freq": 2},
                        {"tensor": "gradient", "stats": ["underflows%"], "freq": 5, "start_step": 0, "end_step": 80},
                    ],
                },
                "LogFp8TensorStats": {
                    "enabled": True,
                    "tensors": ["activation"],
                    "stats": ["mxfp8_underflows%"],
                    "freq": 2,
                },
            },
        }
    }

    def test_log_nvfp4_tensor_stats_sections_become_nvfp4_stat_names(self, tmp_path: Path) -> None:
        from fp8_policy.collect import options_from_te_config

        options = options_from_te_config(self.SECTION)
        assert options["layers"] == "fc1"
        by_tensor = {entry["tensor"]: entry for entry in options["tensors_struct"]}
        assert by_tensor["activation"]["stats"] == ["mxfp8_underflows%", "nvfp4_underflows%", "nvfp4_mse"]
        assert by_tensor["gradient"] == {
            "tensor": "gradient",
            "stats": ["nvfp4_underflows%"],
            "freq": 5,
            "start_step": 0,
            "end_step": 80,
        }
        model = Pair()
        with FP8StatsCollector(model, tmp_path, recipe="nvfp4", **options) as collector:
            for _ in range(3):
                one_step(model, collector)
        assert sorted(read_stats(tmp_path)) == sorted(
            [
                (f"model.fc1_activation_{s}", i)
                for s in ("nvfp4_underflows%", "nvfp4_mse", "mxfp8_underflows%")
                for i in (0, 2)
            ]
            + [("model.fc1_gradient_nvfp4_underflows%", 0)]
        )

    def test_one_tensor_on_two_schedules_is_refused(self) -> None:
        from fp8_policy.collect import options_from_te_config

        clash = {"s": {**self.SECTION["nvfp4_stats"]}}
        te = dict(clash["s"]["transformer_engine"])
        te["LogFp8TensorStats"] = {**te["LogFp8TensorStats"], "freq": 3}
        clash["s"]["transformer_engine"] = te
        with pytest.raises(ValueError, match="different schedules"):
            options_from_te_config(clash)


def test_nvfp4_what_ifs_of_an_fp8_run_feed_the_precision_ladder(tmp_path: Path) -> None:
    """The collector's what-if lines, parsed and analysed as an upload would be: a layer whose input has an
    outlier in every 16-element block is kept off NVFP4, its healthy neighbour may go NVFP4."""
    from bench.eval_ingest import parse_tree
    from fp8_policy.policy.recommend import recommend

    torch.manual_seed(0)
    model = Pair()
    gain = torch.where(torch.arange(32) % 16 == 3, 200.0, 1.0)
    stats = ["underflows%", "nvfp4_underflows%", "nvfp4_mse", "mxfp8_underflows%"]
    generator = torch.Generator().manual_seed(1)
    with FP8StatsCollector(model, tmp_path, stats=stats) as collector:
        for _ in range(8):
            x = torch.randn(64, 32, generator=generator) * gain
            model(x).square().mean().backward()
            model.zero_grad()
            collector.step()
    run = parse_tree(tmp_path)
    run.metadata.update({"recipe": "Float8CurrentScaling", "gpu": "B200"})
    ladder = recommend(run).to_dict()["precision_ladder"]["layers"]
    assert ladder["model.fc1"]["precision"] != "nvfp4", ladder["model.fc1"]
    assert any(line.startswith("NVFP4 fails (nvfp4_ what-if)") for line in ladder["model.fc1"]["evidence"])
    assert ladder["model.fc2"]["precision"] == "nvfp4", ladder["model.fc2"]

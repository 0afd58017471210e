"""FP8StatsCollector: which lines it writes, when, and that their values are TE's statistics of the operands."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from fp8_policy.client.collect.stats import QuantSums
from fp8_policy.collect import FP8StatsCollector, options_from_te_config, quantization_stats, quantization_sums

STATS_LINE = re.compile(
    r"^\S+ \S+ - INFO - (?P<name>.+?) \t\t\t\t iteration=(?P<it>\d{6,}) \t\t\t\t "
    r"value=(?P<value>\S+)$"
)


def read_stats(log_dir: Path) -> dict[tuple[str, int], str]:
    path = log_dir / "rank_0" / "nvdlfw_inspect_statistics_logs" / "nvdlfw_inspect_globalrank-0.log"
    out = {}
    for line in path.read_text().splitlines():
        match = STATS_LINE.match(line)
        assert match, f"not a TE stats line: {line!r}"
        key = (match["name"], int(match["it"]))
        assert key not in out, f"duplicate line {key}"
        out[key] = match["value"]
    return out


def read_metadata(log_dir: Path) -> list[str]:
    path = log_dir / "rank_0" / "nvdlfw_inspect_logs" / "nvdlfw_inspect_globalrank-0.log"
    return [line.split(" - INFO - ", 1)[1] for line in path.read_text().splitlines()]


def fmt(value: float) -> str:
    return f"{value:.4f}"


class Block(nn.Module):
    def __init__(self, layer_number: int) -> None:
        super().__init__()
        self.layer_number = layer_number
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(1), Block(2)])
        self.head = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.layers:
            x = block(x)
        return self.head(x)


def train(model: nn.Module, collector: FP8StatsCollector, steps: int, micro_batches: int = 1) -> None:
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        for _ in range(micro_batches):
            model(torch.randn(4, 16, generator=generator)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        collector.step()


class TestPlainModel:
    def test_values_are_the_stats_of_the_real_operands(self, tmp_path: Path) -> None:
        torch.manual_seed(0)
        layer = nn.Linear(16, 8)
        x = torch.randn(4, 16) * torch.logspace(-6, 1, 16)
        weight = layer.weight.detach().clone()
        with FP8StatsCollector(layer, tmp_path) as collector:
            layer(x).sum().backward()  # d(sum)/dY = ones
            collector.step()

        lines = read_stats(tmp_path)
        for tensor, value, fp8 in (
            ("activation", x, "E4M3"),
            ("weight", weight, "E4M3"),
            ("gradient", torch.ones(4, 8), "E5M2"),
        ):
            expected = quantization_stats(value, fp8_format=fp8)
            for stat, number in expected.items():
                assert lines[(f"model_{tensor}_{stat}", 0)] == fmt(number), (tensor, stat)
        assert float(lines[("model_activation_underflows%", 0)]) > 0  # the crafted range does underflow
        assert len(lines) == 12

    def test_micro_batches_sum_activations_and_gradients_and_feed_weights_once(self, tmp_path: Path) -> None:
        torch.manual_seed(0)
        layer = nn.Linear(16, 8, bias=False)
        xs = [torch.randn(3, 16) * torch.logspace(-7, 0, 16), torch.randn(5, 16)]
        with FP8StatsCollector(layer, tmp_path, tensors=["activation", "weight"], stats=["underflows%", "mse"]) as c:
            weight = layer.weight.detach().clone()
            for x in xs:
                layer(x).sum().backward()
            c.step()

        expected = QuantSums()
        for x in xs:
            expected.add(quantization_sums(x))
        lines = read_stats(tmp_path)
        assert lines[("model_activation_underflows%", 0)] == fmt(expected.value("underflows%"))
        assert lines[("model_activation_mse", 0)] == fmt(expected.value("mse"))
        assert lines[("model_weight_mse", 0)] == fmt(quantization_stats(weight)["mse"])

    def test_freq_start_and_end_step_pick_the_iterations(self, tmp_path: Path) -> None:
        model = Net()
        struct = [
            {"tensor": "activation", "stats": ["underflows%"], "freq": 2},
            {"tensor": "gradient", "stats": ["underflows%"], "start_step": 3, "end_step": 4},
        ]
        with FP8StatsCollector(model, tmp_path, layers=r"^model\.head$", tensors_struct=struct) as collector:
            train(model, collector, steps=6)

        lines = read_stats(tmp_path)
        assert sorted(lines) == sorted(
            [("model.head_activation_underflows%", i) for i in (0, 2, 4)]
            + [("model.head_gradient_underflows%", i) for i in (3, 4)]
        )

    def test_metadata_names_every_module_and_plans_every_gemm(self, tmp_path: Path) -> None:
        model = Net()
        with FP8StatsCollector(model, tmp_path, layers="fc", bf16_layers=[r"model.head"]) as collector:
            train(model, collector, steps=1)

        meta = read_metadata(tmp_path)
        assigned = [m.removeprefix("Assigned layer name: ") for m in meta if m.startswith("Assigned")]
        assert assigned == [
            "model",
            "model.layers.1",
            "model.layers.1.fc1",
            "model.layers.1.fc2",
            "model.layers.2",
            "model.layers.2.fc1",
            "model.layers.2.fc2",
            "model.head",
        ]
        plans = [m for m in meta if "Tensor: " in m]
        assert len(plans) == 5 * 6
        assert all(m.endswith("- High Precision") for m in plans if m.startswith("LAYER=model.head:"))
        assert all(m.endswith("- Quantize") for m in plans if not m.startswith("LAYER=model.head:"))
        assert "LAYER=model.layers.2.fc1: Tensor: gradient, gemm wgrad - Quantize" in meta
        assert {name.split("_")[0] for name, _ in read_stats(tmp_path)} == {
            "model.layers.1.fc1",
            "model.layers.1.fc2",
            "model.layers.2.fc1",
            "model.layers.2.fc2",
        }

    def test_delayed_scaling_starts_at_scale_one_and_logs_overflows_after_a_jump(self, tmp_path: Path) -> None:
        layer = nn.Linear(4, 4, bias=False)
        inputs = [torch.full((2, 4), 1.0), torch.full((2, 4), 1.0), torch.full((2, 4), 8.0)]
        with FP8StatsCollector(
            layer,
            tmp_path,
            recipe="delayed",
            tensors=["activation"],
            margin=0,
            stats=["overflows%", "scale_inv_max", "underflows%"],
            amax_history_len=16,
        ) as c:
            for x in inputs:
                with torch.no_grad():
                    layer.weight.fill_(0.1)
                layer(x).sum().backward()
                c.step()

        lines = read_stats(tmp_path)
        # step 0: scale 1; step 1: scale 448/1; step 2: still 448 while x jumps to 8 > 448 * (1/448)
        assert [lines[("model_activation_scale_inv_max", i)] for i in range(3)] == ["1.0000", "0.0022", "0.0022"]
        assert [lines[("model_activation_overflows%", i)] for i in range(3)] == ["0.0000", "0.0000", "100.0000"]

    def test_what_if_stats_requantize_the_same_tensor(self, tmp_path: Path) -> None:
        torch.manual_seed(0)
        layer = nn.Linear(64, 32, bias=False)
        x = torch.randn(8, 64) * torch.logspace(-9, 2, 64)
        stats = [
            "underflows%",
            "mxfp8_underflows%",
            "mxfp8_scale_inv_min",
            "fp8_block_scaling_mse",
            "fp8_current_scaling_underflows%",
        ]
        with FP8StatsCollector(layer, tmp_path, tensors=["activation"], stats=stats) as collector:
            layer(x)
            collector.step()

        lines = read_stats(tmp_path)
        mx = quantization_stats(x, recipe="mxfp8")
        assert lines[("model_activation_mxfp8_underflows%", 0)] == fmt(mx["underflows%"])
        assert lines[("model_activation_mxfp8_scale_inv_min", 0)] == fmt(mx["scale_inv_min"])
        assert lines[("model_activation_fp8_block_scaling_mse", 0)] == fmt(quantization_stats(x, recipe="block")["mse"])
        assert (
            lines[("model_activation_fp8_current_scaling_underflows%", 0)] == lines[("model_activation_underflows%", 0)]
        )

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"stats": ["overflows%"]}, "delayed scaling"),
            ({"stats": ["fp8_delayed_scaling_mse"]}, "Cannot recreate"),
            ({"recipe": "mxfp8"}, "recipe must be"),
            ({"tensors": ["output"]}, "only activation"),
            ({"freq": 0}, "freq"),
            ({"fp8_format": "E5M2"}, "fp8_format"),
        ],
    )
    def test_invalid_options_raise_before_anything_is_written(self, tmp_path: Path, kwargs: dict, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            FP8StatsCollector(nn.Linear(4, 4), tmp_path, **kwargs)
        assert not (tmp_path / "rank_0").exists()

    def test_eval_forwards_are_not_fed(self, tmp_path: Path) -> None:
        layer = nn.Linear(4, 4)
        with FP8StatsCollector(layer, tmp_path) as collector:
            with torch.no_grad():
                layer(torch.randn(2, 4))
            collector.step()
        assert read_stats(tmp_path) == {}


class TestTorchaoModel:
    def test_operands_come_from_torchaos_casts_once_per_step(self, tmp_path: Path) -> None:
        torchao_float8 = pytest.importorskip("torchao.float8")
        torch.manual_seed(0)
        model = Net()
        torchao_float8.convert_to_float8_training(
            model,
            config=torchao_float8.Float8LinearConfig(emulate=True),
            module_filter_fn=lambda module, fqn: fqn != "head",
        )
        x = torch.randn(4, 16) * torch.logspace(-6, 1, 16)
        weight = model.layers[0].fc1.weight.detach().clone()
        seen: list[torch.Tensor] = []
        model.layers[0].fc1.register_forward_pre_hook(lambda m, a: seen.append(a[0].detach().clone()))
        with FP8StatsCollector(model, tmp_path) as collector:
            model(x).square().mean().backward()
            collector.step()
            assert collector.backend == "torchao" and collector.high_precision_layers == ["model.head"]

        lines = read_stats(tmp_path)
        name = "model.layers.1.fc1"
        for tensor, value in (("activation", seen[0]), ("weight", weight)):
            for stat, number in quantization_stats(value).items():
                assert lines[(f"{name}_{tensor}_{stat}", 0)] == fmt(number), (tensor, stat)
        assert {n.rsplit("_", 2)[0] for n, _ in lines} >= {"model.layers.1.fc1", "model.layers.2.fc2"}
        assert not any(n.startswith("model.head") for n, _ in lines)
        assert len(lines) == 4 * 3 * 4  # 4 FP8 layers x 3 tensors x 4 stats: no backward re-cast counted twice
        meta = read_metadata(tmp_path)
        assert "LAYER=model.head: Tensor: activation, gemm fprop - High Precision" in meta
        assert "LAYER=model.layers.1.fc1: Tensor: gradient, gemm dgrad - Quantize" in meta

    def test_the_tap_is_removed_on_close(self, tmp_path: Path) -> None:
        torchao_float8 = pytest.importorskip("torchao.float8")
        from torchao.float8 import float8_linear

        original = float8_linear.hp_tensor_to_float8_dynamic
        model = Net()
        torchao_float8.convert_to_float8_training(model, config=torchao_float8.Float8LinearConfig(emulate=True))
        with FP8StatsCollector(model, tmp_path):
            assert float8_linear.hp_tensor_to_float8_dynamic is not original
        assert float8_linear.hp_tensor_to_float8_dynamic is original


class TestLogFiles:
    def test_a_second_session_does_not_append_to_the_first_files(self, tmp_path: Path) -> None:
        first, second = tmp_path / "a", tmp_path / "b"
        names = ("Default Statistics", "nvdlfw_inspect")
        before = {name: set(logging.getLogger(name).handlers) for name in names}  # other tests may leave their own
        for log_dir in (first, second):
            layer = nn.Linear(4, 4)
            with FP8StatsCollector(layer, log_dir, tensors=["weight"]) as collector:
                layer(torch.randn(2, 4))
                collector.step()
        assert len(read_stats(first)) == len(read_stats(second)) == 4
        for name in names:
            added = set(logging.getLogger(name).handlers) - before[name]
            assert not [h for h in added if isinstance(h, logging.FileHandler)]

    def test_only_one_collector_at_a_time(self, tmp_path: Path) -> None:
        with FP8StatsCollector(nn.Linear(4, 4), tmp_path / "a"), pytest.raises(RuntimeError, match="another"):
            FP8StatsCollector(nn.Linear(4, 4), tmp_path / "b").start()

    def test_options_from_a_te_yaml_section(self, tmp_path: Path) -> None:
        config = tmp_path / "fp8_stats.yaml"
        config.write_text(
            "example_fp8_tensor_stat_collection:\n"
            "  enabled: True\n"
            "  layers:\n"
            "    layer_types: [fc1]\n"
            "  transformer_engine:\n"
            "    LogFp8TensorStats:\n"
            "      enabled: True\n"
            "      tensors_struct:\n"
            "      - tensor: gradient\n"
            "        stats: [underflows%, scale_inv_min]\n"
            "        freq: 3\n"
        )
        model = Net()
        with FP8StatsCollector(model, tmp_path / "logs", **options_from_te_config(config)) as collector:
            train(model, collector, steps=4)
        lines = read_stats(tmp_path / "logs")
        assert sorted({(n, i) for n, i in lines}) == sorted(
            (f"model.layers.{b}.fc1_gradient_{s}", i)
            for b in (1, 2)
            for s in ("underflows%", "scale_inv_min")
            for i in (0, 3)
        )

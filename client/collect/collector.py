"""`FP8StatsCollector`: watch a model while it trains and write TE-format FP8 statistics logs on CPU.

Belongs here: which layers and operands are watched (hooks, the torchao tap), the per-step buffers, the
schedule, and what is written when. Must not be here: the statistics themselves (`stats`), quantization
(`quantizers`), delayed-scaling state (`delayed`), file handling (`writer`).

Two ways to see the GEMM operands (TE's names: activation = GEMM input X, weight = W, gradient = dY):
- torchao float8 models (`convert_to_float8_training`, e.g. `Float8LinearConfig(emulate=True)` on CPU): the
  statistics come from the casts torchao really makes (`torchao_tap`): the forward casts of input and
  weight and the first backward cast of grad_output. torchao re-casts input, weight and grad_output for the
  other backward GEMMs; with tensorwise scaling those casts are identical and are not counted twice (TE logs
  each tensor once per layer too). The training recipe is then current (tensorwise) scaling with
  torchao's own scale (`amax_to_scale`: amax clamped at 1e-12, so an all-zero tensor gets scale 4.48e14
  where TE would use 1).
- plain `nn.Linear` models: forward pre-hooks see X and W, a hook on the output sees dY; each operand is
  quantized as TE's current or delayed scaling would (`recipe`, `fp8_format`, and for delayed
  `amax_history_len`, `amax_compute_algo`, `margin`). The model's numerics are not changed.
- NVFP4 (`recipe="nvfp4"`, a plain model, trained in NVFP4 e.g. after `emulated.convert_to_emulated_training`):
  `nvfp4_underflows%` / `nvfp4_mse` as `LogNvfp4TensorStats` writes them (`nvfp4`: 16x16 weight tiles,
  gradients with stochastic rounding unless `nvfp4_stochastic_rounding=False`, drawn from a generator seeded
  with `seed`). Under any other recipe the same names are a what-if, which TE itself does not offer.

Per step (TE: `transformer_engine/debug/features/utils/stats_buffer.py` `_Buffer.feed` / `log`):
activations and gradients of several micro-batches are summed into one value, weights are fed once per
step; `step()` writes one line per (layer, tensor, stat) at the current iteration, then counts up, like
`debug_api.step()`. Forwards under `torch.no_grad()` (evaluation) are not fed.
Stat names, validity and what-if re-quantization follow `log_fp8_tensor_stats.py` `LogFp8TensorStats`:
a prefixed stat (`mxfp8_`, `fp8_block_scaling_`, `fp8_current_scaling_`) re-quantizes the same
high-precision tensor in the training tensor's FP8 format (`update_aux_dict`), block scaling with 128x128
tiles; `overflows%` and `fp8_delayed_scaling_*` exist only when training with delayed scaling.
"""

from __future__ import annotations

import functools
import re
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from fp8_policy.client.collect.delayed import DelayedScaler
from fp8_policy.client.collect.fp8 import E4M3, E5M2, Fp8Format
from fp8_policy.client.collect.naming import assigned_names, gemm_layers, name_matcher
from fp8_policy.client.collect.options import TENSORS, TensorSpec, build_specs, default_stats
from fp8_policy.client.collect.quantizers import Quantized, quantize_current, quantize_per_tensor
from fp8_policy.client.collect.sensitivity import SensitivityTap, check_formats
from fp8_policy.client.collect.stats import (
    QuantSums,
    StatName,
    check_stat,
    nvfp4_quant_sums,
    parse_stat_name,
    quantize,
    sums_of,
)
from fp8_policy.client.collect.torchao_tap import float8_linear_class
from fp8_policy.client.collect.writer import LogWriter, Overhead

RECIPES = ("current", "delayed", "nvfp4")
FORMAT_CHOICES = ("HYBRID", "E4M3")
SumsKey = tuple[str, bool] | None  # None: the training cast; else (what-if recipe, columnwise)


@dataclass(slots=True)
class _Layer:
    """A watched GEMM layer's per-step state."""

    name: str
    module: nn.Module
    scalers: dict[str, DelayedScaler] = field(default_factory=dict)
    weight_fed: bool = False
    forward_depth: int = 0
    last_gradient: Any = None  # weakref to the grad_output tensor last counted (torchao re-casts it)


class FP8StatsCollector:
    """Write TE LogFp8TensorStats-format logs for `model` into `<log_dir>/rank_N/` while it trains.

        collector = FP8StatsCollector(model, "fp8_logs", freq=10)   # torchao float8 model or plain nn.Linear
        for batch in data:
            loss = model(batch).loss; loss.backward(); optimizer.step(); optimizer.zero_grad()
            collector.step()                                       # like debug_api.step()
        collector.close()                                          # or use it as a context manager

    Options mirror TE's YAML: `layers` (regex, `re.search` on the logged name), `tensors`, `stats` (default: what
    TE logs for the recipe, `default_stats`), `freq`, `start_step`, `end_step`, `start_end_list`, or per-tensor
    `tensors_struct` (see `options_from_te_config`). Plain models: `recipe` "current" (default) or "delayed",
    `fp8_format` "HYBRID" (E4M3 forward, E5M2 gradients, TE's default) or "E4M3", `bf16_layers` (regex or exact
    names) for layers to treat as high precision (logged as such in the plan lines, no statistics). `sensitivity`: formats
    (nvfp4, mxfp8, current, delayed, block) whose per-GEMM loss sensitivity is logged on the same schedule as the
    activation's (`sensitivity` module).
    """

    def __init__(
        self,
        model: nn.Module,
        log_dir: str | Path,
        *,
        layers: str = ".*",
        tensors: Iterable[str] = TENSORS,
        stats: Sequence[str] | None = None,
        freq: int = 1,
        start_step: int | None = None,
        end_step: int | None = None,
        start_end_list: Sequence[Sequence[int]] | None = None,
        tensors_struct: Sequence[Mapping[str, Any]] | None = None,
        recipe: str | None = None,
        fp8_format: str = "HYBRID",
        amax_history_len: int = 1024,
        amax_compute_algo: str = "max",
        margin: int = 0,
        bf16_layers: str | Iterable[str] | None = None,
        init_training_step: int = 0,
        nvfp4_stochastic_rounding: bool = True,
        seed: int = 0,
        sensitivity: Iterable[str] = (),
    ) -> None:
        self.model = model
        self.log_dir = Path(log_dir)
        self.iteration = int(init_training_step)
        self.overhead = Overhead()
        self._layer_pattern = re.compile(layers)
        float8_linear = float8_linear_class()
        named = assigned_names(model)
        self._names = [name for name, _ in named]
        self._gemms = gemm_layers(named)
        self.backend = (
            "torchao"
            if float8_linear is not None and any(isinstance(m, float8_linear) for m in self._gemms.values())
            else "emulated"
        )
        self.recipe = self._resolve_recipe(recipe)
        self._specs: dict[str, TensorSpec] = build_specs(
            tensors=tensors,
            stats=default_stats(self.recipe) if stats is None else stats,
            freq=freq,
            start_step=start_step,
            end_step=end_step,
            start_end_list=start_end_list,
            tensors_struct=tensors_struct,
        )
        if self.backend == "torchao":
            if bf16_layers is not None:
                raise ValueError(
                    "bf16_layers is for plain models; in a torchao model the layers that stay nn.Linear "
                    "are the high-precision ones"
                )
            self._quantized = {
                name: float8_linear is not None and isinstance(m, float8_linear) for name, m in self._gemms.items()
            }
        else:
            if fp8_format not in FORMAT_CHOICES:
                raise ValueError(f"fp8_format must be one of {', '.join(FORMAT_CHOICES)}, got {fp8_format!r}")
            high = name_matcher(bf16_layers)
            self._quantized = {name: not high(name) for name in self._gemms}
        hybrid = fp8_format == "HYBRID" and self.recipe != "nvfp4"  # what-ifs under NVFP4 training cast to E4M3
        self._formats = {"activation": E4M3, "weight": E4M3, "gradient": E5M2 if hybrid else E4M3}
        self._nvfp4_sr = nvfp4_stochastic_rounding
        self._generator = torch.Generator().manual_seed(seed)
        self._parsed = {
            stat: check_stat(parse_stat_name(stat), self.recipe) for spec in self._specs.values() for stat in spec.stats
        }
        self._keys, self._features = {}, {}
        for tensor, spec in self._specs.items():
            self._keys[tensor] = list(dict.fromkeys(self._key(self._parsed[s]) for s in spec.stats))
            self._features[tensor] = list(dict.fromkeys(self._parsed[s].feature for s in spec.stats))
        self._new_scaler = functools.partial(
            DelayedScaler, history_len=amax_history_len, margin=margin, amax_compute_algo=amax_compute_algo
        )
        self._layers: dict[str, _Layer] = {}
        self._by_mm_config: dict[int, _Layer] = {}
        self._buffers: dict[tuple[str, str], dict[SumsKey, QuantSums]] = {}
        self._handles: list[Any] = []
        self._writer: LogWriter | None = None
        self._tapped = False
        schedule = self._specs.get("activation") or next(iter(self._specs.values()))
        self._sensitivity = SensitivityTap(
            check_formats(sensitivity), self._generator, lambda: schedule.enabled(self.iteration)
        )

    # --- configuration ------------------------------------------------------------------------------------------

    def _resolve_recipe(self, recipe: str | None) -> str:
        if self.backend == "torchao":
            if recipe not in (None, "current"):
                raise ValueError(f"a torchao float8 model trains with its own (current) scaling, not {recipe!r}")
            return "current"
        recipe = recipe or "current"
        if recipe not in RECIPES:
            raise ValueError(f"recipe must be one of {', '.join(RECIPES)} for a plain model, got {recipe!r}")
        return recipe

    def _key(self, stat: StatName) -> SumsKey:
        if stat.recipe in (None, self.recipe) and not stat.columnwise:
            return None
        return (stat.recipe or self.recipe, stat.columnwise)

    @property
    def watched_layers(self) -> list[str]:
        """Names of the layers whose statistics are logged (quantized and matching `layers`)."""
        return [name for name, quantized in self._quantized.items() if quantized and self._layer_pattern.search(name)]

    @property
    def high_precision_layers(self) -> list[str]:
        return [name for name, quantized in self._quantized.items() if not quantized]

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> FP8StatsCollector:
        """Open the log files, write the layer names and plan lines, and attach to the model."""
        if self._writer is not None:
            raise RuntimeError("collector already started")
        self._writer = LogWriter(self.log_dir)
        self._writer.record_layout()  # under torch.distributed: the rank's place (client/parallel_record.py)
        for name in self._names:
            self._writer.assigned(name)
        # a plain model logging only what-ifs trains as it is (BF16): TE's "High Precision" plan lines say so
        emulated = self.backend == "torchao" or any(self._key(stat) is None for stat in self._parsed.values())
        for name, quantized in self._quantized.items():
            self._writer.plans(name, quantized and emulated)
        for name in self.watched_layers:
            layer = _Layer(name, self._gemms[name])
            if self.recipe == "delayed":
                layer.scalers = {t: self._new_scaler(self._formats[t]) for t in self._specs}
            self._layers[name] = layer
            self._attach(layer)
            if self._sensitivity.formats:
                self._sensitivity.attach(name, layer.module)
        if self.backend == "torchao" and self._layers:
            from fp8_policy.client.collect import torchao_tap

            torchao_tap.add_observer(self._on_torchao_cast)
            self._tapped = True
        return self

    def close(self) -> None:
        """Detach from the model and close the files (a partly fed step is not written). Idempotent."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._sensitivity.detach()
        if self._tapped:
            from fp8_policy.client.collect import torchao_tap

            torchao_tap.remove_observer(self._on_torchao_cast)
            self._tapped = False
        if self._writer is not None:
            self._writer.close()

    def __enter__(self) -> FP8StatsCollector:
        return self.start() if self._writer is None else self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def stats_log(self) -> Path:
        """Path of the statistics log this collector writes (after `start()`)."""
        if self._writer is None:
            raise RuntimeError("collector not started")
        return self._writer.stats_path

    # --- hooks --------------------------------------------------------------------------------------------------

    def _attach(self, layer: _Layer) -> None:
        module = layer.module
        if self.backend == "torchao":
            self._by_mm_config[id(module.linear_mm_config)] = layer
            self._handles.append(module.register_forward_pre_hook(lambda m, a, layer=layer: self._enter(layer)))
            self._handles.append(module.register_forward_hook(lambda m, a, o, layer=layer: self._leave(layer)))
            return
        self._handles.append(
            module.register_forward_pre_hook(lambda m, args, layer=layer: self._on_forward(layer, args))
        )
        if "gradient" in self._specs:
            self._handles.append(
                module.register_forward_hook(lambda m, args, out, layer=layer: self._on_output(layer, out))
            )

    def _enter(self, layer: _Layer) -> None:
        if torch.is_grad_enabled():
            layer.forward_depth += 1

    def _leave(self, layer: _Layer) -> None:
        layer.forward_depth = max(0, layer.forward_depth - 1)

    def _on_forward(self, layer: _Layer, args: tuple[Any, ...]) -> None:
        if not torch.is_grad_enabled() or not args or not isinstance(args[0], torch.Tensor):
            return
        started = time.perf_counter()
        if "activation" in self._specs:
            self._feed(layer, "activation", args[0], self._formats["activation"])
        if "weight" in self._specs:
            weight = cast(torch.Tensor, layer.module.weight)  # nn.Module.__getattr__ is typed `Tensor | Module`
            self._feed(layer, "weight", weight, self._formats["weight"])
        self.overhead.seconds += time.perf_counter() - started

    def _on_output(self, layer: _Layer, out: Any) -> None:
        if not (isinstance(out, torch.Tensor) and out.requires_grad and torch.is_grad_enabled()):
            return
        if not (self._specs["gradient"].enabled(self.iteration) or layer.scalers):
            return

        def on_gradient(grad: torch.Tensor) -> None:
            started = time.perf_counter()
            self._feed(layer, "gradient", grad, self._formats["gradient"])
            self.overhead.seconds += time.perf_counter() - started

        out.register_hook(on_gradient)  # type: ignore[no-untyped-call]  # torch leaves Tensor.register_hook untyped

    def _on_torchao_cast(self, hp_tensor: torch.Tensor, result: Any) -> None:
        layer = self._by_mm_config.get(id(getattr(result, "_linear_mm_config", None)))
        if layer is None:
            return
        started = time.perf_counter()
        role = result._gemm_input_role.value
        if role == "grad_output":
            previous = layer.last_gradient() if layer.last_gradient is not None else None
            if previous is hp_tensor:
                return
            layer.last_gradient = weakref.ref(hp_tensor)
            tensor = "gradient"
        elif layer.forward_depth == 0:
            return  # backward re-cast of input or weight (same values as the forward cast)
        else:
            tensor = "activation" if role == "input" else "weight"
        if tensor in self._specs:
            fmt = E4M3 if result._data.dtype == E4M3.dtype else E5M2
            scale = result._scale.float()
            actual = Quantized(
                result._data, torch.reciprocal(scale).reshape(-1), result._data.to(hp_tensor.dtype) / result._scale
            )
            self._feed(layer, tensor, hp_tensor, fmt, actual)
        self.overhead.seconds += time.perf_counter() - started

    # --- feeding and writing ------------------------------------------------------------------------------------

    def _feed(
        self, layer: _Layer, tensor: str, x: torch.Tensor, fmt: Fp8Format, actual: Quantized | None = None
    ) -> None:
        if tensor == "weight" and layer.weight_fed:
            return
        x = x.detach()
        scaler = layer.scalers.get(tensor)
        if x.numel() and self._specs[tensor].enabled(self.iteration):
            bucket = self._buffers.setdefault((layer.name, tensor), {})
            for key in self._keys[tensor]:
                recipe = self.recipe if key is None else key[0]
                if recipe == "nvfp4":
                    sums = nvfp4_quant_sums(
                        x,
                        two_d=tensor == "weight",  # NVFP4BlockScaling: 16x16 weight tiles, 1x16 otherwise
                        stochastic_rounding=self._nvfp4_sr and tensor == "gradient",
                        generator=self._generator,
                    )
                elif key is None:
                    q = actual if actual is not None else self._training_cast(x, fmt, scaler)
                    sums = sums_of(x, q, fmt, overflow_scale_inv=q.scale_inv if scaler is not None else None)
                else:
                    sums = sums_of(x, quantize(x, recipe, fmt, columnwise=key[1]), fmt)
                bucket.setdefault(key, QuantSums()).add(sums)
            if self._writer is not None:
                self._writer.inspect_tensor(layer.name, tensor, self._features[tensor])
        if scaler is not None:
            scaler.observe(x)
        if tensor == "weight":
            layer.weight_fed = True

    def _training_cast(self, x: torch.Tensor, fmt: Fp8Format, scaler: DelayedScaler | None) -> Quantized:
        if scaler is not None:
            return quantize_per_tensor(x, scaler.scale, fmt)
        return quantize_current(x, fmt)

    def step(self) -> None:
        """End of an optimizer step: write this iteration's statistics, advance delayed scales, count up."""
        if self._writer is None:
            raise RuntimeError("call start() (or use the collector as a context manager) before step()")
        started = time.perf_counter()
        for (layer, tensor), bucket in self._buffers.items():
            for stat in self._specs[tensor].stats:
                parsed = self._parsed[stat]
                self._writer.scalar(
                    f"{layer}_{tensor}_{stat}", bucket[self._key(parsed)].value(parsed.base), self.iteration
                )
        self._buffers.clear()
        self.overhead.seconds += self._sensitivity.flush(self._writer, self.iteration)
        for watched in self._layers.values():
            watched.weight_fed = False
            watched.forward_depth = 0
            for scaler in watched.scalers.values():
                scaler.update()
        self.iteration += 1
        self.overhead.seconds += time.perf_counter() - started
        self.overhead.steps += 1

"""The two log files of one rank, written through nvdlfw_inspect's own loggers, as TE's debug API writes them.

Belongs here: opening `<log_dir>/rank_N/nvdlfw_inspect_logs/...` (metadata) and
`<log_dir>/rank_N/nvdlfw_inspect_statistics_logs/...` (statistics), the message strings TE and nvdlfw log,
and detaching the handlers again. Must not be here: what is logged when (`collector`).

Sources: nvdlfw_inspect 0.2.2 `nvdlfw_inspect/logging.py` (`initialize_logger`, `make_default_statistics_logger`,
`MetricLogger.log_scalar`: `"{name} \\t\\t\\t\\t iteration={:06d} \\t\\t\\t\\t value={:.4f}"`),
`nvdlfw_inspect/debug_manager.py` (`"Default logging to file enabled at {log_dir}"`), `nvdlfw_inspect/api.py`
(`"Assigned layer name: {name}"`), `nvdlfw_inspect/utils.py` (`"LAYER={layer}: {message}"`), and
TransformerEngine `transformer_engine/debug/pytorch/debug_quantization.py` `log_messages_about_plans`
(`"Tensor: {tensor}, gemm {gemm} - {plan}"`, plan "Quantize" on TE >= 2.13 or "High Precision").
nvdlfw_inspect's loggers are process-wide (one session at a time, handlers never removed by nvdlfw itself):
the writer refuses to start while the debug API or another writer is active, and removes exactly the
handlers it added when closed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from nvdlfw_inspect import api as debug_api
from nvdlfw_inspect import logging as nvdlfw_logging
from nvdlfw_inspect.logging import MetricLogger

# TE's `_tensor_to_gemm_names_map` order: each quantized input tensor feeds two GEMMs.
PLAN_GEMMS = (
    ("activation", "fprop"),
    ("activation", "wgrad"),
    ("weight", "fprop"),
    ("weight", "dgrad"),
    ("gradient", "dgrad"),
    ("gradient", "wgrad"),
)
QUANTIZE, HIGH_PRECISION = "Quantize", "High Precision"
_LOGGER_NAMES = ("nvdlfw_inspect", "Default Statistics")
_active: list[LogWriter] = []


@dataclass(slots=True)
class Overhead:
    """Time spent inside a collector (hooks, casts, statistics, writing) over the steps so far."""

    seconds: float = 0.0
    steps: int = 0

    @property
    def per_step_ms(self) -> float:
        return 1000.0 * self.seconds / self.steps if self.steps else 0.0


def rank_of_process() -> int:
    """torch.distributed's global rank, 0 without a process group (nvdlfw_inspect names its files the same way)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class LogWriter:
    """One rank's metadata and statistics logs under `<log_dir>/rank_<rank>/`."""

    def __init__(self, log_dir: str | Path) -> None:
        if debug_api.DEBUG_MANAGER is not None:
            raise RuntimeError(
                "nvdlfw_inspect's debug API is initialized in this process (TE debug session?): "
                "call debug_api.end_debug() first; its loggers are process-wide"
            )
        if _active:
            raise RuntimeError("another collector is writing logs in this process: close it first")
        self.rank = rank_of_process()
        self.root = Path(log_dir) / f"rank_{self.rank}"
        before = {name: list(logging.getLogger(name).handlers) for name in _LOGGER_NAMES}
        nvdlfw_logging.initialize_logger(str(self.root))
        self._logger = nvdlfw_logging.make_default_statistics_logger()
        MetricLogger.add_logger(self._logger)
        self._handlers = {
            name: [h for h in logging.getLogger(name).handlers if h not in before[name]] for name in _LOGGER_NAMES
        }
        self._announced: set[tuple[str, str, str]] = set()
        _active.append(self)
        self.message(f"Default logging to file enabled at {self.root}")

    @property
    def stats_path(self) -> Path:
        return self.root / "nvdlfw_inspect_statistics_logs" / f"nvdlfw_inspect_globalrank-{self.rank}.log"

    @property
    def metadata_path(self) -> Path:
        return self.root / "nvdlfw_inspect_logs" / f"nvdlfw_inspect_globalrank-{self.rank}.log"

    def message(self, text: str) -> None:
        self._logger.log_message(text, level=logging.INFO)

    def record_layout(self) -> dict[str, object] | None:
        """This rank's place in the job (`fp8_policy parallel {...}`, client/parallel_record.py) when torch.distributed
        is initialised: from megatron.core.parallel_state when that is initialised too, else as a data-parallel rank
        (world size and rank only: the collector is not told of tensor or pipeline parallelism)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return None
        from fp8_policy.client.parallel_record import record_parallel_layout

        return record_parallel_layout(log=self.message)

    def assigned(self, layer: str) -> None:
        self.message(f"Assigned layer name: {layer}")

    def layer_message(self, layer: str, text: str) -> None:
        self.message(f"LAYER={layer}: {text}")

    def plans(self, layer: str, quantized: bool) -> None:
        """TE's six plan lines for one GEMM layer."""
        plan = QUANTIZE if quantized else HIGH_PRECISION
        for tensor, gemm in PLAN_GEMMS:
            self.layer_message(layer, f"Tensor: {tensor}, gemm {gemm} - {plan}")

    def inspect_tensor(self, layer: str, tensor: str, features: list[str]) -> None:
        """TE's `inspect_tensor` message, once per (layer, feature, tensor), as `debug_api.log_message` caches it."""
        for feature in features:
            if (layer, feature, tensor) not in self._announced:
                self._announced.add((layer, feature, tensor))
                self.layer_message(layer, f"Feature={feature}, API=inspect_tensor: {tensor}")

    def scalar(self, name: str, value: float, iteration: int) -> None:
        MetricLogger.log_scalar(name, value, iteration)

    def close(self) -> None:
        """Detach and close the handlers this writer added; idempotent."""
        if self not in _active:
            return
        _active.remove(self)
        if self._logger in MetricLogger.enabled_loggers:
            MetricLogger.enabled_loggers.remove(self._logger)
        for name, handlers in self._handlers.items():
            target = logging.getLogger(name)
            for handler in handlers:
                target.removeHandler(handler)
                handler.close()
        if nvdlfw_logging.LOGGER is self._logger:
            nvdlfw_logging.LOGGER = None

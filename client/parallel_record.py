"""A rank's own record of its place in a parallel job: `record_parallel_layout()`, and Megatron's parallel state.

Belongs here: reading the rank's sizes and coordinates (from `megatron.core.parallel_state` when it is initialised,
else `torch.distributed` plus sizes given by the caller), the one line the service's metadata parser reads
(`fp8_policy parallel {json}`, policy/parse/metadata_log.py `PARALLEL_RECORD`), and writing it through nvdlfw_inspect's
`log_message` into the rank's metadata log. Used by the CPU collector (client/collect/collector.py) and by
`apply_policy` (the pipeline rank, client/apply/pipeline.py). torch, Megatron and nvdlfw_inspect are imported
lazily: the client install has none of them.

Sources: megatron/core/parallel_state.py (`model_parallel_is_initialized`, `get_{tensor,pipeline}_model_parallel_
{rank,world_size}`, `get_virtual_pipeline_model_parallel_world_size`, `get_{data,context}_parallel_{rank,world_
size}`, `get_expert_model_parallel_{rank,world_size}`; ranks laid out by `RankGenerator(order="tp-cp-ep-dp-pp")`,
the first token varying fastest; `--use-tp-pp-dp-mapping` gives "tp-cp-ep-pp-dp", megatron/training/initialize.py),
nvdlfw_inspect/api.py (`log_message`, which needs `debug_api.initialize(...)` first).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

RECORD_PREFIX = (
    "fp8_policy parallel "  # policy/parse/metadata_log.py PARALLEL_RECORD (a contract test keeps them equal)
)
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
SIZE_KEYS = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
)
_ORDER_TOKENS = ("tp", "cp", "ep", "dp", "pp")


def megatron_state() -> dict[str, Any] | None:
    """This rank's sizes and coordinates from `megatron.core.parallel_state`; None when Megatron is not importable
    or its model parallel state is not initialised."""
    try:
        from megatron.core import parallel_state as ps
    except ImportError:
        return None
    try:
        if not ps.model_parallel_is_initialized():
            return None
        import torch.distributed as dist

        vpp = ps.get_virtual_pipeline_model_parallel_world_size()
        return {
            "rank": dist.get_rank(),
            "world_size": dist.get_world_size(),
            "tensor_model_parallel_size": ps.get_tensor_model_parallel_world_size(),
            "pipeline_model_parallel_size": ps.get_pipeline_model_parallel_world_size(),
            "virtual_pipeline_model_parallel_size": vpp if vpp and vpp > 1 else None,
            "context_parallel_size": ps.get_context_parallel_world_size(),
            "expert_model_parallel_size": ps.get_expert_model_parallel_world_size(),
            "tp_rank": ps.get_tensor_model_parallel_rank(),
            "pp_rank": ps.get_pipeline_model_parallel_rank(),
            "dp_rank": ps.get_data_parallel_rank(),
            "cp_rank": ps.get_context_parallel_rank(),
            "ep_rank": ps.get_expert_model_parallel_rank(),
            "vp_rank": ps.get_virtual_pipeline_model_parallel_rank(),
        }
    except (AttributeError, AssertionError, RuntimeError):  # an older Megatron, or groups not built yet
        return None


def coordinates(rank: int, order: str, sizes: Mapping[str, int]) -> dict[str, int]:
    """tp/cp/dp/pp/ep coordinates of `rank` as Megatron's RankGenerator lays ranks out: the dense grid (tp, cp, dp,
    pp) and the expert grid (expert tp = tp, ep, expert dp, pp), the first token of `order` varying fastest."""
    tp, cp, pp, ep = (sizes.get(k, 1) for k in ("tp", "cp", "pp", "ep"))
    world = sizes["world"]
    dense = _decompose(rank, order, {"tp": tp, "cp": cp, "dp": world // (tp * cp * pp), "pp": pp})
    expert = _decompose(rank, order, {"tp": tp, "ep": ep, "dp": world // (tp * ep * pp), "pp": pp})
    return {"tp": dense["tp"], "cp": dense["cp"], "dp": dense["dp"], "pp": dense["pp"], "ep": expert["ep"]}


def _decompose(rank: int, order: str, sizes: Mapping[str, int]) -> dict[str, int]:
    out, stride = {}, 1
    for token in order.split("-"):
        size = max(1, sizes.get(token, 1))
        out[token] = (rank // stride) % size
        stride *= size
    return out


def layout_record(
    *,
    tensor_model_parallel_size: int | None = None,
    pipeline_model_parallel_size: int | None = None,
    virtual_pipeline_model_parallel_size: int | None = None,
    context_parallel_size: int | None = None,
    expert_model_parallel_size: int | None = None,
    num_layers: int | None = None,
    order: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
) -> dict[str, Any]:
    """This rank's record: Megatron's parallel state when initialised (given sizes must agree with it), else
    `torch.distributed`'s rank and world size (or `rank` / `world_size`) with the sizes given (1 when not)."""
    given = {
        "tensor_model_parallel_size": tensor_model_parallel_size,
        "pipeline_model_parallel_size": pipeline_model_parallel_size,
        "virtual_pipeline_model_parallel_size": virtual_pipeline_model_parallel_size,
        "context_parallel_size": context_parallel_size,
        "expert_model_parallel_size": expert_model_parallel_size,
    }
    state = megatron_state()
    if state is not None:
        clash = [k for k, v in given.items() if v is not None and int(v) != (state[k] or 1)]
        if clash:
            raise ValueError(f"{', '.join(clash)} given differ from megatron.core.parallel_state's: {state}")
        record = {k: v for k, v in state.items() if k != "vp_rank"}
        record["order"] = order or _megatron_order()
    else:
        record = _from_torch(given, order or DEFAULT_ORDER, rank, world_size)
    record["num_layers"] = num_layers if num_layers is not None else _megatron_num_layers()
    return record


def _from_torch(given: Mapping[str, int | None], order: str, rank: int | None, world: int | None) -> dict[str, Any]:
    if rank is None or world is None:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "neither megatron.core.parallel_state nor torch.distributed is initialised: pass rank= and "
                "world_size= (with the parallel sizes) to record this rank's place"
            )
        rank, world = dist.get_rank(), dist.get_world_size()
    tokens = order.split("-")
    if len(set(tokens)) != len(tokens) or not set(tokens) <= set(_ORDER_TOKENS):
        raise ValueError(f"order must be tokens of {'-'.join(_ORDER_TOKENS)}, got {order!r}")
    order = "-".join(tokens + [t for t in _ORDER_TOKENS if t not in tokens])
    sizes = {k: int(v) if v is not None else 1 for k, v in given.items()}
    tp, pp = sizes["tensor_model_parallel_size"], sizes["pipeline_model_parallel_size"]
    cp, ep = sizes["context_parallel_size"], sizes["expert_model_parallel_size"]
    if world % (tp * pp * cp) or world % (tp * pp * ep):
        raise ValueError(f"world size {world} is not a multiple of TP x PP x CP = {tp * pp * cp} (and TP x PP x EP)")
    coords = coordinates(rank, order, {"tp": tp, "cp": cp, "pp": pp, "ep": ep, "world": world})
    vpp = given["virtual_pipeline_model_parallel_size"]
    record: dict[str, Any] = {"rank": rank, "world_size": world, **sizes, "order": order}
    record["virtual_pipeline_model_parallel_size"] = vpp if vpp and vpp > 1 else None
    record |= {f"{k}_rank": v for k, v in coords.items()}
    return record


def _megatron_order() -> str:
    try:
        from megatron.training import get_args

        return "tp-cp-ep-pp-dp" if getattr(get_args(), "use_tp_pp_dp_mapping", False) else DEFAULT_ORDER
    except (ImportError, AssertionError, AttributeError):
        return DEFAULT_ORDER


def _megatron_num_layers() -> int | None:
    try:
        from megatron.training import get_args

        value = getattr(get_args(), "num_layers", None)
    except (ImportError, AssertionError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def record_line(record: Mapping[str, Any]) -> str:
    """The metadata-log message the service reads (policy/parse/metadata_log.py `_parse_parallel_record`)."""
    return RECORD_PREFIX + json.dumps(dict(record), sort_keys=True)


def record_parallel_layout(log: Callable[[str], None] | None = None, **sizes: Any) -> dict[str, Any]:
    """Write this rank's place in the job (sizes and coordinates, `layout_record`) into its nvdlfw_inspect metadata
    log, so the service names every rank's layers globally without being told the layout; returns the record.

        debug_api.initialize(config_file=..., feature_dirs=[...], log_dir=...)   # TE's debug API, as usual
        fp8_policy.record_parallel_layout()                                     # after initialize_model_parallel

    Without Megatron, pass the sizes (`tensor_model_parallel_size=`, `pipeline_model_parallel_size=`, ...,
    `num_layers=`); the rank and world size come from torch.distributed. `log`: where to write the line instead
    of `nvdlfw_inspect.api.log_message` (the CPU collector's writer)."""
    line = record_line(layout_record(**sizes))
    if log is None:
        import nvdlfw_inspect.api as debug_api

        if debug_api.DEBUG_MANAGER is None:
            raise RuntimeError(
                "nvdlfw_inspect's debug API is not initialised in this process: call debug_api.initialize(...) "
                "(TE's debug API) before record_parallel_layout(), so the line lands in the rank's metadata log"
            )
        debug_api.log_message(line)
    else:
        log(line)
    return json.loads(line[len(RECORD_PREFIX) :])  # type: ignore[no-any-return]

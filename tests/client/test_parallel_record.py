"""`fp8_policy.record_parallel_layout()` and the CPU collector's record: the line the training node writes is the
line the service's metadata parser reads, the coordinates are Megatron's, and the service resolves the layout from
the ranks' own records."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import nvdlfw_inspect
import pytest
import torch
from torch import nn

import fp8_policy
from fp8_policy.client.parallel_record import RECORD_PREFIX, coordinates, layout_record, record_line
from fp8_policy.policy.parallel import ParallelLayout, RankEvidence, rank_coord, resolve
from fp8_policy.policy.parse.metadata_log import PARALLEL_RECORD, parse_metadata_lines

LAYOUTS = [
    ParallelLayout(tp=2, pp=4, dp=2),
    ParallelLayout(tp=2, pp=2, dp=4, ep=4),
    ParallelLayout(tp=1, cp=2, pp=2, dp=2, ep=2),
    ParallelLayout(tp=2, pp=2, dp=2, order="tp-cp-ep-pp-dp"),
]


def test_the_client_writes_what_the_service_parses() -> None:
    assert RECORD_PREFIX == PARALLEL_RECORD
    record = layout_record(
        rank=5, world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=4, num_layers=16
    )
    parsed = parse_metadata_lines([f"2026-12-02 01:00:00,000 - INFO - {record_line(record)}"])
    assert parsed.parallel == record and parsed.lines_unrecognised == 0
    assert set(record) == {
        "rank",
        "world_size",
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "virtual_pipeline_model_parallel_size",
        "context_parallel_size",
        "expert_model_parallel_size",
        "order",
        "num_layers",
        "tp_rank",
        "pp_rank",
        "dp_rank",
        "cp_rank",
        "ep_rank",
    }


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.describe() + " " + layout.order)
def test_coordinates_are_megatrons(layout: ParallelLayout) -> None:
    sizes = {"tp": layout.tp, "cp": layout.cp, "pp": layout.pp, "ep": layout.ep, "world": layout.world_size}
    for rank in range(layout.world_size):
        assert coordinates(rank, layout.order, sizes) == rank_coord(layout, rank).as_dict(), rank


def test_the_service_resolves_the_ranks_own_records() -> None:
    """Each rank of a TP2 x PP2 x DP2 job records itself; the upload says nothing: the layout is the records'."""
    sizes = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "num_layers": 8}
    evidence = {}
    for rank in range(8):
        record = layout_record(rank=rank, world_size=8, **sizes)
        parsed = parse_metadata_lines([f"2026-12-02 01:00:00,000 - INFO - {record_line(record)}"]).parallel
        blocks = range(0, 4) if record["pp_rank"] == 0 else range(4, 8)
        evidence[rank] = RankEvidence(frozenset(f"model.decoder.layers.{b + 1}.fc2" for b in blocks), parsed)
    info = resolve({}, evidence).info
    assert info.source == "metadata" and info.layout is not None and info.layout.describe() == "TP2 x PP2 x DP2"
    assert info.naming == "layer_number" and info.coords[5] == {"tp": 1, "pp": 1, "dp": 0, "ep": 0, "cp": 0}


@pytest.fixture
def nvdlfw_session(tmp_path: Path) -> Iterator[Path]:
    """TE's debug API (nvdlfw_inspect) initialised with a minimal config; its process-wide loggers restored after."""
    import nvdlfw_inspect.api as debug_api
    import nvdlfw_inspect.logging as nv_logging

    loggers = [logging.getLogger(name) for name in ("nvdlfw_inspect", "Default Statistics")]
    before = [list(logger.handlers) for logger in loggers]
    previous = nv_logging.LOGGER
    config = tmp_path / "config.yaml"
    config.write_text(
        "watch:\n  enabled: True\n  layers:\n    layer_types: [fc1]\n"
        "  LogTensorStats:\n    enabled: True\n    stats: [min]\n    tensors: [activation]\n"
    )
    features = os.path.join(os.path.dirname(nvdlfw_inspect.__file__), "debug_features")
    debug_api.initialize(config_file=str(config), feature_dirs=[features], log_dir=str(tmp_path / "logs"))
    try:
        yield tmp_path / "logs"
    finally:
        debug_api.end_debug()
        for logger, handlers in zip(loggers, before, strict=True):
            for handler in [h for h in logger.handlers if h not in handlers]:
                logger.removeHandler(handler)
                handler.close()
        nv_logging.LOGGER = previous


def test_record_parallel_layout_writes_through_the_debug_api(nvdlfw_session: Path) -> None:
    record = fp8_policy.record_parallel_layout(
        rank=3, world_size=4, pipeline_model_parallel_size=2, tensor_model_parallel_size=2, num_layers=8
    )
    (log,) = nvdlfw_session.rglob("nvdlfw_inspect_logs/*.log")
    assert parse_metadata_lines(log.read_text()).parallel == record
    assert (record["tp_rank"], record["pp_rank"], record["dp_rank"]) == (1, 1, 0)


def test_record_parallel_layout_needs_the_debug_api_or_a_rank() -> None:
    with pytest.raises(RuntimeError, match="torch.distributed"):
        fp8_policy.record_parallel_layout(log=print)
    with pytest.raises(RuntimeError, match="debug_api.initialize"):
        fp8_policy.record_parallel_layout(rank=0, world_size=1)


def test_the_cpu_collector_records_the_rank_under_torch_distributed(tmp_path: Path) -> None:
    from fp8_policy.collect import FP8StatsCollector

    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = nn.Sequential(nn.Linear(16, 16))
        with FP8StatsCollector(model, tmp_path / "logs") as collector:
            model(torch.randn(4, 16)).sum().backward()
            collector.step()
    finally:
        torch.distributed.destroy_process_group()
    (log,) = (tmp_path / "logs").rglob("nvdlfw_inspect_logs/*.log")
    record = parse_metadata_lines(log.read_text()).parallel
    assert record is not None and (record["rank"], record["world_size"], record["dp_rank"]) == (0, 1, 0)

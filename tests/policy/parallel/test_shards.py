"""Ranks aggregated by what they are: tensor-parallel shards combined per statistic, a shard that stands out among its
group, and a data-parallel replica that disagrees (a fault, not precision)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.analysis.shards import parallel_view
from fp8_policy.policy.parallel import LAYER_NUMBER, ParallelLayout
from fp8_policy.policy.recommend import recommend
from fp8_policy.policy.records import MetricName, RunData
from fp8_policy.policy.synthetic import Scenario, SyntheticRun, all_of, blocks, everywhere, level, roles
from fp8_policy.policy.synthetic.parallel import ParallelJob
from tests.policy.parallel.job_data import job_run_data

BLOCKS = "model.module.decoder.layers"


def _meta(layout: ParallelLayout) -> dict[str, int]:
    return {
        "tensor_model_parallel_size": layout.tp,
        "pipeline_model_parallel_size": layout.pp,
        "num_layers": layout.num_layers or 0,
        "world_size": layout.world_size,
    }


def _data(tmp: Path, layout: ParallelLayout, profile: Scenario, **job: object) -> RunData:
    assert layout.num_layers is not None
    run = SyntheticRun(family="megatron", num_layers=layout.num_layers, first_index=0, iterations=200, profile=profile)
    return job_run_data(ParallelJob(run, layout, naming=LAYER_NUMBER, **job), tmp, _meta(layout)).run  # type: ignore[arg-type]


def _series(data: RunData, layer: str, tensor: str, stat: str) -> dict[int, np.ndarray]:
    return {s.rank: s.values for s in data.series if s.metric == MetricName(layer, tensor, stat)}


def test_shards_combine_with_the_rule_of_each_statistic(tmp_path: Path) -> None:
    """TP2: the weight of global block 2's fc1 underflows 6 % on shard 1 only. The whole tensor's underflow is the
    shards' mean (about 3 %: critical), not the worst shard's (severe); scale_inv combines as min / max."""
    layout = ParallelLayout(tp=2, dp=2, num_layers=4)
    where = all_of(blocks(2), roles("fc1"))
    data = _data(tmp_path, layout, Scenario().plant(where, "weight", "underflows%", level(6.0), ranks=frozenset({1})))
    layer = f"{BLOCKS}.3.mlp.linear_fc1"
    shards = _series(data, layer, "weight", "underflows%")
    assert sorted(shards) == [0, 1]  # the two shards (DP replicas stored once)
    combined = parallel_view(data).run
    assert sorted({s.rank for s in combined.series}) == [0]
    np.testing.assert_allclose(_series(combined, layer, "weight", "underflows%")[0], (shards[0] + shards[1]) / 2)
    for stat, rule in (("scale_inv_min", np.minimum), ("scale_inv_max", np.maximum), ("mse", None)):
        parts = _series(data, layer, "weight", stat)
        expected = rule(parts[0], parts[1]) if rule is not None else (parts[0] + parts[1]) / 2
        np.testing.assert_allclose(_series(combined, layer, "weight", stat)[0], expected)
    analysis = analyze(data)
    row = analysis.layer(layer)
    assert row.severity.value == "critical"  # the mean (about 3 %), not the worst shard's 6 % (severe)
    assert 2.0 <= row.underflows["weight"].level < 4.0
    assert "worst rank" in analysis.stats["level_rule"] and "shards combined" in analysis.stats["level_rule"]
    assert any("shards combined" in note for note in analysis.notes)


def test_one_shard_that_stands_out_is_a_rank_finding(tmp_path: Path) -> None:
    """TP4: shard 2's weights underflow 3 % on every layer, its three siblings about 0.2 %: the outlier test over
    the tensor-parallel group names rank 2; the layers' levels are the shards' mean."""
    layout = ParallelLayout(tp=4, num_layers=4)
    profile = Scenario().plant(everywhere(), "weight", "underflows%", level(3.0), ranks=frozenset({2}))
    analysis = analyze(_data(tmp_path, layout, profile))
    outliers = [f for f in analysis.findings if f.pattern.value == "rank_outlier"]
    assert len(outliers) == 1 and {ev.rank for ev in outliers[0].evidence} == {2}
    assert "tensor-parallel shards" in outliers[0].summary and "ranks 0, 1, 2, 3" in outliers[0].summary
    row = analysis.layer(f"{BLOCKS}.1.mlp.linear_fc2")
    assert 0.5 <= row.underflows["weight"].level < 2.0  # about (3 + 3 x 0.2) / 4


@pytest.mark.parametrize("pp", [1, 2])
def test_a_replica_that_disagrees_is_a_fault_that_moves_no_layer(tmp_path: Path, pp: int) -> None:
    layout = ParallelLayout(pp=pp, dp=4, num_layers=4)
    faulty = 1 if pp == 1 else 5  # DP group (4, 5, 6, 7) under PP2
    clean = _data(tmp_path / "clean", layout, Scenario())
    data = _data(tmp_path / "faulty", layout, Scenario(), faulty={faulty: 30.0})
    assert data.parallel is not None and [m.differing for m in data.parallel.mismatches] == [(faulty,)]
    analysis = analyze(data)
    found = [f for f in analysis.findings if f.pattern.value == "replica_mismatch"]
    assert len(found) == 1 and found[0].severity.value == "critical" and found[0].layers == ()
    text = found[0].summary
    assert f"rank {faulty} " in text and "silent data corruption" in text and "not a precision problem" in text
    assert found[0].evidence and all(ev.rank == faulty for ev in found[0].evidence)
    assert {ev.level / ev.reference for ev in found[0].evidence if ev.reference} and all(
        ev.level > ev.reference * 10 for ev in found[0].evidence if ev.tensor != "weight"
    )
    rec, reference = recommend(data, analysis).to_dict(), recommend(clean).to_dict()
    assert rec["fp8_skip_layers"] == reference["fp8_skip_layers"] == []
    assert [r.severity for r in analysis.layers] == [r.severity for r in analyze(clean).layers]
    assert analysis.to_dict()["parallel"]["mismatches"] == [m.as_dict() for m in data.parallel.mismatches]

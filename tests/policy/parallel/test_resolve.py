"""Global names for every rank of TP / PP / VPP / DP / EP jobs: `resolve` against Megatron's rules (test side)."""

from __future__ import annotations

import pytest

from fp8_policy.policy.parallel import (
    GLOBAL,
    INFERRED,
    LAYER_NUMBER,
    LOCAL,
    METADATA,
    UNKNOWN,
    ParallelInfo,
    RankEvidence,
    Resolution,
    resolve,
)
from tests.policy.parallel import megatron_parallel as mg

BLOCKS = "model.module.decoder.layers"
GEMMS = ("self_attention.linear_qkv", "mlp.linear_fc2")


def _job(pp: int, tp: int, dp: int, num_layers: int, vpp: int | None = None, **config: int | None) -> dict:
    return {
        "tensor_model_parallel_size": tp,
        "pipeline_model_parallel_size": pp,
        "virtual_pipeline_model_parallel_size": vpp,
        "world_size": tp * pp * dp,
        "num_layers": num_layers,
        **{k: v for k, v in config.items() if v is not None},
    }


def _logged(meta: dict, naming: str) -> tuple[dict[int, frozenset[str]], dict[int, dict[str, str]]]:
    """Each rank's logged names and the global name each stands for, from the test-side Megatron rules."""
    tp, pp = meta["tensor_model_parallel_size"], meta["pipeline_model_parallel_size"]
    world, vpp = meta["world_size"], meta["virtual_pipeline_model_parallel_size"]
    config = mg.Config(
        num_layers=meta["num_layers"],
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp,
        num_layers_in_first_pipeline_stage=meta.get("decoder_first_pipeline_num_layers"),
        num_layers_in_last_pipeline_stage=meta.get("decoder_last_pipeline_num_layers"),
    )
    names: dict[int, frozenset[str]] = {}
    truth: dict[int, dict[str, str]] = {}
    for rank in range(world):
        pp_rank = mg.dense_coordinates(world, tp, pp, 1, "tp-cp-ep-dp-pp", rank)["pp"]
        mine: dict[str, str] = {}
        for vp in [None] if vpp is None else range(vpp):
            for index, number in enumerate(mg.layer_numbers(config, pp_rank, vp)):
                shown = {LAYER_NUMBER: number, GLOBAL: number - 1, LOCAL: index}[naming]
                for gemm in GEMMS:
                    whole = number if naming == LAYER_NUMBER else number - 1
                    mine[f"{BLOCKS}.{shown}.{gemm}"] = f"{BLOCKS}.{whole}.{gemm}"
        names[rank] = frozenset(mine)
        truth[rank] = mine
    return names, truth


@pytest.mark.parametrize("naming", [LAYER_NUMBER, GLOBAL, LOCAL])
@pytest.mark.parametrize(
    "meta",
    [
        _job(pp=2, tp=1, dp=2, num_layers=8),
        _job(pp=4, tp=2, dp=2, num_layers=16),
        _job(pp=4, tp=1, dp=1, num_layers=13, decoder_first_pipeline_num_layers=2, decoder_last_pipeline_num_layers=3),
        _job(pp=3, tp=2, dp=1, num_layers=9, decoder_first_pipeline_num_layers=1),
    ],
    ids=["tp1pp2dp2", "tp2pp4dp2", "uneven-first-last", "uneven-first"],
)
def test_every_rank_is_named_globally(meta: dict, naming: str) -> None:
    names, truth = _logged(meta, naming)
    resolution = resolve(meta, {rank: RankEvidence(layers) for rank, layers in names.items()})
    assert resolution.info.source == METADATA
    assert resolution.info.naming == naming
    for rank, mapping in truth.items():
        namer = resolution.namer(rank)
        assert {namer(logged) for logged in mapping} == set(mapping.values())
        assert all(namer(logged) == whole for logged, whole in mapping.items())


@pytest.mark.parametrize("naming", [LAYER_NUMBER, GLOBAL])
def test_interleaved_stages_with_global_names(naming: str) -> None:
    meta = _job(pp=2, tp=1, dp=2, num_layers=8, vpp=2)
    names, truth = _logged(meta, naming)
    resolution = resolve(meta, {rank: RankEvidence(layers) for rank, layers in names.items()})
    assert resolution.info.naming == naming and not resolution.info.notes
    for rank, mapping in truth.items():
        assert all(resolution.namer(rank)(logged) == whole for logged, whole in mapping.items())


def test_interleaved_stages_with_local_names_say_the_chunks_collide() -> None:
    meta = _job(pp=2, tp=1, dp=1, num_layers=8, vpp=2)
    names, _truth = _logged(meta, LOCAL)
    info = resolve(meta, {rank: RankEvidence(layers) for rank, layers in names.items()}).info
    assert info.naming == LOCAL
    assert any("cannot be told apart" in note for note in info.notes)


def test_a_layout_the_logs_contradict_keeps_the_logged_names() -> None:
    """Stage 1 logs blocks the stated layout does not give it: named in a note, the logs win."""
    meta = _job(pp=2, tp=1, dp=1, num_layers=8)
    names = {0: frozenset({f"{BLOCKS}.1.mlp.linear_fc2"}), 1: frozenset({f"{BLOCKS}.12.mlp.linear_fc2"})}
    resolution = resolve(meta, {rank: RankEvidence(layers) for rank, layers in names.items()})
    assert resolution.info.naming is None and not resolution.info.exact
    assert any("contradicts the logs" in note for note in resolution.info.notes)
    assert resolution.namer(1)(f"{BLOCKS}.12.mlp.linear_fc2") == f"{BLOCKS}.12.mlp.linear_fc2"


def test_experts_are_numbered_globally() -> None:
    meta = {**_job(pp=1, tp=1, dp=4, num_layers=2), "expert_model_parallel_size": 4, "num_moe_experts": 8}
    layer = f"{BLOCKS}.1.mlp.experts.linear_fc1"
    names = {rank: frozenset({f"{layer}.gemm_0", f"{layer}.gemm_1"}) for rank in range(4)}
    resolution = resolve(meta, {rank: RankEvidence(layers) for rank, layers in names.items()})
    for rank in range(4):  # tp-cp-ep-dp-pp: with TP 1 and CP 1 the EP rank is rank % 4
        assert resolution.namer(rank)(f"{layer}.gemm_1") == f"{layer}.gemm_{2 * rank + 1}"


def test_missing_ranks_and_duplicate_claims_are_named() -> None:
    meta = _job(pp=2, tp=1, dp=2, num_layers=4)
    names, _truth = _logged(meta, LAYER_NUMBER)
    evidence = {rank: RankEvidence(names[rank]) for rank in (0, 1, 2)}  # rank 3 missing
    record = {"tp_rank": 0, "cp_rank": 0, "dp_rank": 0, "pp_rank": 0, "ep_rank": 0}
    evidence[0] = RankEvidence(names[0], recorded={**record, "world_size": 4})
    evidence[1] = RankEvidence(names[1], recorded={**record, "world_size": 4})  # claims rank 0's place
    info = resolve(meta, evidence).info
    text = " ".join(info.notes)
    assert info.missing_ranks == [3]
    assert "ranks 0, 1 all claim" in text


def test_ranks_outside_the_stated_world_size_make_the_logs_win() -> None:
    """A stated world of 2 ranks (TP1 x PP2) for a job that logged 4 (DP2): placing ranks by it would put rank 1
    (pipeline stage 0, data-parallel rank 1) on stage 1 and rename its blocks; the layout is read from the logs."""
    names, truth = _logged(_job(pp=2, tp=1, dp=2, num_layers=4), LAYER_NUMBER)
    stated = {**_job(pp=2, tp=1, dp=1, num_layers=4), "world_size": 2}
    resolution = resolve(stated, {rank: RankEvidence(layers, digest=bytes([rank])) for rank, layers in names.items()})
    info = resolution.info
    assert "outside the stated layout's 2 ranks" in info.notes[0] and info.outside_ranks == [2, 3]
    assert info.source == INFERRED and {r: c["pp"] for r, c in info.coords.items()} == {0: 0, 1: 0, 2: 1, 3: 1}
    assert all(resolution.namer(r)(n) == truth[r][n] for r in names for n in names[r])


def test_without_metadata_disjoint_blocks_are_inferred_as_stages() -> None:
    names, truth = _logged(_job(pp=4, tp=1, dp=2, num_layers=8), LAYER_NUMBER)
    resolution = resolve({}, {rank: RankEvidence(layers, digest=bytes([rank])) for rank, layers in names.items()})
    info = resolution.info
    assert (info.source, info.naming, info.layout.pp if info.layout else None) == (INFERRED, LAYER_NUMBER, 4)
    assert {rank: info.coords[rank]["pp"] for rank in names} == {r: r // 2 for r in names}
    assert all(resolution.namer(r)(n) == truth[r][n] for r in names for n in names[r])


def test_without_metadata_same_names_and_different_values_is_unknown() -> None:
    names, _truth = _logged(_job(pp=2, tp=1, dp=1, num_layers=8), LOCAL)
    info = resolve({}, {rank: RankEvidence(layers, digest=bytes([rank])) for rank, layers in names.items()}).info
    assert info.source == UNKNOWN and not info.exact
    assert "pipeline stages named locally" in info.notes[0]


def test_without_metadata_identical_ranks_are_replicas() -> None:
    layers = frozenset({f"{BLOCKS}.1.mlp.linear_fc2"})
    info = resolve({}, {rank: RankEvidence(layers, digest=b"same") for rank in range(4)}).info
    assert info.source == INFERRED and info.layout is not None and info.layout.dp == 4


def test_the_ranks_own_records_win_over_the_upload_metadata() -> None:
    names, _truth = _logged(_job(pp=2, tp=1, dp=1, num_layers=8), LAYER_NUMBER)
    record = {"pipeline_model_parallel_size": 2, "world_size": 2, "num_layers": 8}
    evidence = {
        rank: RankEvidence(
            layers, recorded={**record, "pp_rank": rank, "tp_rank": 0, "dp_rank": 0, "cp_rank": 0, "ep_rank": 0}
        )
        for rank, layers in names.items()
    }
    info = resolve({"tensor_model_parallel_size": 2, "world_size": 2}, evidence).info
    assert info.layout is not None and info.layout.pp == 2 and info.naming == LAYER_NUMBER
    assert any("the ranks' records are used" in note for note in info.notes)


def test_info_round_trips_through_json() -> None:
    names, _truth = _logged(_job(pp=2, tp=2, dp=1, num_layers=4), LAYER_NUMBER)
    info = resolve(_job(pp=2, tp=2, dp=1, num_layers=4), {r: RankEvidence(n) for r, n in names.items()}).info
    again = ParallelInfo.from_json(info.to_json())
    assert again.to_json() == info.to_json()
    assert info.to_json()["ranks"]["3"] == {"tp": 1, "pp": 1, "dp": 0, "ep": 0, "cp": 0}


@pytest.mark.parametrize("naming", [LAYER_NUMBER, GLOBAL, LOCAL])
def test_a_pipeline_layout_without_num_layers_takes_the_count_from_the_logs(naming: str) -> None:
    meta = _job(pp=4, tp=1, dp=2, num_layers=16)
    names, truth = _logged(meta, naming)
    del meta["num_layers"]
    resolution = resolve(meta, {rank: RankEvidence(layers) for rank, layers in names.items()})
    info = resolution.info
    assert info.layout is not None and info.layout.num_layers == 16 and info.naming == naming
    assert any("num_layers not given" in note for note in info.notes)
    assert all(resolution.namer(r)(n) == truth[r][n] for r in names for n in names[r])


@pytest.mark.parametrize("naming", [LAYER_NUMBER, LOCAL])
def test_a_resolution_rebuilt_from_its_stored_info_names_and_groups_the_ranks_alike(naming: str) -> None:
    """Jobs after the one that resolved (a rank's own job, finalize) rebuild it from `ParallelInfo.to_json()`."""
    meta = {**_job(pp=2, tp=2, dp=2, num_layers=8), "expert_model_parallel_size": 2, "num_moe_experts": 4}
    names, _truth = _logged(meta, naming)
    experts = {  # each expert-parallel rank logs its 2 experts as gemm_0, gemm_1 (TE GroupedLinear)
        rank: layers | {f"{min(layers).rsplit('.', 2)[0]}.mlp.experts.linear_fc1.gemm_{e}" for e in range(2)}
        for rank, layers in names.items()
    }
    first = resolve(meta, {rank: RankEvidence(layers) for rank, layers in experts.items()})
    assert first.experts_local == 2
    again = Resolution.from_info(ParallelInfo.from_json(first.info.to_json()), first.experts_local)
    probe = [f"{BLOCKS}.{i}.mlp.experts.linear_fc1.gemm_{e}" for i in range(4) for e in range(2)]
    for rank in names:
        assert [again.namer(rank)(n) for n in probe] == [first.namer(rank)(n) for n in probe]
    assert (again.dense_groups(), again.expert_groups()) == (first.dense_groups(), first.expert_groups())

"""Issue 12 item 8 on the OG2-7B-like study (policy/synthetic/studies.py): FL2 (first/last 2 blocks BF16) degrades
at block 30, FL4 (first/last 4) at block 28. Compare says the problem followed the boundary, and FL4's
recommendation, given FL2 as history, does not widen the BF16 edge again."""

from __future__ import annotations

import dataclasses

import pytest

from bench.eval_ingest import parse_tree
from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.compare import Edges, moved_problems
from fp8_policy.policy.compare.recommendations import compare_recommendations
from fp8_policy.policy.recommend import History, RecommendOptions, recommend
from fp8_policy.policy.recommend.skiplist import plan_skips
from fp8_policy.policy.synthetic import write_run
from fp8_policy.policy.synthetic.studies import og2_boundary_study
from tests.policy.analysis.factories import FAMILIES, Spec, build_run, name, plant


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    study = og2_boundary_study()
    out = {}
    for key, run in (("fl2", study.before), ("fl4", study.after)):
        tree = tmp_path_factory.mktemp(key)
        write_run(run, tree)
        data = parse_tree(tree)
        data.metadata.update(study.metadata)
        out[key] = (data, analyze(data))
    return study, out


def test_the_study_plants_the_published_boundary_effect(study):
    st, runs = study
    (_, fl2), (_, fl4) = runs["fl2"], runs["fl4"]
    assert Edges.of(fl2.layout) == Edges(2, 2, 32) and Edges.of(fl4.layout) == Edges(4, 4, 32)
    assert [(f.pattern.value, f.layers) for f in fl2.findings] == [("boundary", (st.degrading_before,))]
    assert [(f.pattern.value, f.layers) for f in fl4.findings] == [("boundary", (st.degrading_after,))]
    assert st.degrading_before.startswith("model.model.layers.30.") and ".28." in st.degrading_after
    level = max(ev.level for ev in fl2.findings[0].evidence)
    assert 15.0 < level < 22.0  # ~18 % fc2 activation underflow


def test_compare_says_the_problem_followed_the_boundary(study):
    _, runs = study
    (moved,) = moved_problems(runs["fl2"][1], runs["fl4"][1])
    assert moved.side == "end" and moved.distance == 0 and moved.tensor == "activation"
    assert moved.base_blocks == (30,) and moved.head_blocks == (28,)
    assert (moved.base_edge, moved.head_edge) == (2, 4)
    assert "the problem followed the boundary" in moved.sentence()
    assert moved.to_dict()["label"] == "Boundary effect"


def test_no_moved_problem_without_a_moved_edge_or_without_a_new_finding(study):
    _, runs = study
    fl2 = runs["fl2"][1]
    assert moved_problems(fl2, fl2) == []
    fixed = dataclasses.replace(runs["fl4"][1], findings=[])
    assert moved_problems(fl2, fixed) == []


def test_the_later_runs_recommendation_uses_the_history(study):
    _, runs = study
    (fl4_data, fl4), (_, fl2) = runs["fl4"], runs["fl2"]
    plain = recommend(fl4_data, fl4)
    with_history = recommend(fl4_data, fl4, None, History(fl2, 11))
    assert plain.history is None and plain.to_dict()["history"] is None
    data = with_history.to_dict()["history"]
    assert data["previous_run"] == 11 and len(data["moved_problems"]) == 1
    assert data["added_bf16_blocks"] == {"start": [3, 4], "end": [29, 30]}
    text = "\n".join(with_history.rationale)
    assert "do not widen the BF16 edge again" in text and "te-yaml policy" in text
    # a GEMM override of the new edge layer, not more BF16 blocks
    decision = with_history.decision
    assert decision.skip_layers == () and [o.layer for o in decision.gemm_overrides] == [fl4.findings[0].layers[0]]
    assert with_history.megatron["num_layers_at_end_in_bf16"] == 4  # the edge as it ran, not wider


def test_history_prefers_a_finer_recipe_where_the_gpu_has_one(study):
    _, runs = study
    (fl4_data, fl4), (_, fl2) = runs["fl4"], runs["fl2"]
    blackwell = RecommendOptions.from_metadata({**fl4_data.metadata, "gpu": "B200"})
    assert recommend(fl4_data, fl4, blackwell).decision.recipe.name == "block"
    moved = recommend(fl4_data, fl4, blackwell, History(fl2, 11)).decision.recipe
    assert moved.name == "mxfp8" and "followed the BF16 boundary since run 11" in moved.reason
    hopper = recommend(fl4_data, fl4, None, History(fl2, 11)).decision.recipe
    assert hopper.name == "block"  # nothing finer than block scaling runs on Hopper


def test_compare_of_the_two_recommendations(study):
    _, runs = study
    (fl2_data, fl2), (fl4_data, fl4) = runs["fl2"], runs["fl4"]
    diff = compare_recommendations(recommend(fl2_data, fl2), recommend(fl4_data, fl4, None, History(fl2, 1)))
    assert diff["gemm_overrides"]["added"][0]["layer"].startswith("model.model.layers.28.")
    assert diff["gemm_overrides"]["removed"][0]["layer"].startswith("model.model.layers.30.")
    assert not diff["recipe"]["changed"] and not diff["same"]
    assert any(line.startswith("GEMM overrides 1 → 1") for line in diff["summary"])
    assert any(line.startswith("predicted BF16 share of GEMM FLOPs") for line in diff["summary"])


def test_held_blocks_are_not_promoted_to_whole_bf16_blocks():
    """Block 0: qkv fails on two tensors (skip), the others on one (override): normally the whole edge block goes
    to BF16; a block holding a moved problem keeps its overrides."""
    spec = Spec(n_blocks=8, with_heads=False)
    subs = list(FAMILIES["megatron"]["subs"])  # type: ignore[call-overload]
    plant(spec, [name("megatron", 0, subs[0])], "activation", 4.0)
    plant(spec, [name("megatron", 0, s) for s in subs], "gradient", 4.0)
    analysis = analyze(build_run(spec))
    promoted = plan_skips(analysis)
    assert set(promoted.skip_layers) == {name("megatron", 0, s) for s in subs} and not promoted.overrides
    held = plan_skips(analysis, no_promote=frozenset({name("megatron", 0, subs[1])}))
    assert held.skip_layers == (name("megatron", 0, subs[0]),) and len(held.overrides) == len(subs) - 1

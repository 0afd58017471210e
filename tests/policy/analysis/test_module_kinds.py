"""MoE semantics on logs in Megatron-Core's naming (written by the synthetic generator, read by the upload path's
parser): shared experts failing in every block are one module kind, not a depth pattern; one routed expert failing
is judged against its sibling experts; MLA up-projections are attention."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.eval_ingest import parse_tree
from fp8_policy.policy.analysis import Pattern, analyze
from fp8_policy.policy.analysis.module_kinds import (
    ATTENTION,
    DENSE_MLP,
    ROUTED,
    SHARED,
    expert_slot,
    module_kind,
)
from fp8_policy.policy.names import layer_structure
from fp8_policy.policy.recommend import recommend
from fp8_policy.policy.records import LayerInfo, Precision
from fp8_policy.policy.synthetic import Rule, Scenario, SyntheticRun, all_of, blocks, level, named, roles, write_run

ACT_GRAD = ("activation", "gradient")


def _run(tmp_path: Path, family: str, rules: tuple[Rule, ...], n: int = 8):
    run = SyntheticRun(family=family, num_layers=n, iterations=200, profile=Scenario(rules=rules))
    write_run(run, tmp_path)
    data = parse_tree(tmp_path)
    data.metadata.update({"recipe": "MXFP8BlockScaling", "gpu": "B200"})
    return data


def _kind(name: str) -> str:
    return module_kind(LayerInfo(name, layer_structure(name), Precision.FP8, True))


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("model.module.decoder.layers.3.mlp.experts.linear_fc1.gemm_5", ROUTED),
        ("model.module.decoder.layers.3.mlp.experts.local_experts.5.linear_fc2", ROUTED),
        ("model.model.layers.3.block_sparse_moe.experts.5.w1", ROUTED),
        ("model.model.layers.3.mlp.experts.5.up_proj", ROUTED),
        ("model.module.decoder.layers.3.mlp.shared_experts.linear_fc1", SHARED),
        ("model.model.layers.3.mlp.shared_expert.gate_proj", SHARED),
        ("model.module.decoder.layers.3.self_attention.linear_kv_up_proj", ATTENTION),
        ("model.module.decoder.layers.3.self_attention.linear_q_down_proj", ATTENTION),
        ("model.module.decoder.layers.3.self_attention.linear_qkv", ATTENTION),
        ("model.esm.encoder.layers.3.self_attention.layernorm_qkv", ATTENTION),
        ("model.module.decoder.layers.3.mlp.linear_fc2", DENSE_MLP),
        ("model.esm.encoder.layers.3.layernorm_mlp.fc1", DENSE_MLP),
    ],
)
def test_module_kinds_from_the_frameworks_names(name: str, kind: str) -> None:
    assert _kind(name) == kind


def test_expert_slots_group_siblings() -> None:
    assert expert_slot("a.layers.3.mlp.experts.linear_fc1.gemm_5") == ("a.layers.3.mlp.experts.linear_fc1", 5)
    assert expert_slot("a.layers.3.mlp.experts.local_experts.5.linear_fc2") == (
        "a.layers.3.mlp.experts.local_experts.*.linear_fc2",
        5,
    )
    assert expert_slot("a.layers.3.mlp.linear_fc1") is None


def test_shared_experts_failing_in_every_block_are_one_module_kind(tmp_path: Path) -> None:
    rules = tuple(Rule(roles("shared_fc1", "shared_fc2"), level(6.0), t, "underflows%") for t in ACT_GRAD)
    analysis = analyze(_run(tmp_path, "megatron_moe_mla", rules))
    kinds = analysis.by_pattern(Pattern.MODULE_KIND)
    assert len(kinds) == 1, [f.summary for f in analysis.findings]
    finding = kinds[0]
    assert finding.summary.startswith(
        "Shared experts (mlp.shared_experts.linear_fc1, mlp.shared_experts.linear_fc2) fail in every block"
    )
    assert len(finding.layers) == 16 and all(".shared_experts." in n for n in finding.layers)
    for pattern in (Pattern.EARLY_LAYERS, Pattern.LATE_LAYERS, Pattern.U_SHAPE, Pattern.UNIFORM):
        assert not analysis.by_pattern(pattern), pattern
    rec = recommend(_run(tmp_path / "again", "megatron_moe_mla", rules), analysis=None)
    assert set(rec.decision.skip_layers) == set(finding.layers)  # the recommendation stays right


def test_mla_up_projections_failing_in_every_block_are_named_as_attention(tmp_path: Path) -> None:
    rules = tuple(Rule(roles("q_up", "kv_up"), level(3.0), t, "underflows%") for t in ACT_GRAD)
    analysis = analyze(_run(tmp_path, "megatron_moe_mla", rules))
    (finding,) = analysis.by_pattern(Pattern.MODULE_KIND)
    assert (
        finding.summary.startswith("Attention (") and ") fail in every block (16 failing layer(s))" in finding.summary
    )
    assert "self_attention.linear_q_up_proj" in finding.summary and "linear_kv_up_proj" in finding.summary
    assert "linear_q_down_proj" not in finding.summary


def test_one_failing_expert_is_judged_against_its_sibling_experts(tmp_path: Path) -> None:
    bad = "model.module.decoder.layers.5.mlp.experts.linear_fc2.gemm_5"
    rules = tuple(Rule(named(bad), level(3.5), t, "underflows%") for t in ACT_GRAD)
    analysis = analyze(_run(tmp_path, "megatron_moe", rules))
    (finding,) = analysis.by_pattern(Pattern.EXPERT_OUTLIER)
    assert finding.layers == (bad,)
    assert "expert 5 (1 layer(s))" in finding.summary and "siblings' median" in finding.summary
    assert finding.severity.value in ("critical", "severe")
    assert all(bad not in f.layers for f in analysis.findings if f.pattern is not Pattern.EXPERT_OUTLIER)


def test_one_expert_hot_in_every_block_stays_an_expert_outlier(tmp_path: Path) -> None:
    rules = tuple(
        Rule(
            all_of(
                roles("fc1"),
                named(*(f"model.module.decoder.layers.{b}.mlp.experts.linear_fc1.gemm_3" for b in range(1, 9))),
            ),
            level(3.0),
            t,
            "underflows%",
        )
        for t in ACT_GRAD
    )
    analysis = analyze(_run(tmp_path, "megatron_moe", rules))
    (finding,) = analysis.by_pattern(Pattern.EXPERT_OUTLIER)
    assert "expert 3 (8 layer(s))" in finding.summary
    assert not analysis.by_pattern(Pattern.MODULE_KIND) and not analysis.by_pattern(Pattern.UNIFORM)


def test_a_dense_model_failing_at_its_ends_keeps_its_depth_pattern(tmp_path: Path) -> None:
    rules = tuple(Rule(blocks(0, 1), level(3.0), t, "underflows%") for t in ACT_GRAD)
    analysis = analyze(_run(tmp_path, "megatron", rules))
    assert analysis.by_pattern(Pattern.EARLY_LAYERS) and not analysis.by_pattern(Pattern.MODULE_KIND)

"""Issue 12 item 1: every rendered format applies at least the JSON recommendation's BF16 set, for EVERY case of
`make eval` (bench/scenarios.SUITE) and the real bionemo fixture runs, read back from the artifacts themselves
(bench/eval_bf16.py: te-yaml through nvdlfw_inspect's ConfigManager, Megatron flags + precision-config globs,
Hydra `fp8_layers`, the torchao filter executed); and the readers catch a format that applies less."""

from __future__ import annotations

import shlex

import pytest

from bench import eval_bf16
from bench.eval import FIXTURE_RUNS, FIXTURES, ConfigChecker, evaluate
from bench.scenarios import SUITE
from fp8_policy.policy.records import PolicyDecision
from fp8_policy.policy.render import applied, applied_by_format, render
from tests.policy.render import factory as f

LLAMA = f.family_layers("llama", 6)
FC2_6 = "model.model.layers.6.layernorm_mlp.fc2"
QKV_1 = "model.model.layers.1.self_attention.layernorm_qkv"


@pytest.fixture(scope="module")
def full_report():
    fixtures = [FIXTURES / name for name in FIXTURE_RUNS if (FIXTURES / name).is_dir()]
    return evaluate(SUITE, fixtures=fixtures)


def test_every_eval_case_applies_the_json_bf16_set_in_every_format(full_report):
    assert len(full_report.cases) == len(SUITE)
    failures = {
        (r.name, fmt): errors
        for r in [*full_report.cases, *full_report.fixtures]
        for fmt, errors in r.configs.items()
        if errors
    }
    assert not failures, failures
    # the check had something to check: skips and overrides in many cases, both kinds somewhere
    changed = [c for c in full_report.cases if c.score.covered]
    assert len(changed) >= len(SUITE) // 2


def test_the_hydra_comment_never_claims_fp8_is_allowed_where_bf16_was_asked():
    head = "model.lm_head"
    for decision in (f.decision(LLAMA, [head]), f.decision(LLAMA, (), [f.override(head, "wgrad")])):
        text = render(decision, "hydra").content
        assert "analysis would allow FP8" not in text
        assert "needs no override" in text
    assert "analysis would allow FP8" in render(f.decision(LLAMA), "hydra").content


def _hydra_values(text: str) -> dict[str, str]:
    return dict(shlex.split(line)[0].split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_hydra_takes_overridden_blocks_out_of_fp8_layers_and_says_so_at_the_top():
    decision = f.decision(LLAMA, [QKV_1], [f.override(FC2_6, "fprop", "wgrad")])
    text = render(decision, "hydra").content
    assert _hydra_values(text)["fp8_layers"] == "[2,3,4,5]"
    assert text.splitlines()[1].startswith(
        "# Approximation: fp8_layers works per block, so block(s) 1, 6 run "
        "wholly in BF16 for 2 skipped/overridden layer(s)"
    )
    assert "stay FP8" not in text and "# Blocks kept in BF16: 1, 6" in text


def test_exact_formats_say_so_at_the_top_and_the_json_reports_each_format():
    decision = f.decision(LLAMA, [QKV_1], [f.override(FC2_6, "wgrad")])
    assert render(decision, "te-yaml").content.splitlines()[1] == (
        "# Applies the recommendation exactly (same BF16 layers and GEMMs as the JSON recommendation)."
    )
    formats = applied_by_format(decision)
    assert formats["te-yaml"]["exact"] and formats["te-yaml"]["bf16_gemms"] == [{"layer": FC2_6, "gemms": ["wgrad"]}]
    for fmt in ("megatron", "torchao"):
        assert not formats[fmt]["exact"]
        assert formats[fmt]["overrides_as_whole_layers"] == [FC2_6]
        assert formats[fmt]["approximation"] in render(decision, fmt).content
    assert len(formats["hydra"]["extra_bf16_layers"]) == 6 + 1  # the other layers of blocks 1 and 6, the head
    assert formats["hydra"]["approximation"] in render(decision, "hydra").content


def test_an_embedding_skip_is_stated_as_not_applied_by_hydra():
    decision = f.decision(LLAMA, ["model.embedding.custom"])
    claim = applied(decision, "hydra")
    assert claim.not_applied == ("model.embedding.custom",)
    assert "cannot keep model.embedding.custom" in render(decision, "hydra").content


# ---------------------------------------------------------------------------------- the readers can fail
def _without_overrides(decision: PolicyDecision) -> PolicyDecision:
    return PolicyDecision(decision.skip_layers, (), decision.recipe, decision.layers, decision.te_version)


def test_readers_report_a_format_that_applies_less_than_the_json(tmp_path):
    """The old Hydra behaviour (overrides "stay FP8") and a Megatron/torchao file that forgot the overrides."""
    decision = f.decision(LLAMA, [QKV_1], [f.override(FC2_6, "dgrad", "wgrad")])
    weaker = _without_overrides(decision)
    hydra = eval_bf16.compare("hydra", eval_bf16.hydra_applied(render(weaker, "hydra").content, decision), decision)
    assert any("applies less than the JSON" in e and FC2_6 in e for e in hydra)
    megatron = eval_bf16.compare(
        "megatron", eval_bf16.megatron_applied(render(weaker, "megatron").content, decision), decision
    )
    assert any(FC2_6 in e for e in megatron)
    with ConfigChecker(tmp_path) as checker:
        assert any(FC2_6 in e for e in checker.check_torchao(render(weaker, "torchao").content, decision))
        assert any(FC2_6 in e for e in checker.check_te_yaml(render(weaker, "te-yaml").content, decision))
        for fmt in ("te-yaml", "megatron", "hydra", "torchao"):
            assert checker.check(decision)[fmt] == [], fmt


def test_megatron_flags_are_read_with_megatrons_layer_rule():
    decision = f.decision(LLAMA, f.block_names("llama", 1, 6))
    text = render(decision, "megatron").content
    assert "--num-layers-at-start-in-bf16 1" in text and "--num-layers-at-end-in-bf16 1" in text
    whole, _ = eval_bf16.megatron_applied(text, decision)
    assert whole == {*f.block_names("llama", 1, 6), "model.lm_head"}  # the head: BF16 in any Megatron script


def test_the_megatron_reader_reads_every_head_as_bf16():
    """Megatron's output_layer is a plain ColumnParallelLinear that no flag or precision-config matcher reaches: the
    reader reads the head as BF16 from any script, as the Hydra reader does for bionemo's lm_head."""
    head = "model.lm_head"
    for decision in (f.decision(LLAMA), f.decision(LLAMA, [QKV_1]), f.decision(LLAMA, f.block_names("llama", 1, 6))):
        whole, _ = eval_bf16.megatron_applied(render(decision, "megatron").content, decision)
        assert head in whole, decision.skip_layers
        assert eval_bf16.compare("megatron", (whole, {}), decision) == []

"""The labelled evaluation (bench/eval.py, bench/scenarios.py): a quick subset meets the targets, and the metric
and the config checks themselves are tested on hand-made inputs."""

from __future__ import annotations

import pytest
import yaml

from bench.eval import FIXTURE_RUNS, FIXTURES, ConfigChecker, big_timings, evaluate, score, totals
from bench.scenarios import PER_STEP_RECIPES, QUICK, SUITE, SUITE_BY_NAME
from fp8_policy.policy.render import FORMATS, render
from fp8_policy.policy.synthetic import PATTERNS, SCENARIOS, write_run
from tests.policy.render import factory as f


@pytest.fixture(scope="module")
def quick_report():
    return evaluate([SUITE_BY_NAME[name] for name in QUICK])


def test_quick_subset_meets_the_targets(quick_report):
    assert len(quick_report.cases) == len(QUICK)
    for case in quick_report.cases:
        s = case.score
        assert case.error is None, (case.name, case.error)
        assert not s.missed, (case.name, sorted(s.missed), sorted(s.found))
        assert not s.healthy_skipped, (case.name, sorted(s.healthy_skipped))
        assert all(not errors for errors in case.configs.values()), (case.name, case.configs)
        assert s.recipe_ok is not False, (case.name, s.recipe, s.expected_recipe)
    t = quick_report.totals
    assert t.pattern_recall == 1.0 and t.healthy_skipped == 0
    accepted, emitted = quick_report.configs
    assert emitted == len(FORMATS) * len(QUICK) and accepted == emitted  # every format, checked
    assert all(quick_report.checks().values())


def test_quick_subset_spans_ranks_and_decisions(quick_report):
    ranks = {case.ranks for case in quick_report.cases}
    assert {1, 8} <= ranks
    covered = sum(len(c.score.covered) for c in quick_report.cases)
    assert covered > 0  # some layers were skipped/overridden and scored
    assert any(c.score.recipe == "current" for c in quick_report.cases)  # the overflow recipe fix


@pytest.mark.skipif(not all((FIXTURES / n).is_dir() for n in FIXTURE_RUNS), reason="bionemo fixtures not present")
def test_real_fixture_runs_render_accepted_configs():
    report = evaluate([], fixtures=[FIXTURES / name for name in FIXTURE_RUNS])
    for fixture in report.fixtures:
        assert fixture.error is None, fixture.error
        assert fixture.layers > 0 and fixture.findings
        assert all(not errors for errors in fixture.configs.values()), (fixture.name, fixture.configs)


def test_failing_heads_with_failing_first_and_last_blocks_are_one_u_shape_that_lists_the_heads():
    report = evaluate([SUITE_BY_NAME["combo/u_shape+heads-esm2"]])
    case = report.cases[0]
    assert case.score.missed == frozenset() and case.score.false_alarms == frozenset()
    assert case.score.covered >= {"model.lm_head.dense", "model.lm_head.decoder"}


def test_stored_run_timing_path_on_a_small_tree(tmp_path):
    """The --big path (ingest into SQLite as bench/steps.py does, then load_and_analyze / recommendation_for and
    bench/steps.py's _analysis_seconds) on a small tree instead of the 6M-line one."""
    case = SCENARIOS["u_shape"]
    write_run(case.run, tmp_path / "tree")
    result = big_timings(tmp_path / "tree", repeats=1, truth=case.truth)
    assert result["lines_read"] > 0 and result["series"] > 0
    assert result["load_and_analyze_seconds"] > 0 and result["recommendation_for_seconds"] > 0
    assert result["steps_analysis_seconds"] is not None and result["steps_analysis_seconds"] > 0
    assert result["patterns"] == ["u_shape"] and result["missed"] == []
    assert result["skip_covered"] == result["skip_truth"] == 24 and result["skip_extra"] == []


# ------------------------------------------------------------------------------------------------ the metric
def test_score_counts_patterns_skips_and_healthy_layers():
    s = score(
        planted={"u_shape", "head_only"},
        found={"u_shape", "rising_trend"},
        truth_skips={"a", "b", "c"},
        signal_layers={"a", "b", "c", "d"},
        skipped={"a"},
        overridden={"b", "d", "e"},
        recipe="delayed",
        expected_recipe=None,
    )
    assert s.missed == {"head_only"} and s.false_alarms == {"rising_trend"}
    assert s.covered == {"a", "b", "d", "e"}  # an override covers a layer like a skip
    assert s.skip_tp == {"a", "b"} and s.skip_fn == {"c"} and s.skip_fp == {"d", "e"}
    assert s.healthy_skipped == {"e"}  # "d" carries a planted signal: an extra skip, but not a healthy one
    assert s.recipe_ok is None

    t = totals([s])
    assert (t.pattern_tp, t.pattern_fp, t.pattern_fn) == (1, 1, 1)
    assert t.pattern_precision == 0.5 and t.pattern_recall == 0.5
    assert t.skip_precision == 2 / 4 and t.skip_recall == 2 / 3
    assert t.healthy_skipped == 1


def test_extra_pattern_lowers_precision_and_missed_one_lowers_recall():
    perfect = score({"overflow"}, {"overflow"}, (), {"x"}, (), (), recipe="current", expected_recipe=PER_STEP_RECIPES)
    extra = score({"healthy"}, {"healthy", "uniform"}, (), (), (), ())
    missed = score({"u_shape", "head_only"}, {"u_shape"}, {"x"}, {"x"}, {"x"}, ())
    assert perfect.recipe_ok is True
    base = totals([perfect])
    assert base.pattern_precision == base.pattern_recall == base.skip_precision == base.skip_recall == 1.0
    with_extra = totals([perfect, extra])
    assert with_extra.pattern_precision == 2 / 3 and with_extra.pattern_recall == 1.0
    with_miss = totals([perfect, missed])
    assert with_miss.pattern_precision == 1.0 and with_miss.pattern_recall == 2 / 3
    micro = totals([perfect, extra, missed])  # micro-averaged: counts add up over cases
    assert (micro.pattern_tp, micro.pattern_fp, micro.pattern_fn) == (3, 1, 1)


def test_warning_band_is_the_vocabulary_s_healthy_alone_and_no_pattern_next_to_others():
    # `warning_band` names warning-band layers no pattern explains (so findings and gate agree); the planted
    # vocabulary has no such pattern: alone it is a healthy run, next to a pattern it is no extra pattern.
    assert score({"healthy"}, {"warning_band"}, (), (), (), ()).false_alarms == frozenset()
    assert score({"u_shape"}, {"u_shape", "warning_band"}, (), (), (), ()).found == {"u_shape"}
    assert score({"healthy"}, {"unassessed"}, (), (), (), ()).false_alarms == {"unassessed"}


def test_wrong_recipe_is_scored():
    s = score({"uniform"}, {"uniform"}, (), {"x"}, (), (), recipe="delayed", expected_recipe={"mxfp8"})
    assert s.recipe_ok is False
    assert totals([s]).recipe_ok == 0 and totals([s]).recipe_scored == 1


# ------------------------------------------------------------------------------------------------ the checks
def test_config_checker_accepts_a_good_te_yaml_and_rejects_broken_ones(tmp_path):
    layers = f.family_layers("llama", 4)
    fc2 = "model.model.layers.3.layernorm_mlp.fc2"
    decision = f.decision(layers, f.block_names("llama", 1), [f.override(fc2, "dgrad", "wgrad")])
    text = render(decision, "te-yaml").content
    with ConfigChecker(tmp_path) as checker:
        assert checker.check(decision) == dict.fromkeys(
            ("te-yaml", "megatron", "hydra", "torchao", "te-recipe", "torchtitan"), []
        )
        # a te-recipe / torchtitan file that forgot the skips and overrides is caught
        weaker = f.decision(layers)
        assert checker.check_te_recipe(render(weaker, "te-recipe").content, decision)
        assert checker.check_torchtitan(render(weaker, "torchtitan").content, decision)
        # unknown feature: nvdlfw_inspect refuses to load the file
        assert checker.check_te_yaml(text.replace("DisableFP8Layer", "DisableFP8Layr"), decision)
        # overlapping sections: a layer matched by two enabled sections
        parsed = yaml.safe_load(text)
        parsed["fp8_stats_remaining_layers"]["layers"]["layer_name_regex_pattern"] = ".*"
        errors = checker.check_te_yaml(yaml.safe_dump(parsed), decision)
        assert any("multiple debug configs" in e for e in errors)
        # wrong GEMMs for the override
        errors = checker.check_te_yaml(text.replace("gemms: [dgrad, wgrad]", "gemms: [wgrad]"), decision)
        assert any(fc2 in e for e in errors)
        # a decision asking for more than the file does: the extra skipped layer stays in FP8 in the file
        bigger = f.decision(layers, (*f.block_names("llama", 1), "model.lm_head"), [f.override(fc2, "dgrad", "wgrad")])
        assert any("model.lm_head" in e for e in checker.check_te_yaml(text, bigger))
        assert checker.check_megatron("echo 'unterminated\n", decision)
        assert checker.check_hydra("fp8_config.enabled=True extra=1\n", decision)
        assert checker.check_torchao("SKIP_FQNS = {'a'}\ndef module_filter_fn(mod, fqn):\n    return True\n", decision)


# ------------------------------------------------------------------------------------------------ the suite
def test_suite_covers_every_pattern_in_two_families_and_both_rank_counts():
    families: dict[str, set[str]] = {}
    for case in SUITE:
        for pattern in case.truth.patterns:
            families.setdefault(pattern, set()).add(case.family)
    assert set(families) == set(PATTERNS)
    assert all(len(fams) >= 2 for fams in families.values()), families
    assert {c.run.ranks for c in SUITE} >= {1, 8}
    assert any(c.run.ranks == 8 and "rank_outlier" in c.truth.patterns for c in SUITE)
    assert {c.run.first_index for c in SUITE} == {0, 1}
    assert sum(len(c.truth.patterns) > 1 for c in SUITE) >= 2
    assert len({c.name for c in SUITE}) == len(SUITE)


def test_recipe_fix_cases_expect_a_recipe_instead_of_skips():
    for case in SUITE:
        if case.truth.patterns & {"overflow", "scale_instability"} and len(case.truth.patterns) == 1:
            assert case.truth.skip_layers == frozenset() and case.expected_recipe == PER_STEP_RECIPES
        if "uniform" in case.truth.patterns or case.truth.patterns == {"rank_outlier"}:
            assert case.truth.skip_layers == frozenset()
    assert SUITE_BY_NAME["uniform"].expected_recipe == {"mxfp8"}
    assert SUITE_BY_NAME["combo/late+overflow-megatron"].truth.skip_layers  # the late layers still need a fix

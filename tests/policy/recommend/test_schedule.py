"""Precision that changes over a run: a late failure, a projected one and the LR decay of an NVFP4 policy become
phases (recommend/schedule.py), each rendered on its own with its restart step, and a live run that follows the
schedule raises `switch_now` when its step or its trend reaches the planned point (policy/live/switch.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from fp8_policy.policy.live import switch as live_switch
from fp8_policy.policy.recommend import RecommendOptions, recommend
from fp8_policy.policy.recommend.schedule import render_phase, schedule_note
from fp8_policy.policy.render.precision import precision_of
from fp8_policy.policy.synthetic import SCENARIOS, Rule, Scenario, SyntheticRun, all_of, blocks, ramp, roles
from tests.policy.analysis.synthetic_data import run_data


def _recommend(run, metadata=None, **options):
    data = run_data(run, {"recipe": "Float8CurrentScaling", "gpu": "H100", "te_version": "2.20.2", **(metadata or {})})
    opts = replace(RecommendOptions.from_metadata(data.metadata), **options)
    return recommend(data, options=opts)


def test_layers_that_fail_late_run_fp8_until_their_onset_then_bf16_after_a_restart() -> None:
    case = SCENARIOS["rising_trend"]
    rec = _recommend(case.run)
    late = {o.layer for o in rec.decision.gemm_overrides} | set(rec.decision.skip_layers)
    assert late and len(rec.schedule) == 2, rec.rationale
    first, second = rec.schedule
    assert first.from_step == 0 and second.from_step > 0
    assert not ({o.layer for o in first.decision.gemm_overrides} | set(first.decision.skip_layers)) & late
    assert all(precision_of(first.decision)[n] == "current" for n in late)
    assert second.decision.gemm_overrides == rec.decision.gemm_overrides
    body = rec.to_dict()["schedule"]
    assert [p["from_step"] for p in body] == [0, second.from_step] and body[1]["restart"] is True
    text = render_phase(rec.schedule, 1, "te-yaml")
    assert f"Restart from the checkpoint at step {second.from_step}" in text.content
    assert text.filename.endswith(".phase1.yaml")
    assert any(line.startswith("Schedule (2 phases") for line in rec.rationale)
    assert "schedule" in schedule_note(rec.schedule)[0]


def test_a_projected_failure_is_a_later_phase_a_live_run_watches() -> None:
    rules = (Rule(all_of(blocks(3), roles("fc2")), ramp(0.1, 1.7), "gradient", "underflows%"),)
    run = SyntheticRun(family="megatron", num_layers=6, iterations=400, profile=Scenario(rules=rules))
    rec = _recommend(run)
    layer = "model.module.decoder.layers.4.mlp.linear_fc2"
    assert not rec.decision.skip_layers and not rec.decision.gemm_overrides  # below critical now: watched
    assert len(rec.schedule) == 2, rec.rationale
    later = rec.schedule[1]
    assert later.from_step > 400 and [t.layer for t in later.triggers] == [layer]
    assert {o.layer: o.gemms for o in later.decision.gemm_overrides} == {layer: ("dgrad", "wgrad")}
    # a live run started with this schedule in its metadata
    phases = live_switch.planned({"schedule": rec.to_dict()["schedule"]})
    assert [p.from_step for p in phases] == [later.from_step]
    name = f"{layer}_gradient_underflows%"
    state: dict[str, object] = {}
    step = later.from_step
    quiet = live_switch.advance(
        state, phases, 0, [name], np.array([0, 2]), np.array([step - 40, step - 30]), np.array([1.6, 1.7])
    )
    assert quiet == []
    its, vals = np.array([step - 20, step - 10]), np.array([1.9, 2.1])  # critical reached before the planned step
    (event,) = live_switch.advance(state, phases, 0, [name], np.array([0, 2]), its, vals)
    assert event.kind == "switch_now" and event.iteration == step - 10 and event.detail["reason"] == "trend"
    assert "--phase 1" in event.message
    assert live_switch.advance(state, phases, 0, [name], np.array([0, 1]), np.array([later.from_step]), vals[:1]) == []


def test_a_live_run_switches_at_the_planned_step_without_a_trigger() -> None:
    phases = live_switch.planned({"schedule": [{"from_step": 0}, {"from_step": 1000, "triggers": []}, "bad"]})
    state: dict[str, object] = {}
    names = ["model.layers.1.mlp.fc1_activation_underflows%"]
    assert live_switch.advance(state, phases, 0, names, np.array([0, 1]), np.array([990]), np.array([0.1])) == []
    (event,) = live_switch.advance(state, phases, 0, names, np.array([0, 1]), np.array([1000]), np.array([0.1]))
    assert event.detail == {"phase": 1, "from_step": 1000, "reason": "step"}


def test_the_lr_decay_runs_nvfp4_fprop_in_bf16_from_its_start(tmp_path: Path) -> None:
    from tests.policy.recommend.test_mixed_format import METADATA, mixed_run

    data = mixed_run(tmp_path)
    options = replace(RecommendOptions.from_metadata(METADATA), lr_decay_start=90_000)
    rec = recommend(data, options=options)
    assert [p.from_step for p in rec.schedule] == [0, 90_000]
    after = rec.schedule[1].decision
    fprop = {o.layer for o in after.gemm_overrides if o.gemms == ("fprop",)}
    nvfp4 = {n for n, r in precision_of(rec.decision).items() if r == "nvfp4"}
    assert fprop == nvfp4 and len(fprop) == 16
    assert rec.schedule[0].decision == rec.decision
    assert RecommendOptions.from_metadata({}, {"lr_decay_start": 5}).lr_decay_start == 5

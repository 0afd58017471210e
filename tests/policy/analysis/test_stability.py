"""overflow and scale_instability, including the 0.0000 rounding rule."""

from __future__ import annotations

import numpy as np

from fp8_policy.policy.analysis import Pattern, Severity, Thresholds, analyze
from tests.policy.analysis.factories import Spec, build_run, name

LAYER = name("hf", 3, "proj")


def test_overflow_under_delayed_scaling() -> None:
    spec = Spec(family="hf", n_blocks=8, overflow={LAYER: 0.8, name("hf", 4, "fc1"): 0.02})
    analysis = analyze(build_run(spec))
    assert analysis.patterns() == {"overflow"}
    finding = analysis.by_pattern(Pattern.OVERFLOW)[0]
    assert finding.layers == (LAYER, name("hf", 4, "fc1"))  # worst first
    assert finding.severity is Severity.WARNING and finding.evidence[0].max > 0.8
    assert finding.evidence[0].onset is not None and finding.evidence[0].onset > 0


def test_zero_overflow_is_no_finding() -> None:
    assert analyze(build_run(Spec(family="hf", n_blocks=8, overflow={}))).patterns() == {"healthy"}


def jumpy(n: int = 60, low: float = 0.0003, factor: float = 16.0) -> np.ndarray:
    scale = np.full(n, low)
    scale[20:30] = low * factor
    scale[40:50] = low * factor
    return np.round(scale, 4)


def test_scale_jumps_are_instability() -> None:
    spec = Spec(family="hf", n_blocks=8, scale_curves={(LAYER, "activation"): jumpy()})
    analysis = analyze(build_run(spec))
    assert analysis.patterns() == {"scale_instability"}
    finding = analysis.by_pattern(Pattern.SCALE_INSTABILITY)[0]
    assert finding.layers == (LAYER,) and finding.severity is Severity.CRITICAL  # 4 jumps per series
    ev = finding.evidence[0]
    assert ev.count == 4 and ev.onset == 200 and ev.ratio > 8


def test_a_single_jump_is_a_warning_and_the_factor_is_settable() -> None:
    scale = np.full(60, 0.0004)
    scale[30:] = 0.0050
    run = build_run(Spec(family="hf", n_blocks=8, scale_curves={(LAYER, "weight"): scale}))
    assert analyze(run).findings[0].severity is Severity.WARNING
    assert analyze(run, Thresholds(scale_jump_factor=20.0)).patterns() == {"healthy"}


def test_printed_zero_is_not_a_drop_to_zero() -> None:
    # 0.0003 <-> 0.0000 flips: the 0.0000 points are "< 5e-5", not zeros, and cannot be sized.
    scale = np.where(np.arange(60) % 2 == 0, 0.0003, 0.0)
    run = build_run(Spec(family="hf", n_blocks=8, scale_curves={(LAYER, "activation"): scale}))
    analysis = analyze(run)
    assert analysis.patterns() == {"healthy"}
    assert analysis.stats["censored_scale_fraction"] > 0.3  # gradients print 0.0000 everywhere too
    assert any("not zero" in note for note in analysis.notes)


def test_rounding_noise_at_the_print_resolution_is_not_a_jump() -> None:
    scale = np.where(np.arange(60) % 3 == 0, 0.0001, 0.0002)  # 2x apart as printed, both within +-5e-5
    run = build_run(Spec(family="hf", n_blocks=8, scale_curves={(LAYER, "activation"): scale}))
    assert analyze(run).patterns() == {"healthy"}
    # With exact values (no print rounding) the same numbers are a jump at a factor of 1.5.
    exact = Thresholds(print_resolution=0.0, scale_jump_factor=1.5)
    assert "scale_instability" in analyze(run, exact).patterns()


def test_warmup_scale_of_one_is_not_a_jump() -> None:
    # Every series starts at scale_inv 1.0 (delayed-scaling warm-up) and drops >1000x at iteration 10.
    analysis = analyze(build_run(Spec(family="hf", n_blocks=8)), Thresholds(warmup_fraction=0.0))
    assert analysis.patterns() == {"healthy"}

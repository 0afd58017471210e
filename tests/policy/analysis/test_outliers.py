"""rank_outlier: LocalOutlierFactor across ranks, against the naive mean ± 3·std rule."""

from __future__ import annotations

import numpy as np

from fp8_policy.policy.analysis import Pattern, Thresholds, analyze
from fp8_policy.policy.analysis.outliers import lof_outliers
from tests.policy.analysis.factories import FAMILIES, Spec, blocks, build_run, name

BAD_RANK = 5


def outlier_spec(ranks: int = 8, level: float = 3.0) -> Spec:
    spec = Spec(family="esm2", n_blocks=8, ranks=ranks)
    for block in blocks("esm2", 8):
        for sub in FAMILIES["esm2"]["subs"]:  # type: ignore[union-attr]
            spec.rank_curves[(BAD_RANK, name("esm2", block, sub), "gradient")] = level
    return spec


def naive_outliers(values: np.ndarray, k: float = 3.0) -> list[int]:
    mean, std = values.mean(), values.std()
    return [i for i, v in enumerate(values) if std > 0 and abs(v - mean) > k * std]


def test_one_rank_of_eight_is_found_where_mean_plus_3_std_cannot_see_it() -> None:
    values = np.array([0.31, 0.29, 0.30, 0.33, 0.28, 3.0, 0.30, 0.32])
    assert naive_outliers(values) == []  # the outlier inflates the std it is judged by: max z = 7/sqrt(8) < 3
    found = lof_outliers(values, Thresholds())
    assert [index for index, _ in found] == [5] and found[0][1] > 10


def test_rank_outlier_finding_and_its_rank_is_left_out_of_layer_levels() -> None:
    analysis = analyze(build_run(outlier_spec()))
    assert analysis.patterns() == {"rank_outlier"}  # not uniform: rank 5 alone does not make layers fail
    finding = analysis.by_pattern(Pattern.RANK_OUTLIER)[0]
    assert len(finding.layers) == 32 and {ev.rank for ev in finding.evidence} == {BAD_RANK}
    assert all(ev.level > 2.0 and ev.reference < 0.2 and ev.tensor == "gradient" for ev in finding.evidence)
    assert f"rank {BAD_RANK} disagrees with the other 7 ranks" in finding.summary
    assert all(row.underflows["gradient"].level < 0.5 for row in analysis.layers if row.underflows)
    assert analysis.stats["rank_outlier_series_excluded"] == 32


def test_without_the_outlier_model_the_max_across_ranks_would_fail_every_layer() -> None:
    # With rank outliers switched off (impossible score), levels take the worst rank: every layer fails.
    analysis = analyze(build_run(outlier_spec()), Thresholds(rank_outlier_score=1e9))
    assert analysis.patterns() == {"uniform"}


def test_ranks_split_in_two_groups_are_not_outliers() -> None:
    spec = outlier_spec()
    for (_rank, layer, tensor), curve in list(spec.rank_curves.items()):
        for other in (1, 2, 3):
            spec.rank_curves[(other, layer, tensor)] = curve
    analysis = analyze(build_run(spec))
    assert "rank_outlier" not in analysis.patterns() and "uniform" in analysis.patterns()


def test_rank_to_rank_noise_is_not_an_outlier() -> None:
    spec = Spec(n_blocks=6, ranks=8)
    for block in range(6):
        spec.curves[(name("megatron", block, "fc1"), "gradient")] = 3.0  # same level on every rank, 25 % noise
    assert "rank_outlier" not in analyze(build_run(spec)).patterns()


def test_needs_enough_ranks() -> None:
    assert "rank_outlier" not in analyze(build_run(outlier_spec(ranks=1))).patterns()
    assert lof_outliers(np.array([0.3, 0.31, 3.0]), Thresholds()) == []


def test_independent_per_rank_levels_are_noise_not_outliers() -> None:
    # Each rank draws its own warning-band level per layer (0.4-1.2 %): isolated disagreements on a few
    # series, no rank off consistently. Before the consistency rule every rank of 8 was reported.
    spec = Spec(family="esm2", n_blocks=12, ranks=8, seed=7)
    rng = np.random.default_rng(11)
    for rank in range(8):
        for block in blocks("esm2", 12):
            for sub in FAMILIES["esm2"]["subs"]:  # type: ignore[union-attr]
                spec.rank_curves[(rank, name("esm2", block, sub), "gradient")] = float(rng.uniform(0.4, 1.2))
    analysis = analyze(build_run(spec))
    assert "rank_outlier" not in analysis.patterns()
    # ... while the same data without the consistency rule reports isolated "outliers"
    loose = analyze(build_run(spec), Thresholds(rank_outlier_min_share=0.0))
    assert "rank_outlier" in loose.patterns()

"""FP8 statistics analysis: `analyze(run, thresholds) -> Analysis` with pattern findings and a per-layer table.

Input contract: a `RunData` (layers with structure/precision, per-rank series). No I/O, no web or database imports.
Pipeline: a parallel job's view (shards.py: tensor-parallel shards combined, replicas that disagree left out) →
signals (warm-up, windows, levels) → rank outliers (LOF; high outliers leave the per-layer levels) →
layout (status, levels, blocks) → rising trends (Huber) → layer patterns → overflow, scale instability →
NaN/inf bursts, unassessed-but-high series → one verdict per series (coverage.py) and a `warning_band` finding
for layers no other finding reports at their severity → `healthy` when nothing was found → table, stats, notes.
Invariant (tests/policy/test_one_verdict.py): every layer row at a severity above ok is named by a finding of at
least that severity, so the worst finding is the run's verdict everywhere (badge, gate, runs list).
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits

from fp8_policy.policy.analysis.config_bf16 import config_notes, with_config_bf16
from fp8_policy.policy.analysis.coverage import cover_uncovered, detect_nonfinite, detect_unassessed, series_verdicts
from fp8_policy.policy.analysis.findings import (
    Evidence,
    Finding,
    LayerAssessment,
    Pattern,
    SeriesVerdict,
    TensorUnderflow,
)
from fp8_policy.policy.analysis.formats import band_note, format_view
from fp8_policy.policy.analysis.layout import LayerStatus, build_layout, layer_statuses, metadata_notes
from fp8_policy.policy.analysis.outliers import detect_rank_outliers
from fp8_policy.policy.analysis.patterns import detect_layer_patterns, healthy_finding
from fp8_policy.policy.analysis.result import Analysis
from fp8_policy.policy.analysis.shards import parallel_findings, parallel_view
from fp8_policy.policy.analysis.signals import extract_signals
from fp8_policy.policy.analysis.stability import detect_overflow, detect_scale_instability
from fp8_policy.policy.analysis.table import assessment_table, run_notes, run_stats
from fp8_policy.policy.analysis.trends import crossed_layers, detect_rising_trends
from fp8_policy.policy.records import RunData
from fp8_policy.policy.thresholds import Severity, Thresholds

__all__ = [
    "Analysis",
    "Evidence",
    "Finding",
    "LayerAssessment",
    "Pattern",
    "SeriesVerdict",
    "Severity",
    "TensorUnderflow",
    "Thresholds",
    "analyze",
]


def analyze(run: RunData, thresholds: Thresholds | None = None) -> Analysis:
    """Find the FP8 precision patterns of a run; findings are ordered by severity (worst first).

    BLAS is limited to one thread meanwhile: the scikit-learn fits are tiny (≤ 400 points), and a threaded BLAS
    made each one 5-100x slower on a loaded 2-core machine.
    """
    with threadpool_limits(limits=1):
        return _analyze(run, thresholds or Thresholds())


def _analyze(run: RunData, thresholds: Thresholds) -> Analysis:
    requested = thresholds
    config = config_notes(run)  # a Megatron precision config's BF16 and custom-factory layers (config_bf16.py)
    run = with_config_bf16(run)  # its BF16 layers trained in BF16 where their logs say nothing else
    parallel = parallel_view(run)  # a parallel job: shards combined, replicas that disagree left out (shards.py)
    run, training = format_view(parallel.run)  # E8M0 bytes converted, impossible scales out, the training recipe read
    thresholds = training.bands(thresholds)
    signals = extract_signals(run, thresholds, training.layer_recipes)
    training.uncensor(signals)
    statuses = layer_statuses(run)
    fp8_layers = [name for name, status in statuses.items() if status is LayerStatus.FP8]
    layer_bands = training.layer_bands(requested)  # a mixed-format run: layers judged with their own format's bands
    outliers, excluded = detect_rank_outliers(fp8_layers, signals, thresholds, layer_bands)
    layout = build_layout(run, signals, thresholds, statuses, excluded, layer_bands)
    trends = detect_rising_trends(layout, thresholds)
    findings = [
        *detect_layer_patterns(layout, thresholds, frozenset(crossed_layers(trends, thresholds, layout))),
        *trends,
        *outliers,
        *detect_overflow(layout, signals, thresholds),
        *detect_scale_instability(layout, signals, thresholds, exact=training.e8m0_layers),
        *detect_nonfinite(layout, signals, thresholds),
        *detect_unassessed(layout, signals, thresholds),
        *parallel_findings(parallel, signals.warmup_cut, thresholds, fp8_layers),
    ]
    verdicts = series_verdicts(layout, signals, thresholds)
    findings += cover_uncovered(findings, verdicts, thresholds)
    if not findings:
        findings = [healthy_finding(layout, thresholds, "NVFP4" if training.recipe == "nvfp4" else "FP8")]
    findings.sort(key=lambda finding: finding.sort_key())
    stats = run_stats(layout, signals, thresholds)
    stats["rank_outlier_series_excluded"] = len(excluded)
    if parallel.groups:
        stats["level_rule"] += "; tensor-/context-parallel shards combined first (mean; scale_inv min/max)"
    return Analysis(
        findings=findings,
        layers=assessment_table(layout, findings, thresholds, verdicts),
        thresholds=thresholds,
        signals=signals,
        layout=layout,
        stats=stats,
        notes=[
            *metadata_notes(run),
            *config,
            *parallel.notes,
            *band_note(training, thresholds),
            *training.notes,
            *run_notes(layout, signals, stats, thresholds, run.session_offsets),
        ],
        requested=requested,
        training=training,
        parallel=parallel.info,
        data=parallel.run,
    )

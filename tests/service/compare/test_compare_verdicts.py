"""The compare page's per-layer severity is each run's layer verdict: a layer moved to BF16 is not assessed in
that run (no verdict), never `ok`."""

from __future__ import annotations

from fp8_policy.policy.analysis import analyze
from fp8_policy.service.compare.pair import compare_analyses
from tests.policy.analysis.factories import Spec, build_run, name


def test_a_layer_moved_to_bf16_has_no_verdict_in_the_later_run() -> None:
    base = analyze(build_run(Spec(family="hf", n_blocks=8)))
    head = analyze(build_run(Spec(family="hf", n_blocks=8, bf16_blocks=(0,))))

    layers = {row["name"]: row for row in compare_analyses(base, head)["layers"]}

    moved = layers[name("hf", 0, "proj")]
    assert moved["status"] == {"base": "fp8", "head": "bf16"}
    assert moved["severity"] == {"base": "ok", "head": None}  # it used to say ok -> ok
    assert layers[name("hf", 3, "proj")]["severity"] == {"base": "ok", "head": "ok"}

"""Model dimensions are bounded where they enter: a request's past its bound is refused naming the bound, run
metadata past it is ignored with a note (the analysis's notes, the recommendation's rationale), and nothing is
allocated in proportion to a number a client stated (policy/model_bounds.py)."""

from __future__ import annotations

import tracemalloc

import pytest

from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.model_bounds import (
    BOUNDS,
    MAX_NUM_LAYERS,
    checked_dimension,
    dimension_problem,
    metadata_dimension,
)
from fp8_policy.policy.recommend import RecommendOptions, recommend
from fp8_policy.policy.recommend.options import ModelDims
from tests.policy.analysis.factories import Spec, build_run

HUGE = 10**18


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (24, None),
        (24.0, None),
        (MAX_NUM_LAYERS, None),
        (MAX_NUM_LAYERS + 1, "must be at most 10,000 (the bound of num_layers)"),
        (HUGE, "must be at most 10,000"),
        (1e300, "must be at most 10,000"),
        (0, "must be a positive integer"),
        (-3, "must be a positive integer"),
        (2.5, "must be a positive integer"),
        (True, "must be a positive integer"),
        ("24", "must be a positive integer"),
        (float("nan"), "must be a positive integer"),
    ],
)
def test_a_dimension_is_a_positive_integer_within_its_bound(value: object, problem: str | None) -> None:
    found = dimension_problem("num_layers", value)
    assert (found is None) if problem is None else (problem in (found or ""))


def test_every_bound_is_checked_and_named() -> None:
    for name, bound in BOUNDS.items():
        assert checked_dimension(name, bound) == bound
        with pytest.raises(ValueError, match=f"at most {bound:,} \\(the bound of {name}\\)"):
            checked_dimension(name, bound + 1)


def test_a_long_value_is_shortened_in_the_message() -> None:
    problem = dimension_problem("hidden_size", 10**200, key="d_model") or ""
    assert "'d_model'" in problem and len(problem) < 200


def test_request_options_past_a_bound_are_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="'num_layers' must be at most 10,000"):
        RecommendOptions.from_metadata({}, {"model_dims": {"num_layers": HUGE}})
    with pytest.raises(ValueError, match="'n_embd' must be at most"):
        ModelDims.from_mapping({"n_embd": 2**40})


def test_metadata_past_a_bound_is_ignored_with_a_note() -> None:
    options = RecommendOptions.from_metadata({"num_layers": HUGE, "hidden_size": 1024, "vocab_size": -1})
    assert options.dims.num_layers is None and options.dims.hidden_size == 1024 and options.dims.vocab_size is None
    assert len(options.ignored) == 2
    assert any("'num_layers' must be at most 10,000" in note for note in options.ignored)
    assert any("'vocab_size' must be a positive integer" in note for note in options.ignored)
    assert metadata_dimension({"n_layer": HUGE}, "num_layers", ("num_layers", "n_layer"))[0] is None
    assert metadata_dimension({"num_layers": 48}, "num_layers") == (48, None)
    assert metadata_dimension({}, "num_layers") == (None, None)


def test_an_analysis_of_a_run_claiming_10_to_the_18_layers_is_bounded_and_says_so() -> None:
    run = build_run(Spec(n_blocks=6, n_points=40, metadata={"num_layers": HUGE}))
    tracemalloc.start()
    try:
        analysis = analyze(run)
        rec = recommend(run, analysis)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 * 1024**2  # 10**18 blocks would be exabytes; the run's own 6 blocks are a few MB
    assert analysis.layout.blocks == list(range(len(analysis.layout.blocks))) and len(analysis.layout.blocks) <= 6
    note = next(n for n in analysis.notes if n.startswith("Run metadata ignored"))
    assert "'num_layers' must be at most 10,000" in note
    assert any("'num_layers' must be at most 10,000" in line for line in rec.rationale)


def test_metadata_within_the_bound_still_adds_unlogged_blocks() -> None:
    run = build_run(Spec(n_blocks=6, n_points=40, metadata={"num_layers": 12}))
    analysis = analyze(run)
    assert len(analysis.layout.blocks) == 12
    assert not [n for n in analysis.notes if n.startswith("Run metadata ignored")]

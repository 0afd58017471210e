"""A run that trained in BF16 (the collector's what-if run: "High Precision" plan lines, what-if stats only) is
recommended a low-precision recipe: the recommendation says the run trained in BF16 and that the recipe changes."""

from __future__ import annotations

from fp8_policy.policy.recommend.recipe import te_default_recipe
from fp8_policy.policy.records import Precision
from tests.policy.frontier_runs import frontier_run, noisy
from tests.policy.recommend.test_ladder import ladder


def bf16_run(gpu: str = "B200"):  # type: ignore[no-untyped-def]
    return frontier_run(
        lambda layer, block, sub, tensor, key, rng: noisy(10.0 if tensor == "weight" else 7.0, rng),
        ("nvfp4_underflows%",),
        metadata={"gpu": gpu},
        precision=Precision.HIGH,
    )


def test_a_bf16_run_is_said_to_have_trained_in_bf16_and_the_recipe_changes() -> None:
    rec, data = ladder(bf16_run())
    recipe = data["recipe"]
    assert recipe["name"] == te_default_recipe(10.0)[0] == "mxfp8"
    assert recipe["current"] == "bf16" and recipe["changed_from"] == "bf16", recipe
    line = next(line for line in rec.rationale if line.startswith("Recipe: "))
    assert "Current recipe: MXFP8" not in line and "Trained in: BF16 (high precision" in line, line
    assert "changes the run from BF16 to MXFP8" in line, line


def test_an_fp8_run_keeping_its_recipe_is_unchanged_and_names_it() -> None:
    run = frontier_run(lambda *a: noisy(0.1, a[-1]), ("underflows%",), metadata={"recipe": "current", "gpu": "B200"})
    rec, data = ladder(run)
    recipe = data["recipe"]
    assert (recipe["name"], recipe["current"], recipe["changed_from"]) == ("current", "current", None), recipe
    line = next(line for line in rec.rationale if line.startswith("Recipe: "))
    assert "Current recipe: Current scaling" in line and "Trained in" not in line, line

"""After a recipe switch on what-if evidence, the skip list judges the what-if levels with the bands of the recipe
recommended: an NVFP4 run switched to MXFP8 keeps a layer whose mxfp8_ what-if is severe out of FP8 (FP8's 2 %, not
NVFP4's 13 %), and the evidence says which band was used."""

from __future__ import annotations

from fp8_policy.policy.thresholds import Thresholds
from tests.policy.frontier_runs import frontier_run, layer_name, noisy
from tests.policy.recommend.test_ladder import ladder

BAD = layer_name(5, "mlp.linear_fc1")  # mxfp8_ what-if at 5 % on two tensors: severe in FP8's bands
ONE = layer_name(6, "mlp.linear_fc2")  # mxfp8_ what-if at 3 % on the gradient: critical in FP8's, far below 13 %


def nvfp4_run_switching_to_mxfp8():  # type: ignore[no-untyped-def]
    """NVFP4 training, half the layers' gradients at 25 % nvfp4_underflows% (a recipe problem), mxfp8_ what-ifs
    low everywhere but on BAD and ONE."""

    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        if key == "mxfp8_underflows%":
            if layer == BAD and tensor != "weight":
                return noisy(5.0, rng)
            return noisy(3.0 if layer == ONE and tensor == "gradient" else 0.2, rng)
        if tensor == "gradient" and block >= 4:
            return noisy(25.0, rng)
        return noisy(10.0 if tensor == "weight" else 7.0, rng)

    return frontier_run(values, ("nvfp4_underflows%", "mxfp8_underflows%"), metadata={"recipe": "nvfp4"})


def test_after_a_switch_to_mxfp8_the_skip_list_uses_fp8_bands() -> None:
    rec, data = ladder(nvfp4_run_switching_to_mxfp8())
    fp8 = Thresholds()
    assert (data["recipe"]["name"], data["recipe"]["changed_from"]) == ("mxfp8", "nvfp4"), data["recipe"]
    # NVFP4 training logs no weight level in the layout, so a single failing tensor skips the whole layer
    assert data["fp8_skip_layers"] == [BAD, ONE] and data["gemm_overrides"] == [], data["fp8_skip_layers"]
    evidence = data["recipe"]["evidence"]
    assert "what-if stats" in evidence and f"MXFP8's FP8 band (critical {fp8.critical:g}%)" in evidence, evidence
    text = "\n".join(rec.rationale)
    assert f"at or above {fp8.critical:g}% underflow (mxfp8_ what-if levels judged with" in text, text
    assert f"{ONE} (gradient 3." in text, text  # the level it was judged on: the what-if's, not NVFP4's 25 %
    assert f"reaches {fp8.nvfp4_critical:g}% underflow" not in text, text
    assert rec.ladder is not None and not {BAD, ONE} & set(rec.ladder.lifted)
    assert {data["precision_ladder"]["layers"][n]["precision"] for n in (BAD, ONE)} == {"bf16"}


def test_without_a_switch_an_nvfp4_run_keeps_nvfp4_bands_and_says_so() -> None:
    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        return noisy(10.0 if tensor == "weight" else 7.0, rng)

    _, data = ladder(frontier_run(values, ("nvfp4_underflows%",), metadata={"recipe": "nvfp4"}))
    assert data["recipe"]["name"] == "nvfp4" and data["fp8_skip_layers"] == []
    assert "critical 2%" not in data["recipe"]["evidence"]

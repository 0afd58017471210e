"""Training every arm in R replicates (client/experiment/runner.py `run_arms` once per replicate), so the service
judges the recommendation paired over replicates against the measured noise (policy/recommend/verification.py):

    measured = run_replicates(arms, replicates=3, seed=0, model=make_model, loss=loss_fn, batches=train_batches,
                              heldout=heldout_batches, steps=100)
    client.post_experiment(run_id, experiment_body(measured, name="3 seeds", run_id=run_id))

Replicate r of every arm trains under the same seed: `seed + r` (or `seeds[r]`), which sets the initial weights
(`torch.manual_seed` before `model()`) and the emulated casts' rounding stream. The data order changes with the
replicate only when `batches` accepts a `seed` keyword: it is then called as `batches(seed=<the replicate's seed>)`;
a `batches()` without one gives every replicate the same order (the replicates then differ in initial weights and
rounding only).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from fp8_policy.client.experiment.arms import Arm
from fp8_policy.client.experiment.runner import Batch, run_arms

MAX_REPLICATES = 32  # the service's limit (service/experiments/validate.py)


def _takes_seed(batches: Callable[..., Iterator[Batch]]) -> bool:
    try:
        parameters = inspect.signature(batches).parameters.values()
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return False
    return any(p.name == "seed" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _prefixed(progress: Callable[[str], None] | None, prefix: str) -> Callable[[str], None] | None:
    if progress is None:
        return None
    tell = progress
    return lambda text: tell(prefix + text)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if all(math.isfinite(v) for v in values) else math.nan


def run_replicates(
    arms: Sequence[Arm],
    *,
    replicates: int,
    batches: Callable[..., Iterator[Batch]],
    seed: int = 0,
    seeds: Sequence[int] | None = None,
    progress: Callable[[str], None] | None = None,
    **run_arms_kwargs: Any,
) -> list[dict[str, Any]]:
    """Every arm in `replicates` replicates (module docstring); one dict per arm: arm, steps, `heldout_losses` (one
    per replicate), `heldout_loss` (their mean; NaN when any replicate diverged), `step_time_s` and `train_loss`
    (means), `seeds` and `replicates` (the `run_arms` row of each replicate). Other keywords go to `run_arms`."""
    if not 1 <= replicates <= MAX_REPLICATES:
        raise ValueError(f"replicates must be 1 to {MAX_REPLICATES}, got {replicates}")
    chosen = list(seeds) if seeds is not None else [seed + r for r in range(replicates)]
    if len(chosen) != replicates:
        raise ValueError(f"seeds must hold one seed per replicate: {len(chosen)} seeds for {replicates} replicates")
    seeded = _takes_seed(batches)
    rows: list[list[dict[str, Any]]] = []
    for r, replicate_seed in enumerate(chosen):

        def stream(s: int = replicate_seed) -> Iterator[Batch]:
            return batches(seed=s) if seeded else batches()

        say = _prefixed(progress, f"replicate {r + 1}/{replicates} (seed {replicate_seed}): ")
        rows.append(run_arms(arms, batches=stream, seed=replicate_seed, progress=say, **run_arms_kwargs))
    return merge_replicates(rows, chosen)


def merge_replicates(rows: Sequence[Sequence[Mapping[str, Any]]], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """`run_arms` rows of each replicate (replicate r: `rows[r]`, the arms in one order) as one row per arm, the
    shape `run_replicates` returns and `experiment_body` posts."""
    if len(rows) != len(seeds) or not rows:
        raise ValueError(f"one seed per replicate: {len(seeds)} seeds for {len(rows)} replicates")
    out = []
    for index, first in enumerate(rows[0]):
        runs = [replicate[index] for replicate in rows]
        if any(run["arm"].name != first["arm"].name for run in runs):
            raise ValueError("every replicate must train the arms in one order")
        losses = [float(run["heldout_loss"]) for run in runs]
        out.append(
            {
                "arm": first["arm"],
                "steps": first["steps"],
                "heldout_losses": losses,
                "heldout_loss": _mean(losses),
                "step_time_s": _mean([run["step_time_s"] for run in runs]),
                "train_loss": _mean([run["train_loss"] for run in runs]),
                "seeds": list(seeds),
                "replicates": runs,
            }
        )
    return out

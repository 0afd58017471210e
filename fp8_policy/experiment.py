"""`fp8_policy.experiment`: short training arms that confirm or contradict a recommendation (the `[torch]` extra).

    from fp8_policy.experiment import arms_from_recommendation, run_arms, experiment_body
    from fp8_policy.experiment import run_replicates  # every arm in R replicates: a paired, noise-aware verdict

The implementation lives in `fp8_policy.client.experiment`; names are resolved on first use (PEP 562), so
`import fp8_policy.experiment` loads no torch until `run_arms` (or the emulated casts) is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fp8_policy._lazy import lazy_attributes

_ARMS = "fp8_policy.client.experiment.arms"
_RUNNER = "fp8_policy.client.experiment.runner"
_REPLICATES = "fp8_policy.client.experiment.replicates"
__all__ = [
    "Arm",
    "apply_emulated",
    "arms_from_recommendation",
    "experiment_body",
    "run_arms",
    "run_replicates",
    "te_apply",
]

if TYPE_CHECKING:
    from fp8_policy.client.experiment.arms import Arm, arms_from_recommendation, experiment_body
    from fp8_policy.client.experiment.replicates import run_replicates
    from fp8_policy.client.experiment.runner import apply_emulated, run_arms, te_apply


__getattr__, __dir__ = lazy_attributes(
    __name__,
    globals(),
    {
        "Arm": _ARMS,
        "arms_from_recommendation": _ARMS,
        "experiment_body": _ARMS,
        "apply_emulated": _RUNNER,
        "run_arms": _RUNNER,
        "te_apply": _RUNNER,
        "run_replicates": _REPLICATES,
    },
)

"""Experiments that prove (or refute) a recommendation: short training arms from the same state, measured.

Public entry point: `fp8_policy.experiment` (torch imported only when an arm is trained; the `[torch]` extra).
Modules: `arms` (which arms a recommendation implies: bf16, all_low, the rule baselines, recommended, frontier
points; plain dicts, no torch), `runner` (training them: same initial state, same data order, same seed; the
held-out loss and step time of each), `replicates` (every arm in R replicates, replicate r of every arm under the
same seed, for the service's paired verdict), `spec` (the training spec script `fp8-policy verify` loads).
Client side: the results go to the service with `PolicyClient.post_experiment`.
"""

from fp8_policy.client.experiment.arms import Arm, arms_from_recommendation, experiment_body

__all__ = ["Arm", "arms_from_recommendation", "experiment_body"]

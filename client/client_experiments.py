"""The experiment and frontier calls of `PolicyClient` (a mixin: client/client.py holds the rest).

Belongs here: HTTP only: `POST|GET /api/v1/runs/{id}/experiments`, `GET .../frontier.png`, and the recommendation
for a `target`. A diverged arm's loss is NaN or infinite, which JSON cannot say; the body is sent with Python's
`NaN` / `Infinity` tokens, which the service reads as a diverged arm.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fp8_policy.client._http import HttpSession

RUNS = "/api/v1/runs"


class ExperimentCalls:
    _http: HttpSession

    def post_experiment(self, run_id: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """Store an experiment (arms with held-out losses, `fp8_policy.experiment.experiment_body`); its arms placed on
        the run's frontier and the verdict (`verification`) come back. Needs an upload token."""
        content = json.dumps(dict(body), allow_nan=True).encode()
        return self._http.json_object(
            "POST", f"{RUNS}/{int(run_id)}/experiments", content=content, headers={"Content-Type": "application/json"}
        )

    def experiments(self, run_id: int) -> list[dict[str, Any]]:
        """The run's experiments, newest first."""
        return self._http.json_list("GET", f"{RUNS}/{int(run_id)}/experiments")

    def frontier_png(self, run_id: int, path: str | Path, target: str | None = None) -> Path:
        """Save the run's speed/risk frontier chart (with the rules and measured arms) to `path` (PNG)."""
        self._http.download(f"{RUNS}/{int(run_id)}/frontier.png", Path(path), params={"target": target})
        return Path(path)

    def recommendation_for_target(self, run_id: int, target: str) -> dict[str, Any]:
        """The recommendation re-solved for `target` (speedup:<x> or risk:<x>) on the run's stored frontier."""
        return self._http.json_object(
            "GET", f"{RUNS}/{int(run_id)}/recommendation", params={"format": "json", "target": target}
        )

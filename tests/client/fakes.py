"""Service-shaped test data (run, analysis and recommendation bodies) and `FakeService`, an httpx handler."""

from __future__ import annotations

import httpx


def run_body(run_id: int = 7, status: str = "ready", **extra: object) -> dict:
    """A RunRead-shaped body (the fields the client and CLI read)."""
    body = {
        "id": run_id,
        "name": "esm2-650m",
        "project": "esm2",
        "tags": ["nightly"],
        "status": status,
        "error": None,
        "ranks": 1,
        "layer_count": 50,
        "points": 11_760,
        "iteration_min": 0,
        "iteration_max": 200,
        "lines_read": 11_779,
        "lines_skipped": 0,
        "lines_duplicated": 0,
        "created_at": "2026-01-16T10:00:00Z",
    }
    body.update(extra)
    return body


HEAD = "model.lm_head"


def finding(pattern: str, severity: str, layers: list[str] | None = None) -> dict:
    return {
        "pattern": pattern,
        "severity": severity,
        "layers": layers or [],
        "summary": f"{pattern} | summary",
        "evidence": [],
    }


def layer(name: str, severity: str, level: float | None) -> dict:
    return {
        "name": name,
        "severity": severity,
        "worst_signal": "gradient underflows%",
        "worst_level": level,
        "patterns": ["head_only"] if severity != "ok" else [],
    }


ANALYSIS = {
    "findings": [finding("head_only", "severe", [HEAD]), finding("rising_trend", "warning", ["model.x.3.fc1"])],
    "layers": [layer("model.x.1.fc1", "ok", 0.2), layer("model.x.3.fc1", "warning", 1.2), layer(HEAD, "severe", 9.25)],
}
RECOMMENDATION = {
    "fp8_skip_layers": [HEAD],
    "gemm_overrides": [{"layer": "model.x.3.fc1", "gemms": ["wgrad"], "reason": "gradient only"}],
    "recipe": {
        "name": "delayed",
        "class": "transformer_engine.common.recipe.DelayedScaling",
        "kwargs": {},
        "reason": "keep delayed",
    },
    "expected_cost": {
        "bf16_gemm_share": 0.0204,
        "gemm_slowdown_vs_all_fp8_pct": 1.41,
        "gemm_speedup_vs_all_bf16": 1.6665,
    },
    "confidence": 0.8,
}
RUN = {"id": 7, "name": "esm2-650m", "project": "esm2"}


HEALTHY = {
    "findings": [{"pattern": "healthy", "severity": "ok", "layers": [], "summary": "No pattern.", "evidence": []}],
    "layers": [],
    "notes": ["Single rank: rank consistency not checked."],
}


COMPARE = {
    "layers": [],
    "groups": [],
    "precision_changes": [],
    "findings_appeared": [{"pattern": "head_only", "severity": "severe", "layers": [HEAD], "summary": "head fails"}],
    "findings_disappeared": [],
    "unmatched": {},
    "notes": ["layers match by exact name"],
    "base": {"id": 8, "name": "healthy"},
    "head": {"id": 7, "name": None},
    "summary": ["head gradient underflow +4345% (mean 0.21% → 9.25%)"],
}


class FakeService:
    """Answers the routes the CLI uses; `runs[id]` are the run bodies (a list = statuses in turn)."""

    def __init__(self) -> None:
        self.runs: dict[int, list[dict]] = {7: [run_body(7)], 8: [run_body(8, name="healthy")]}
        self.analyses = {7: ANALYSIS, 8: HEALTHY}
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        parts = request.url.path.strip("/").split("/")  # api v1 runs 7 analysis
        if request.method == "POST" and parts == ["api", "v1", "runs"]:
            return httpx.Response(202, json=run_body(7, "queued"))
        if parts[:3] == ["api", "v1", "compare"]:
            return httpx.Response(200, json=COMPARE)
        run_id = int(parts[3])
        if run_id not in self.runs:
            return httpx.Response(404, json={"error": "NotFound", "detail": f"run {run_id} does not exist"})
        tail = parts[4] if len(parts) > 4 else None
        if tail is None:
            states = self.runs[run_id]
            return httpx.Response(200, json=states.pop(0) if len(states) > 1 else states[0])
        if tail == "analysis":
            return httpx.Response(200, json={"run_id": run_id, **self.analyses[run_id]})
        if tail == "heatmap.png":
            return httpx.Response(200, content=b"\x89PNG fake", headers={"content-type": "image/png"})
        fmt = request.url.params.get("format", "json")
        if fmt == "json":
            return httpx.Response(200, json={"run_id": run_id, **RECOMMENDATION, "rationale": ["[severe] head_only"]})
        return httpx.Response(200, text=f"# {fmt} policy of run {run_id}\n")

"""Hand a run's answer to the experiment tracker its training run lives in: MLflow or Weights & Biases.

Into the tracker's run: the verdict (worst severity, pattern, layers to BF16, recipe, speed-up, policy version),
the gate result (`fp8-policy gate`'s rule, client/gate.py, at `fail_on`), the rendered configs as kept with our
run (client/config_methods.py: the same bytes a later `fp8-policy configs --get` returns) and a link back to our
run page. Into our run: the link to the tracker's run (PATCH `training_run`). MLflow and W&B are optional extras
(`pip install 'fp8-policy[mlflow]'` / `[wandb]`), imported only here and only when asked for.

MLflow: `MlflowClient.set_tag` / `log_metric` / `log_text` / `log_dict` on an existing run (mlflow/tracking/client.py).
W&B: `wandb.init(id=..., resume="allow")` continues the run (wandb/sdk/wandb_init.py), `run.summary`, and a
`wandb.Artifact` of type `fp8-policy-config` with the files (wandb/sdk/artifacts/artifact.py `new_file`).
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fp8_policy.client import gate as gating
from fp8_policy.client.errors import PolicyError

if TYPE_CHECKING:
    from fp8_policy.client.client import PolicyClient

DEFAULT_FORMATS = ("json", "te-yaml", "megatron", "hydra", "torchao")
# TE debug-API files: one per pipeline stage when the job's stages name their blocks locally (the service answers
# 400 PipelineStageRequired without `pp_stage`; policy/render/pipeline.py `for_stage`)
STAGED = ("te-yaml", "te-monitor")
PREFIX = "fp8_policy"


class TrackerError(PolicyError):
    """The tracker's package is missing, its run is not there, or it refused what was logged."""


@dataclass(frozen=True, slots=True)
class HandOff:
    """What was logged: the tracker run's link (as stored with our run), the verdict and the kept configs."""

    link: dict[str, str]
    verdict: dict[str, Any]
    configs: list[dict[str, Any]]


def verdict_of(client: PolicyClient, run_id: int, fail_on: str = "critical") -> dict[str, Any]:
    """The run's verdict and gate result, flat (tracker tags and summaries are flat)."""
    run = client.run(run_id)
    analysis = client.analysis(run_id)
    rec = client.recommendation(run_id)
    result = gating.evaluate(run, analysis, rec, fail_on)
    findings = analysis.get("findings", [])
    worst = max((f.get("severity") for f in findings), key=gating.severity_rank, default="ok")
    # the answer's headline record: what the run page's cards, the runs list and every format show
    headline = rec.get("headline") or {}
    mix = headline.get("precision_mix") or {}
    return {
        "severity": worst or "ok",
        "pattern": findings[0].get("pattern") if findings else "healthy",
        "headline": headline.get("text"),
        "recipe": headline.get("recipe", (rec.get("recipe") or {}).get("name")),
        "precision_mix": " ".join(f"{n} {p}" for p, n in mix.items()) or None,
        "to_bf16": headline.get("to_bf16", len(rec.get("fp8_skip_layers") or [])),
        "gemm_speedup": headline.get("gemm_speedup_vs_all_bf16"),
        "policy_version": rec.get("policy_version"),
        "gate_passed": result.passed,
        "gate_fail_on": fail_on,
        "gate_failing_findings": len(result.failing),
        "gate": result.to_dict(),
    }


def hand_off(
    client: PolicyClient,
    run_id: int,
    *,
    mlflow_run_id: str | None = None,
    mlflow_tracking_uri: str | None = None,
    wandb_run: str | None = None,
    formats: tuple[str, ...] = DEFAULT_FORMATS,
    fail_on: str = "critical",
) -> HandOff:
    """Log the verdict, gate result and rendered configs of our run `run_id` into one tracker run (exactly one of
    `mlflow_run_id`, `wandb_run` = "ENTITY/PROJECT/RUN_ID") and store that run's link with ours."""
    if (mlflow_run_id is None) == (wandb_run is None):
        raise ValueError("give exactly one of mlflow_run_id and wandb_run")
    # the tracker's package first: without it nothing is kept with the run nor linked
    if mlflow_run_id is not None:
        _module("mlflow.tracking", "mlflow")
    else:
        _module("wandb", "wandb")
    verdict = verdict_of(client, run_id, fail_on)
    kept = keep_for_hand_off(client, run_id, formats)
    files = {f"v{item['version']}-{item['filename']}": client.config_content(run_id, item["id"]) for item in kept}
    our_page = f"{client.base_url}/#/runs/{run_id}"
    if mlflow_run_id is not None:
        link = _to_mlflow(mlflow_run_id, mlflow_tracking_uri, verdict, files, our_page)
    else:
        link = _to_wandb(str(wandb_run), verdict, files, our_page, run_id)
    client.update_run(run_id, training_run=link)
    return HandOff(link=link, verdict=verdict, configs=kept)


def keep_for_hand_off(client: PolicyClient, run_id: int, formats: tuple[str, ...]) -> list[dict[str, Any]]:
    """Keep `formats` with the run; a TE debug-API file of a job whose pipeline stages name their blocks locally is
    kept once per stage (`pp_stage=K`, its own file name), as each stage needs its own."""
    parallel = client.recommendation(run_id).get("parallel") or {}
    stages = int(parallel.get("pp") or 1) if parallel.get("naming") == "local" else 1
    staged = [fmt for fmt in formats if fmt in STAGED] if stages > 1 else []
    rest = [fmt for fmt in formats if fmt not in staged]
    kept = client.keep_configs(run_id, rest) if rest else []
    for stage in range(stages if staged else 0):
        kept += client.keep_configs(run_id, staged, pp_stage=stage)
    return kept


def _module(name: str, extra: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise TrackerError(
            f"{name} is not installed: pip install 'fp8-policy[{extra}]' ({exc})", error="TrackerMissing"
        ) from None


def _tags(verdict: dict[str, Any], our_page: str) -> dict[str, str]:
    flat = {key: value for key, value in verdict.items() if key != "gate" and value is not None}
    return {f"{PREFIX}.{key}": str(value) for key, value in flat.items()} | {f"{PREFIX}.run_url": our_page}


def _to_mlflow(
    run_ref: str, tracking_uri: str | None, verdict: dict[str, Any], files: dict[str, bytes], our_page: str
) -> dict[str, str]:
    tracking = _module("mlflow.tracking", "mlflow")
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    mlflow_client = tracking.MlflowClient(tracking_uri=uri)
    try:
        info = mlflow_client.get_run(run_ref).info
    except Exception as exc:  # MlflowException (RESOURCE_DOES_NOT_EXIST), or the server unreachable
        raise TrackerError(f"MLflow run {run_ref!r} at {uri or 'the default tracking URI'}: {exc}") from None
    for key, value in _tags(verdict, our_page).items():
        mlflow_client.set_tag(run_ref, key, value)
    if isinstance(verdict.get("gemm_speedup"), (int, float)):
        mlflow_client.log_metric(run_ref, f"{PREFIX}.gemm_speedup", float(verdict["gemm_speedup"]))
    mlflow_client.log_metric(run_ref, f"{PREFIX}.gate_passed", 1.0 if verdict["gate_passed"] else 0.0)
    mlflow_client.log_dict(run_ref, verdict["gate"], f"{PREFIX}/gate.json")
    for name, data in files.items():
        mlflow_client.log_text(run_ref, data.decode("utf-8"), f"{PREFIX}/{name}")
    link = {"kind": "mlflow", "ref": run_ref}
    if uri and uri.startswith(("http://", "https://")):  # the MLflow UI's run page (mlflow/server/js routes)
        link["url"] = f"{uri.rstrip('/')}/#/experiments/{info.experiment_id}/runs/{run_ref}"
    return link


def _to_wandb(
    path: str, verdict: dict[str, Any], files: dict[str, bytes], our_page: str, run_id: int
) -> dict[str, str]:
    parts = path.strip("/").split("/")
    if len(parts) != 3 or not all(parts):
        raise TrackerError(f"--wandb-run is ENTITY/PROJECT/RUN_ID, got {path!r}", error="InvalidTrackerRun")
    entity, project, run_ref = parts
    wandb = _module("wandb", "wandb")
    run = wandb.init(entity=entity, project=project, id=run_ref, resume="allow")
    try:
        run.summary.update(_tags(verdict, our_page))
        run.summary.update({f"{PREFIX}.gate": json.dumps(verdict["gate"])})
        artifact = wandb.Artifact(f"fp8-policy-run{run_id}", type="fp8-policy-config", metadata={"run_url": our_page})
        for name, data in files.items():
            with artifact.new_file(name, mode="wb") as handle:
                handle.write(data)
        run.log_artifact(artifact)
        url = run.url or f"https://wandb.ai/{entity}/{project}/runs/{run_ref}"  # None while offline
    finally:
        run.finish()
    return {"kind": "wandb", "ref": f"{entity}/{project}/{run_ref}", "url": url}

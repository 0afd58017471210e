"""The link from a run to its experiment-tracker run (`training_run` of PATCH /api/v1/runs/{id}): MLflow or W&B,
the tracker's id or path of the run, and a web address to open it. Checked here (400 InvalidParameter), stored by
db/run_edits.py, shown by the runs list and the run page."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from fp8_policy.service import limits
from fp8_policy.service.errors import InvalidParameter

KINDS = ("mlflow", "wandb")
MAX_REF_CHARS = 300
MAX_URL_CHARS = 2000


def check_training_run(value: Any) -> dict[str, str] | None:
    """`{"kind": "mlflow" | "wandb", "ref": "<run id or entity/project/run>", "url": "http(s)://..."}` as stored;
    None (null) removes the link."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"kind", "ref", "url"} or not {"kind", "ref"} <= set(value):
        raise InvalidParameter('training_run must be {"kind": "mlflow" | "wandb", "ref": "...", "url": "https://..."}')
    kind, ref, url = value.get("kind"), value.get("ref"), value.get("url")
    if kind not in KINDS:
        raise InvalidParameter(f"training_run.kind must be one of {', '.join(KINDS)}, got {str(kind)[:40]!r}")
    if not isinstance(ref, str) or not ref.strip():
        raise InvalidParameter("training_run.ref must be the tracker's run id (MLflow) or entity/project/run (W&B)")
    limits.check_text("training_run.ref", ref, MAX_REF_CHARS, error=InvalidParameter)
    link = {"kind": kind, "ref": ref.strip()}
    if url is not None:
        if not isinstance(url, str):
            raise InvalidParameter("training_run.url must be text")
        limits.check_text("training_run.url", url, MAX_URL_CHARS, error=InvalidParameter)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidParameter(f"training_run.url must be an http(s) address, got {url[:60]!r}")
        link["url"] = url
    return link

"""`PolicyClient`: one method per fp8-policy endpoint, over one HTTP session, plus `upload` and `wait`; the live-run
and alert endpoints' methods are in client/live_alert_methods.py, the kept configs' in client/config_methods.py
(base classes).

Belongs here: endpoint paths, request parameters, upload (directory packing, progress) and polling.
Results are the service's JSON as plain dicts/lists (rendered configs as str, files as Path).
Must not be here: httpx (see `_http.py`), printing (see `cli.py`), gate rules (see `gate.py`), and any import
of `service/`, `db/` or `policy/`: the client talks to the service over HTTP only.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from fp8_policy.client._http import DEFAULT_TIMEOUT, HttpSession, json_object, service_root
from fp8_policy.client.client_experiments import ExperimentCalls
from fp8_policy.client.config_methods import ConfigMethods
from fp8_policy.client.errors import ApiError, IngestFailed, NotFound, WaitTimeout
from fp8_policy.client.live_alert_methods import LiveAndAlertMethods
from fp8_policy.client.packing import ProgressReader, StderrBar, pack_directory, upload_fields

RUNS = "/api/v1/runs"
TOKEN_ENV = "FP8_POLICY_TOKEN"
# `te-monitor`: the debug YAML for watching a run the policy was applied to with apply_policy (see monitor_config)
# Seams for tests (monkeypatch these, not the time module).
_clock = time.monotonic
_sleep = time.sleep
MIN_RETRY_PAUSE = 0.2  # seconds between two tries at least, whatever Retry-After says
T = TypeVar("T")


class _Unset:
    """The type of UNSET: an argument left out (where None has a meaning of its own)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


def _retrying(call: Callable[[], T], deadline: float) -> T:
    """`call()`, made again after the pause a retryable ApiError (503 with Retry-After) asks for, until the
    `_clock()` reaches `deadline`; then that error is raised."""
    while True:
        try:
            return call()
        except ApiError as exc:
            remaining = deadline - _clock()
            if not exc.retryable or remaining <= 0:
                raise
            _sleep(min(max(exc.retry_after or 0.0, MIN_RETRY_PAUSE), remaining))


def backoff_delays(initial: float = 0.2, maximum: float = 2.0, factor: float = 2.0) -> Iterator[float]:
    """0.2, 0.4, 0.8, 1.6, 2.0, 2.0, ... seconds: the pauses between two polls of `wait`."""
    delay = initial
    while True:
        yield delay
        delay = min(maximum, delay * factor)


class PolicyClient(LiveAndAlertMethods, ConfigMethods, ExperimentCalls):
    """Client of one fp8-policy service; use as a context manager (it owns one HTTP connection pool).

    `token` is sent as `Authorization: Bearer <token>`; left out, FP8_POLICY_TOKEN is used when set.
    A missing or rejected token raises `Unauthorized` (401), a token without the scope `Forbidden` (403).
    `transport` is an `httpx` transport for tests (e.g. `httpx.MockTransport`).
    """

    def __init__(
        self, base_url: str, token: str | None = None, timeout: float = DEFAULT_TIMEOUT, *, transport: Any = None
    ) -> None:
        self.base_url = service_root(base_url)
        if token is None:
            token = os.environ.get(TOKEN_ENV) or None
        self._http = HttpSession(self.base_url, token=token, timeout=timeout, transport=transport)

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------------------------------------ runs
    def upload(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        project: str | None = None,
        tags: Sequence[str] | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        progress: bool | None = None,
        scalars: str | Path | None = None,
        retry_for: float = 0.0,
    ) -> dict[str, Any]:
        """Upload a log directory (packed to tar.gz on the fly, logs only) or one file as is; returns the run.

        A directory's training scalars go with it as `scalars.jsonl` (JSON lines {"step", "loss", "grad_norm",
        "lr", ...}): the file `scalars` names, else `path/scalars.jsonl` when present; the run page draws them.
        `progress=None` draws a bar on stderr only when stderr is a terminal. The run comes back `queued`
        (new) or in whatever state the existing run with the same bytes in the same project is.
        For `retry_for` seconds, a 503 with Retry-After (the service starting, or busy) is sent again after the
        pause it asks for (the directory packed again); 0 raises it at once.
        """
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist")
        if scalars is not None and not path.is_dir():
            raise ValueError("scalars go with a log directory (packed together); pack them into your archive")
        if scalars is not None and not Path(scalars).is_file():
            raise FileNotFoundError(f"{scalars} does not exist")
        fields = upload_fields(name, project, tags, metadata)
        return _retrying(lambda: self._upload_once(path, fields, progress, scalars), _clock() + retry_for)

    def _upload_once(
        self, path: Path, fields: dict[str, str], progress: bool | None, scalars: str | Path | None
    ) -> dict[str, Any]:
        if path.is_dir():
            body = pack_directory(path, Path(scalars) if scalars is not None else None)
            filename = f"{path.resolve().name or 'logs'}.tar.gz"
        else:
            body, filename = open(path, "rb"), path.name  # noqa: SIM115 - closed below
        show = sys.stderr.isatty() if progress is None else progress
        bar = StderrBar(f"upload {filename}") if show else None
        try:
            reader = ProgressReader(body, bar or (lambda _sent, _total: None))
            files = {"file": (filename, reader, "application/octet-stream")}
            return self._http.json_object("POST", RUNS, files=files, data=fields)
        finally:
            if bar:
                bar.close()
            body.close()

    def wait(
        self, run_id: int, timeout: float = 600.0, *, initial: float = 0.2, maximum: float = 2.0
    ) -> dict[str, Any]:
        """Poll the run with exponential backoff until `ready` (returned) or `failed` (IngestFailed).

        Raises WaitTimeout when it is still queued/processing after `timeout` seconds; a poll answered 503 with
        Retry-After (the service restarting, or busy) is made again after that pause, until the same timeout.
        """
        deadline = _clock() + timeout
        for delay in backoff_delays(initial, maximum):
            run = _retrying(lambda: self.run(run_id), deadline)
            if run["status"] == "ready":
                return run
            if run["status"] == "failed":
                raise IngestFailed(run)
            remaining = deadline - _clock()
            if remaining <= 0:
                raise WaitTimeout(run_id, run["status"], timeout)
            _sleep(min(delay, remaining))
        raise AssertionError("unreachable")  # backoff_delays never ends

    def run(self, run_id: int) -> dict[str, Any]:
        """Status and ingest figures of one run (with the per-file report)."""
        return self._http.json_object("GET", f"{RUNS}/{int(run_id)}")

    def runs(
        self,
        *,
        project: str | None = None,
        status: str | None = None,
        tag: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
        **facets: str | None,
    ) -> dict[str, Any]:
        """One page of runs, newest first: {"items": [...], "next_cursor": str | None}. `facets`: the metadata
        filters gpu=, recipe=, te_version=, git_commit= (the service answers 400 for any other or a bad value)."""
        params = {"project": project, "status": status, "tag": tag, "cursor": cursor, "limit": limit, **facets}
        return self._http.json_object("GET", RUNS, params=params)

    def iter_runs(self, **filters: Any) -> Iterator[dict[str, Any]]:
        """Every run matching the filters of `runs`, following `next_cursor` page by page."""
        cursor = None
        while True:
            page = self.runs(**filters, cursor=cursor)
            yield from page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def find_run(self, project: str, name: str) -> dict[str, Any]:
        """The newest run called `name` in `project` (runs are listed newest first); NotFound when none is."""
        for run in self.iter_runs(project=project):
            if run.get("name") == name:
                return run
        raise NotFound(404, "NotFound", f"no run named {name!r} in project {project!r}")

    def update_run(
        self,
        run_id: int,
        *,
        notes: str | None | _Unset = UNSET,
        tags: Sequence[str] | None = None,
        training_run: Mapping[str, str] | None | _Unset = UNSET,
    ) -> dict[str, Any]:
        """Edit a run's notes, tags and/or training-run link (an upload or admin token) and return the run as
        stored. `notes`: the new text, None (or blank) to clear, left out to keep; `tags`: the run's new tags
        (replacing the present ones; [] clears them), None to keep; `training_run`: {"kind": "mlflow" | "wandb",
        "ref", "url"}, None to remove. The service checks all before storing any (ApiError 400)."""
        body: dict[str, Any] = {}
        if not isinstance(training_run, _Unset):
            body["training_run"] = dict(training_run) if training_run is not None else None
        if not isinstance(notes, _Unset):
            body["notes"] = notes
        if tags is not None:
            if isinstance(tags, str):
                raise TypeError("tags is a sequence of tags, not one string")
            body["tags"] = list(tags)
        return self._http.json_object("PATCH", f"{RUNS}/{int(run_id)}", json=body)

    def delete(self, run_id: int) -> None:
        """Delete a run, its metrics and its stored archive."""
        self._http.request("DELETE", f"{RUNS}/{int(run_id)}")

    def layers(self, run_id: int, *, rank: int | None = None) -> list[dict[str, Any]]:
        """Per layer: name, group, index, precision, and per (tensor, stat) summaries."""
        return self._http.json_list("GET", f"{RUNS}/{int(run_id)}/layers", params={"rank": rank})

    def series(self, run_id: int, layer: str, tensor: str, stat: str, *, rank: int | None = None) -> dict[str, Any]:
        """Iterations and values of one metric, per rank (non-finite values as "NaN"/"Infinity")."""
        params = {"layer": layer, "tensor": tensor, "stat": stat, "rank": rank}
        return self._http.json_object("GET", f"{RUNS}/{int(run_id)}/series", params=params)

    def metrics_csv(self, run_id: int, path: str | Path, *, layout: str = "long", rank: int | None = None) -> Path:
        """Stream every point as CSV (`long` or `bionemo` layout) into `path`; returns the path."""
        self._http.download(f"{RUNS}/{int(run_id)}/metrics.csv", Path(path), params={"layout": layout, "rank": rank})
        return Path(path)

    # ------------------------------------------------------------------------------------------- analysis
    def analysis(self, run_id: int, **thresholds: float) -> dict[str, Any]:
        """Findings, the per-layer table, thresholds, stats and notes; thresholds may be overridden."""
        return self._http.json_object("GET", f"{RUNS}/{int(run_id)}/analysis", params=thresholds)

    @overload
    def recommendation(
        self,
        run_id: int,
        format: Literal["json"] = "json",
        *,
        overrides: Mapping[str, Any] | None = None,
        pp_stage: int | None = None,
        phase: int | None = None,
    ) -> dict[str, Any]: ...

    @overload
    def recommendation(
        self,
        run_id: int,
        format: str,
        *,
        overrides: Mapping[str, Any] | None = None,
        pp_stage: int | None = None,
        phase: int | None = None,
    ) -> dict[str, Any] | str: ...

    def recommendation(
        self,
        run_id: int,
        format: str = "json",
        *,  # noqa: A002 - the API's own name
        overrides: Mapping[str, Any] | None = None,
        pp_stage: int | None = None,
        phase: int | None = None,
    ) -> dict[str, Any] | str:
        """The recommended policy: a dict for `json`, the rendered file's text for the other formats.

        With `overrides` (thresholds, gpu_arch, model_dims, te_version, current_recipe, lr_decay_start) the service
        recomputes it (POST) without re-ingesting. `pp_stage`: pipeline stage K's te-yaml / te-monitor file, which
        a job whose stages name their blocks locally needs (the service answers 400 PipelineStageRequired without).
        `phase`: one phase of the JSON's `schedule`, rendered.
        """
        path, params = f"{RUNS}/{int(run_id)}/recommendation", {"format": format}
        if pp_stage is not None:
            params["pp_stage"] = str(int(pp_stage))
        if phase is not None:
            params["phase"] = str(int(phase))
        if overrides is None:
            response = self._http.request("GET", path, params=params)
        else:
            response = self._http.request("POST", path, params=params, json=dict(overrides))
        return json_object(response) if format == "json" else response.text

    def monitor_config(
        self,
        run_id: int,
        path: str | Path | None = None,
        *,
        overrides: Mapping[str, Any] | None = None,
        pp_stage: int | None = None,
    ) -> str:
        """The `te-monitor` TE debug YAML: watches a model whose policy was applied with `apply_policy` (no
        Disable* feature; layers kept in high precision get LogTensorStats only, since TE asserts when
        LogFp8TensorStats watches a layer that runs outside FP8). Written to `path` when given; the text returned.

            report = apply_policy(model, policy, backend="te")
            client.monitor_config(run_id, "te_monitor.yaml")
            debug_api.initialize(config_file="te_monitor.yaml", feature_dirs=[...], log_dir=...)
        """
        text = self.recommendation(run_id, "te-monitor", overrides=overrides, pp_stage=pp_stage)
        if not isinstance(text, str):  # a rendered format is always text
            raise TypeError("the te-monitor format came back as JSON")
        if path is not None:
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        return text

    def compare(self, base: int, head: int) -> dict[str, Any]:
        """How run `head` differs from run `base` (findings, layers, recommendation)."""
        return self._http.json_object("GET", "/api/v1/compare", params={"base": int(base), "head": int(head)})

    def compare_runs(self, run_ids: Sequence[int]) -> dict[str, Any]:
        """2-8 runs side by side (the first is the reference): each run's verdict and recommendation, the table
        rows where they differ, and every layer's precision per run (GET /api/v1/compare/runs)."""
        runs = ",".join(str(int(run_id)) for run_id in run_ids)
        return self._http.json_object("GET", "/api/v1/compare/runs", params={"runs": runs})

    def heatmap(self, run_id: int, path: str | Path, **params: Any) -> Path:
        """Save the run's per-layer heatmap PNG to `path`; returns the path."""
        self._http.download(f"{RUNS}/{int(run_id)}/heatmap.png", Path(path), params=params)
        return Path(path)

    def health(self) -> dict[str, Any]:
        """The service's /healthz answer (raises ApiError when the database is down)."""
        return self._http.json_object("GET", "/healthz")

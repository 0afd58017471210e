"""The kept-config endpoints' methods of `PolicyClient` (client/client.py), a base class it inherits: keep rendered
configs with a run (versioned, with the policy version and options of their recommendation), list them, fetch one
byte for byte. Same rules as client.py: endpoint paths and parameters only, the service's JSON as plain dicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fp8_policy.client._http import HttpSession

RUNS = "/api/v1/runs"


class ConfigMethods:
    """Needs `_http` (set by PolicyClient.__init__)."""

    _http: HttpSession

    def keep_configs(
        self,
        run_id: int,
        formats: Sequence[str],
        *,
        overrides: Mapping[str, Any] | None = None,
        pp_stage: int | None = None,
    ) -> list[dict[str, Any]]:
        """Render the run's recommendation in `formats` ("json", "te-yaml", "megatron", ...; with `overrides` as
        for `recommendation`) and keep the files with the run (an upload token); returns the kept configs, each
        with `version`, `policy_version`, `sha256`, `download` and `new` (false: that version was already kept)."""
        body = {"formats": list(formats), "overrides": dict(overrides or {})}
        answer = self._http.json_object(
            "POST", f"{RUNS}/{int(run_id)}/configs", params={"pp_stage": pp_stage}, json=body
        )
        items: list[dict[str, Any]] = answer["items"]
        return items

    def configs(self, run_id: int, *, format: str | None = None) -> list[dict[str, Any]]:
        """The configs kept with the run, newest first (without their content: `config_content` reads one)."""
        answer = self._http.json_object("GET", f"{RUNS}/{int(run_id)}/configs", params={"format": format})
        items: list[dict[str, Any]] = answer["items"]
        return items

    def config_content(self, run_id: int, config_id: int) -> bytes:
        """A kept config's file, byte for byte as it was handed out."""
        return self._http.request("GET", f"{RUNS}/{int(run_id)}/configs/{int(config_id)}").content

    def download_config(self, run_id: int, config_id: int, path: str | Path) -> Path:
        """Write a kept config's file to `path`; returns the path."""
        self._http.download(f"{RUNS}/{int(run_id)}/configs/{int(config_id)}", Path(path))
        return Path(path)

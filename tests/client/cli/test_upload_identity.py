"""Honest upload identity, through the CLI against the real service: known bytes under another name answer with
`duplicate_of` (printed by the CLI), an unnamed upload is named after its file the same way from the CLI and the
web form, and an upload that never held a log is not listed as a run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result

from fp8_policy.client.cli import cli
from tests.support.archives import ESM2, LLAMA3, TS, meta_relpath, metadata_log, tar_bytes
from tests.support.uvicorn_app import Live, sqlite_service


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with sqlite_service(tmp_path_factory.mktemp("identity")) as served:
        yield served


def fp8(live: Live, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--url", live.url])


def listed(live: Live, project: str) -> list[dict]:
    result = fp8(live, "runs", "--project", project, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["items"]


def test_known_bytes_under_another_name_answer_with_the_earlier_run_and_the_cli_says_so(live: Live) -> None:
    first = fp8(live, "upload", str(ESM2), "--name", "esm2-commit-a", "--project", "ci", "--wait", "--json")
    assert first.exit_code == 0, first.output
    run = json.loads(first.stdout)
    assert (run["status"], run["name"], run["duplicate_of"]) == ("ready", "esm2-commit-a", None)

    again = fp8(live, "upload", str(ESM2), "--name", "esm2-commit-b", "--project", "ci", "--wait", "--json")

    assert again.exit_code == 0, again.output
    answer = json.loads(again.stdout)
    assert answer["id"] == run["id"] and answer["name"] == "esm2-commit-a"
    assert answer["duplicate_of"] == {"id": run["id"], "name": "esm2-commit-a"}
    assert again.stderr == (
        f"note: these bytes were already uploaded to this project as run {run['id']} ('esm2-commit-a'): "
        "answering with that run; the name 'esm2-commit-b' was not applied\n"
    )
    assert [r["id"] for r in listed(live, "ci")] == [run["id"]]  # nothing stored twice


def test_the_plain_output_prints_the_note_on_stderr_and_the_run_on_stdout(live: Live) -> None:
    fp8(live, "upload", str(LLAMA3), "--project", "ci-plain", "--wait")

    again = fp8(live, "upload", str(LLAMA3), "--project", "ci-plain", "--name", "other")

    assert again.exit_code == 0
    assert again.stderr.startswith("note: these bytes were already uploaded to this project as run ")
    assert again.stdout.startswith("run ") and "dummy_logs_llama3" in again.stdout.splitlines()[0]


def test_an_unnamed_upload_is_named_after_its_file_from_the_cli_and_from_the_web_form(live: Live) -> None:
    from_cli = fp8(live, "upload", str(ESM2), "--project", "unnamed-cli", "--json")
    assert from_cli.exit_code == 0, from_cli.output
    packed = ESM2.name + ".tar.gz"  # what the CLI sends for a folder

    # the dashboard's form (service/web/static/upload.js) sends the file and no name when the field is empty
    archive = tar_bytes({"rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log": b"x"})
    from_web = httpx.post(
        f"{live.url}/api/v1/runs",
        files={"file": (packed, archive, "application/gzip")},
        data={"project": "unnamed-web"},
        headers={"Origin": live.url},
    )

    assert from_web.status_code == 202, from_web.text
    assert json.loads(from_cli.stdout)["name"] == from_web.json()["name"] == "dummy_logs_esm2"


def test_a_raw_body_without_a_file_name_stays_unnamed(live: Live) -> None:
    body = (ESM2 / "rank_0" / "nvdlfw_inspect_statistics_logs" / "nvdlfw_inspect_globalrank-0.log").read_bytes()
    answer = httpx.post(
        f"{live.url}/api/v1/runs", content=body, headers={"Content-Type": "text/plain"}, params={"project": "raw"}
    )

    assert answer.status_code == 202 and answer.json()["name"] is None


@pytest.mark.parametrize(
    ("filename", "data", "code"),
    [
        ("notes.txt", b"meeting notes, not a log\n", "NotAnArchive"),
        ("logs.tar", tar_bytes({meta_relpath(0): metadata_log({"model.layers.1.fc1": "FP8 Quantize"})}), "NoStatsFile"),
    ],
    ids=["text-file", "archive-without-statistics"],
)
def test_an_upload_that_never_held_a_log_fails_and_is_not_listed(
    live: Live, tmp_path: Path, filename: str, data: bytes, code: str
) -> None:
    project = f"garbage-{code}"
    path = tmp_path / filename
    path.write_bytes(data)

    failed = fp8(live, "upload", str(path), "--project", project, "--wait")

    match = re.search(rf"error: IngestFailed: run (\d+) failed: {code}: ", failed.stderr)
    assert failed.exit_code == 2 and match, failed.stderr  # the uploader is told why
    assert listed(live, project) == []
    assert int(match[1]) not in [r["id"] for r in httpx.get(f"{live.url}/api/v1/runs").json()["items"]]
    status = fp8(live, "status", match[1], "--json")  # still readable by id
    assert json.loads(status.stdout)["status"] == "failed"


def test_a_log_whose_lines_are_all_unusable_is_still_listed_as_a_failed_run(live: Live, tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text(f"{TS} - INFO - hello\n{TS} - INFO - world\n")

    failed = fp8(live, "upload", str(path), "--project", "held-a-log", "--wait")

    assert failed.exit_code == 2 and "NoStatsLines: " in failed.stderr
    assert [r["status"] for r in listed(live, "held-a-log")] == ["failed"]

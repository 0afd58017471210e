"""Issue 13's end-to-end check: the service, a webhook receiver and `fp8-policy watch` on a log tree a writer
extends while "training", with a planted gradient-underflow rise and a scale_inv collapse. The receiver gets both
alerts within seconds of the lines being written, and the finalized run equals the whole-file upload."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fp8_policy.client.client import PolicyClient
from fp8_policy.service.settings import Settings
from tests.client.test_live_upload import (
    Writer,
    free_port,
    same_as_whole_upload,
    serve,
    settings,
    wait_ready,
    watch_cli,
)
from tests.service.live.test_live_runs import LAYERS
from tests.support.webhook import webhook_receiver

pytestmark = pytest.mark.slow
__all__ = ["settings"]  # the fixture, shared with test_live_upload
INTERVAL = 0.5
MAX_ALERT_SECONDS = 10.0


def first_line_with(lines: list[bytes], needle: str) -> int:
    return next(k for k, line in enumerate(lines) if needle in line.decode())


def test_watch_alerts_on_a_planted_rise_and_scale_drop_and_finalizes_equal(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FP8_POLICY_WEBHOOK_ALLOW_PRIVATE", "1")  # the receiver listens on 127.0.0.1
    settings = Settings(_env_file=None, data_dir=settings.data_dir, database_url=settings.database_url)
    root = tmp_path / "logs"
    writer = Writer(root, 0)
    # the planted rise reaches 2 % at iteration 380; the level (median of the last 5 points) at 400
    crossing = first_line_with(writer.lines, f"{LAYERS[-1]}_gradient_underflows% \t\t\t\t iteration=000400")
    drop = first_line_with(writer.lines, f"{LAYERS[0]}_activation_scale_inv_min \t\t\t\t iteration=000400")
    written_at: dict[str, float] = {}
    with webhook_receiver() as receiver, serve(settings, free_port()) as url:
        with PolicyClient(url) as client:
            client.add_alert_rule(
                "e2e",
                receiver.url,
                format="json",
                min_severity="critical",
                events=["band_crossing", "scale_inv_drop"],
                cooldown_seconds=600,
            )
        proc = watch_cli(root, url, name="e2e", project="e2e", interval=INTERVAL, idle_finish=3)
        while not writer.done:
            before = writer.at
            writer.write(24)
            now = time.monotonic()
            for name, line in (("crossing", crossing), ("drop", drop)):
                if before <= line < writer.at:
                    written_at[name] = now
            time.sleep(0.05)
        calls = receiver.wait_for(2, timeout=60)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        run_id = json.loads(out)["id"]
        with PolicyClient(url) as client:
            run = wait_ready(client, run_id)
            same_as_whole_upload(client, run, root, "e2e")
            log = client.alert_log(run_id=run_id)

    received = {body["event"]["kind"]: (t, body["event"]) for t, _path, body in calls}
    assert set(received) == {"band_crossing", "scale_inv_drop"}
    crossing_event, drop_event = received["band_crossing"][1], received["scale_inv_drop"][1]
    assert crossing_event["layer"] == LAYERS[-1] and crossing_event["severity"] == "critical"
    assert crossing_event["iteration"] == 400
    assert drop_event["layer"] == LAYERS[0] and drop_event["iteration"] == 400
    assert received["band_crossing"][0] - written_at["crossing"] < MAX_ALERT_SECONDS
    assert received["scale_inv_drop"][0] - written_at["drop"] < MAX_ALERT_SECONDS
    assert sorted(e["status"] for e in log) == ["sent", "sent"]

"""A run the batch analysis finds nothing critical in raises no critical or severe live event: the live detectors read warm-up and noise as the batch
analysis does (policy/live/events.py, policy/live/scalar_events.py).

The runs are the CPU collector's delayed-scaling ones (`FP8StatsCollector(model, dir, recipe="delayed")` on a plain
model: what TE's delayed scaling would do, scale_inv exactly 1.0 until the first amax), streamed to the live API
in pieces cut mid-line with their training scalars (a small, noisy batch: 16 sequences) and finalized. A healthy
delayed-scaling live run used to raise a severe band_crossing at iteration 0 (underflows while the scale is still
1), a critical scale_inv_drop per series when the first scale was computed, and a critical grad-norm "spike".
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from examples.tiny_gpt import Setup, batches, corpus, fresh_model, loss_of
from fp8_policy.collect import FP8StatsCollector
from tests.conftest import wait_for_run
from tests.service.live.test_live_runs import LIVE, create, send_in_pieces

STEPS = 60


def collector_run(out: Path, *, batch: int, seed: int) -> None:
    """A tiny GPT trained STEPS AdamW steps with a warm-up then cosine learning rate, the collector in delayed
    scaling's what-if mode on every nn.Linear (freq 1), the scalars as a training loop writes them."""
    setup = replace(Setup(), batch=batch, steps=STEPS, logit_scale=1.0)
    torch.manual_seed(seed)
    model = fresh_model(setup)
    optimizer = torch.optim.AdamW(model.parameters(), lr=setup.lr)
    stream = batches(corpus()[0], setup, seed=seed)
    scalars = []
    with FP8StatsCollector(model, out, recipe="delayed", freq=1, amax_history_len=16) as collector:
        for step in range(STEPS):
            lr = setup.lr * min(1.0, (step + 1) / 10) * (0.5 + 0.5 * math.cos(math.pi * max(0, step - 10) / STEPS))
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = loss_of(model, next(stream))
            loss.backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            collector.step()
            scalars.append({"step": step, "loss": loss.item(), "grad_norm": grad_norm, "lr": lr})
    (out / "scalars.jsonl").write_text("".join(json.dumps(record) + "\n" for record in scalars))


@pytest.mark.parametrize("batch", [16, 4])
def test_a_healthy_delayed_scaling_run_raises_no_critical_live_event(
    client: TestClient, project: str, tmp_path: Path, batch: int
) -> None:
    collector_run(tmp_path, batch=batch, seed=batch)
    run = create(client, project, metadata={"recipe": "delayed"})
    events = []
    for path in sorted(p for p in tmp_path.rglob("*") if p.is_file()):
        relative = path.relative_to(tmp_path).as_posix()
        events += send_in_pieces(client, run["id"], relative, path.read_bytes(), pieces=7)
    assert client.post(f"{LIVE}/{run['id']}/finalize").status_code == 202
    assert wait_for_run(client, run["id"])["status"] == "ready"
    analysis = client.get(f"/api/v1/runs/{run['id']}/analysis").json()

    # the batch analysis: nothing critical (delayed scaling's weights overflow a little as AdamW grows them: the
    # `overflow` finding is a warning); the live detectors must not say more
    assert {f["severity"] for f in analysis["findings"]} <= {"ok", "warning"}, analysis["findings"]
    assert analysis["training_recipe"]["recipe"] == "delayed"
    loud = [(e["kind"], e["severity"], e["iteration"], e["message"]) for e in events if e["severity"] != "warning"]
    assert loud == []

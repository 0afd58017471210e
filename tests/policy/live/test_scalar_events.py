"""policy.live.scalar_events: grad-norm and loss spikes (robust z-score) and a loss plateau without grad-norm decrease."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fp8_policy.policy.live.scalar_events import ScalarState, advance, parse_lines


def records(loss, grad, start: int = 0) -> list[dict]:
    return [
        {"step": start + k, "loss": float(loss_value), "grad_norm": float(g)}
        for k, (loss_value, g) in enumerate(zip(loss, grad, strict=True))
    ]


def test_a_grad_norm_spike_fires_once() -> None:
    rng = np.random.default_rng(0)
    grad = 1.0 + rng.normal(0, 0.02, 40)
    grad[30] = grad[31] = 5.0
    loss = np.linspace(3.0, 2.0, 40)

    events = advance(ScalarState(), records(loss, grad))

    assert [(e.kind, e.tensor, e.iteration) for e in events] == [("scalar_spike", "grad_norm", 30)]
    assert events[0].detail["robust_z"] > 6


def test_noise_is_no_spike_and_a_falling_loss_no_plateau() -> None:
    rng = np.random.default_rng(1)
    loss = np.linspace(4.0, 2.0, 200) + rng.normal(0, 0.01, 200)
    grad = np.linspace(2.0, 1.0, 200) + rng.normal(0, 0.02, 200)

    assert advance(ScalarState(), records(loss, grad)) == []


def test_a_loss_plateau_while_grad_norm_grows() -> None:
    rng = np.random.default_rng(2)
    loss = np.concatenate([np.linspace(4.0, 2.5, 40), np.full(60, 2.5)]) + rng.normal(0, 0.002, 100)
    grad = np.concatenate([np.full(40, 1.0), np.linspace(1.0, 1.3, 60)]) + rng.normal(0, 0.03, 100)

    events = advance(ScalarState(), records(loss, grad))

    assert [e.kind for e in events] == ["loss_plateau"]
    assert events[0].severity == "warning" and events[0].detail["grad_change"] > 0


def test_state_survives_json_between_increments() -> None:
    grad = np.ones(40)
    grad[35] = 9.0
    state = ScalarState()
    events = advance(state, records(np.ones(20), grad[:20]))
    state = ScalarState.from_dict(json.loads(json.dumps(state.to_dict())))
    events += advance(state, records(np.ones(20), grad[20:], start=20))

    assert [(e.kind, e.iteration) for e in events] == [("scalar_spike", 35)]


def test_parse_lines_counts_what_it_cannot_read() -> None:
    text = b'{"step": 1, "loss": 2.0}\n\nnot json\n{"loss": 1}\n{"step": true}\n[1]\n{"step": -3}\n{"step": 2}\n'

    parsed, bad, negative = parse_lines(text)

    assert [r["step"] for r in parsed] == [1, 2] and bad == 4 and negative == 1


def decaying_loss(steps: np.ndarray, rng: np.random.Generator, noise: float = 0.03) -> np.ndarray:
    """A language-model loss curve: a power-law decay from ~11 towards 2 (≈3.7 at step 300), with multiplicative
    per-step noise of `noise` (batch-to-batch variation)."""
    clean = 2.0 + 9.0 * (1.0 + steps / 40.0) ** -0.8
    return clean * (1.0 + rng.normal(0.0, noise, len(steps)))


def grad_norm_curve(steps: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """High during the first steps, then a slow drift upwards (as grad norms do late in training), with noise."""
    clean = 0.6 + 4.0 * np.exp(-steps / 30.0) + 0.0004 * steps
    return clean * (1.0 + rng.normal(0.0, 0.05, len(steps)))


@pytest.mark.parametrize("every", [1, 10, 25])
def test_a_3x_loss_jump_on_a_decaying_curve_is_a_spike(every: int) -> None:
    """The jump 3.7 -> 11.7 at step 300: the trailing window of a decaying curve is wide (its median far above the
    current level), so a z-score against the window alone misses it; against the local trend it is obvious."""
    rng = np.random.default_rng(every)
    steps = np.arange(0, 1001, every)
    loss = decaying_loss(steps, rng)
    at = int(np.flatnonzero(steps == 300)[0])
    assert 3.3 < loss[at - 1] < 4.1
    loss[at] = 11.7
    grad = grad_norm_curve(steps, rng)

    events = advance(
        ScalarState(),
        [{"step": int(s), "loss": float(v), "grad_norm": float(g)} for s, v, g in zip(steps, loss, grad, strict=True)],
    )

    assert [(e.kind, e.tensor, e.iteration) for e in events] == [("scalar_spike", "loss", 300)]
    assert events[0].value == 11.7 and events[0].severity == "critical"


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("every", [1, 10])
def test_noisy_decaying_curves_raise_no_event(seed: int, every: int) -> None:
    rng = np.random.default_rng(100 + seed)
    steps = np.arange(0, 3000, every)
    loss = decaying_loss(steps, rng, noise=0.04)
    grad = grad_norm_curve(steps, rng)

    events = advance(
        ScalarState(),
        [{"step": int(s), "loss": float(v), "grad_norm": float(g)} for s, v, g in zip(steps, loss, grad, strict=True)],
    )

    assert [(e.kind, e.iteration, e.message) for e in events] == []


@pytest.mark.parametrize("seed", range(4))
def test_a_loss_that_stops_improving_on_a_noisy_curve_is_one_plateau(seed: int) -> None:
    """Decay until step 800, then flat (with the same noise) while grad_norm creeps up: one plateau, raised once
    the flat part is about half of the run, and not raised again by noise around the threshold."""
    rng = np.random.default_rng(7 + seed)
    steps = np.arange(0, 3000)
    loss = decaying_loss(np.minimum(steps, 800), rng, noise=0.03)
    grad = grad_norm_curve(steps, rng)

    events = advance(
        ScalarState(),
        [{"step": int(s), "loss": float(v), "grad_norm": float(g)} for s, v, g in zip(steps, loss, grad, strict=True)],
    )

    assert [e.kind for e in events] == ["loss_plateau"]
    assert 1350 <= events[0].iteration <= 1800 and events[0].detail["since_step"] >= 650


def test_a_nan_or_infinite_loss_raises_nonfinite_once_per_episode() -> None:
    """A diverged step (NaN, Infinity, -Infinity as Python's json writes them) is a severe `nonfinite` event for
    the series, raised again only after a finite value; the spike detector's window never sees it."""
    text = b"".join(
        json.dumps({"step": k, "loss": loss, "grad_norm": grad}).encode() + b"\n"
        for k, (loss, grad) in enumerate(
            [(2.0, 1.0)] * 10 + [(float("nan"), 1.0), (float("inf"), float("-inf")), (1.9, 1.0), (float("nan"), 1.0)]
        )
    )
    state = ScalarState()
    first = advance(state, parse_lines(text[: text.index(b'"step": 12')].rsplit(b"\n", 1)[0] + b"\n").records)
    resumed = ScalarState.from_dict(json.loads(json.dumps(state.to_dict())))  # stored between pieces
    rest = advance(resumed, parse_lines(text).records)

    assert [(e.kind, e.severity, e.tensor, e.iteration, e.value) for e in first] == [
        ("nonfinite", "severe", "loss", 10, None),
        ("nonfinite", "severe", "grad_norm", 11, None),
    ]
    assert first[0].message == "loss is nan at step 10" and first[1].detail == {"value_text": "-inf"}
    assert [(e.kind, e.tensor, e.iteration) for e in rest] == [("nonfinite", "loss", 13)]  # after a finite 1.9
    assert all(math.isfinite(v) for v in resumed.windows["loss"])


def test_a_nonfinite_loss_or_grad_norm_is_an_event_once_per_episode() -> None:
    loss = [3.0, 2.9, float("nan"), float("nan"), 2.8, float("inf")]
    grad = [1.0, 1.0, 1.0, float("inf"), 1.0, 1.0]

    events = advance(ScalarState(), records(loss, grad))

    assert [(e.kind, e.tensor, e.iteration, e.severity) for e in events] == [
        ("nonfinite", "loss", 2, "severe"),
        ("nonfinite", "grad_norm", 3, "severe"),
        ("nonfinite", "loss", 5, "severe"),
    ]
    assert events[0].detail["value_text"] == "nan"


def test_a_grad_norm_spike_is_a_warning_a_loss_spike_critical() -> None:
    rng = np.random.default_rng(4)
    grad = 1.0 + rng.normal(0, 0.02, 40)
    loss = np.linspace(3.0, 2.0, 40) + rng.normal(0, 0.005, 40)
    grad[20], loss[30] = 5.0, 9.0

    events = advance(ScalarState(), records(loss, grad))

    assert [(e.tensor, e.severity) for e in events] == [("grad_norm", "warning"), ("loss", "critical")]


def test_no_spike_while_the_learning_rate_warms_up() -> None:
    """The loss falls fast and jumps while lr still rises; once lr stops rising spikes count again."""
    rng = np.random.default_rng(5)
    loss = np.concatenate([np.linspace(10.0, 4.0, 30), np.linspace(4.0, 3.0, 30)]) + rng.normal(0, 0.01, 60)
    grad = 1.0 + rng.normal(0, 0.02, 60)
    loss[20], loss[45] = 30.0, 30.0
    rows = records(loss, grad)
    for k, row in enumerate(rows):
        row["lr"] = 3e-4 * min(1.0, (k + 1) / 30)

    events = advance(ScalarState(), rows)

    assert [(e.kind, e.iteration) for e in events] == [("scalar_spike", 45)]

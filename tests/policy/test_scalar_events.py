"""policy.scalar_events: grad-norm and loss spikes (robust z-score) and a loss plateau without grad-norm decrease."""

from __future__ import annotations

import json

import numpy as np

from fp8_policy.policy.scalar_events import ScalarState, advance, parse_lines


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
    text = b'{"step": 1, "loss": 2.0}\n\nnot json\n{"loss": 1}\n{"step": true}\n[1]\n{"step": 2}\n'

    parsed, bad = parse_lines(text)

    assert [r["step"] for r in parsed] == [1, 2] and bad == 4

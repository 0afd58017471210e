"""The closed loops' small model, data and training loop (shared by `closed_loop.py` and `closed_loop_nvfp4.py`).

Belongs here: the corpus (CPython's bundled documentation topics, `pydoc_data.topics`; nothing is downloaded), a
GPT-style character model with Megatron's layer names, the AdamW loop that trains it with an optional statistics
collector, and the loss-curve helpers. Must not be here: the service, policies, precisions or reports.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 128  # ASCII; a multiple of 16 as torchao's float8 GEMMs and NVFP4 blocks need


@dataclass(frozen=True)
class Setup:
    """Sizes of one closed-loop run (`--quick` shrinks them to fit the test suite)."""

    d_model: int = 64
    n_layers: int = 2
    seq: int = 32
    batch: int = 8
    steps: int = 100
    freq: int = 10
    lr: float = 3e-3
    logit_scale: float = 32.0
    eval_batches: int = 8


def corpus() -> tuple[torch.Tensor, torch.Tensor]:
    """CPython's bundled documentation topics as ASCII bytes: (train, held-out) token tensors, deterministic."""
    from pydoc_data.topics import topics

    text = "".join(topics[key] for key in sorted(topics)).encode("ascii", "replace")
    tokens = torch.tensor(list(text), dtype=torch.long)
    split = int(len(tokens) * 0.9)
    return tokens[:split], tokens[split:]


def batches(tokens: torch.Tensor, setup: Setup, seed: int) -> Iterator[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, len(tokens) - setup.seq - 1, (setup.batch,), generator=generator)
        yield torch.stack([tokens[i : i + setup.seq + 1] for i in starts.tolist()])


class Block(nn.Module):
    """Pre-norm attention + MLP with Megatron's sublayer names (`self_attention.linear_qkv`, `mlp.linear_fc1`...)."""

    def __init__(self, d: int, layer_number: int) -> None:
        super().__init__()
        self.layer_number = layer_number  # nvdlfw_inspect names blocks 1..n, like Megatron/TE
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attention = nn.ModuleDict({"linear_qkv": nn.Linear(d, 3 * d), "linear_proj": nn.Linear(d, d)})
        self.mlp = nn.ModuleDict({"linear_fc1": nn.Linear(d, 4 * d), "linear_fc2": nn.Linear(4 * d, d)})
        self.outlier_gain = 1.0  # the NVFP4 loop's planted trouble (`planted`); 1 = none

    def planted(self, h: torch.Tensor) -> torch.Tensor:
        """Outlier channels: every 16th channel of a normalised input times `outlier_gain` (LLM-style activation
        outliers). Each 16-element NVFP4 block then holds one value `outlier_gain` times its neighbours."""
        if self.outlier_gain == 1.0:
            return h
        gain = torch.ones(h.shape[-1], dtype=h.dtype)
        gain[::16] = self.outlier_gain
        return h * gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (
            y.view(b, t, 4, d // 4).transpose(1, 2)
            for y in self.self_attention["linear_qkv"](self.planted(self.ln1(x))).chunk(3, dim=-1)
        )
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.self_attention["linear_proj"](attention)
        return x + self.mlp["linear_fc2"](F.gelu(self.mlp["linear_fc1"](self.planted(self.ln2(x)))))


class TinyGPT(nn.Module):
    def __init__(self, setup: Setup) -> None:
        super().__init__()
        d = setup.d_model
        self.embedding = nn.Embedding(VOCAB, d)
        self.position = nn.Parameter(torch.zeros(setup.seq, d))
        self.decoder = nn.Module()
        self.decoder.layers = nn.ModuleList([Block(d, i + 1) for i in range(setup.n_layers)])
        self.decoder.final_norm = nn.LayerNorm(d)
        self.output_layer = nn.Linear(d, VOCAB, bias=False)
        self.logit_scale = setup.logit_scale  # the FP8 loop's planted cause (see closed_loop.py)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens) + self.position[: tokens.shape[1]]
        for block in self.decoder.layers:
            x = block(x)
        return self.output_layer(self.decoder.final_norm(x)) * self.logit_scale


def fresh_model(setup: Setup) -> TinyGPT:
    torch.manual_seed(0)  # every run starts from the same weights
    return TinyGPT(setup)


@dataclass
class Trained:
    losses: list[float]
    eval_loss: float
    seconds: float
    collector_ms_per_step: float | None = None


def loss_of(model: nn.Module, xy: torch.Tensor) -> torch.Tensor:
    logits = model(xy[:, :-1])
    return F.cross_entropy(logits.reshape(-1, VOCAB), xy[:, 1:].reshape(-1))


def train(
    model: nn.Module,
    setup: Setup,
    data: tuple[torch.Tensor, torch.Tensor],
    collector: Callable[[nn.Module], Any] | None = None,
) -> Trained:
    """`setup.steps` AdamW steps on the same batch sequence; `collector(model)` (started) is stepped each step."""
    train_tokens, held_out = data
    optimizer = torch.optim.AdamW(model.parameters(), lr=setup.lr, weight_decay=0.0)
    stream = batches(train_tokens, setup, seed=1)
    watching = collector(model) if collector is not None else None
    losses = []
    started = time.perf_counter()
    with watching if watching is not None else contextlib.nullcontext():
        for _ in range(setup.steps):
            loss = loss_of(model, next(stream))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if watching is not None:
                watching.step()
            losses.append(loss.item())
    seconds = time.perf_counter() - started
    with torch.no_grad():
        eval_stream = batches(held_out, setup, seed=2)
        eval_loss = sum(loss_of(model, next(eval_stream)).item() for _ in range(setup.eval_batches))
    overhead = watching.overhead.per_step_ms if watching is not None else None
    return Trained(losses, eval_loss / setup.eval_batches, seconds, overhead)


def curve(losses: list[float], points: int = 30) -> list[list[float]]:
    """[step, mean loss of the window ending there] at about `points` places."""
    window = max(1, len(losses) // points)
    return [
        [i + 1, round(sum(losses[i + 1 - window : i + 1]) / window, 4)] for i in range(window - 1, len(losses), window)
    ]


def final(losses: list[float], tail: int = 20) -> float:
    tail = min(tail, len(losses))
    return sum(losses[-tail:]) / tail

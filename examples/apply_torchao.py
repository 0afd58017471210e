"""Apply an fp8-policy recommendation with torchao float8 training; runs on CPU in a few seconds.

    python examples/apply_torchao.py [policy.json]

Without an argument it uses a sample policy for the toy model below (skip block 1's qkv and the LM head,
as names nvdlfw_inspect logged them). In a real job the policy comes from the service:

    with PolicyClient("http://fp8-policy:8000") as api:
        policy = api.recommendation(run_id)

Steps: build the model, `apply_policy(model, policy, backend="torchao", config=...)` BEFORE wrapping it in
FSDP/DDP or compiling it, check the report, train. On a GPU drop `emulate=True` (and pick the config that
suits your hardware); on CPU torchao can only emulate float8.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torchao.float8 import Float8LinearConfig

from fp8_policy import UnmatchedLayers, apply_policy  # pip install 'fp8-policy[torch]'

D_MODEL, VOCAB, SEQ = 64, 128, 16

SAMPLE_POLICY = {
    "fp8_skip_layers": ["model.layers.1.self_attention.qkv", "model.lm_head"],
    "gemm_overrides": [],
    "recipe": {
        "name": "current",
        "class": "transformer_engine.common.recipe.Float8CurrentScaling",
        "kwargs": {"fp8_format": "HYBRID"},
        "reason": "sample",
    },
}


class Block(nn.Module):
    """Attention (`self_attention.qkv/proj`) + MLP (`mlp.fc1/fc2`), named like TE layers."""

    def __init__(self, layer_number: int) -> None:
        super().__init__()
        self.layer_number = layer_number  # TE/Megatron layers carry it: nvdlfw names blocks 1..n
        self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.self_attention = nn.ModuleDict(
            {"qkv": nn.Linear(D_MODEL, 3 * D_MODEL), "proj": nn.Linear(D_MODEL, D_MODEL)}
        )
        self.mlp = nn.ModuleDict({"fc1": nn.Linear(D_MODEL, 4 * D_MODEL), "fc2": nn.Linear(4 * D_MODEL, D_MODEL)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (
            y.view(b, t, 4, d // 4).transpose(1, 2) for y in self.self_attention["qkv"](self.ln1(x)).chunk(3, dim=-1)
        )
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.self_attention["proj"](attn)
        return x + self.mlp["fc2"](F.gelu(self.mlp["fc1"](self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, n_layers: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.layers = nn.ModuleList(Block(i + 1) for i in range(n_layers))
        self.norm = nn.LayerNorm(D_MODEL)
        self.lm_head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.layers:
            x = block(x)
        return self.lm_head(self.norm(x))


def train(model: nn.Module, steps: int = 5) -> list[float]:
    """A few next-token steps on a fixed random batch (the loss must fall)."""
    data = torch.randint(0, VOCAB, (4, SEQ + 1), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        logits = model(data[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), data[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def main(argv: list[str]) -> int:
    policy = json.loads(Path(argv[0]).read_text()) if argv else SAMPLE_POLICY
    config = Float8LinearConfig(emulate=True)  # CPU: emulated float8 matmuls

    # The failure users report most: a head named `output` in the filter while the model calls it `lm_head`.
    try:
        apply_policy(TinyLM(), {"fp8_skip_layers": ["model.output"]}, backend="torchao", config=config)
    except UnmatchedLayers as exc:
        print(f"caught, as it should be:\n{exc}\n")

    torch.manual_seed(0)
    model = TinyLM()
    report = apply_policy(model, policy, backend="torchao", config=config)
    print(report.summary())
    losses = train(model)
    print("loss per step:", ", ".join(f"{x:.4f}" for x in losses))
    return 0 if report.ok and losses[-1] < losses[0] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

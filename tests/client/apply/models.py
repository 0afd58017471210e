"""Small CPU models for the apply tests: a TE-shaped toy transformer, wrappers, a fake fused LayerNormMLP, and the
policy the backend tests apply to the toy transformer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

D_MODEL, VOCAB, HEADS = 32, 64, 2  # every Linear dim a multiple of 16 (torchao's float8 requirement)

# The policy the backend tests apply to ToyTransformer: logged block 1's qkv (module index 0) and the head stay in
# high precision, the rest runs Float8CurrentScaling.
SKIPS = ["model.layers.1.self_attention.qkv", "model.lm_head"]
POLICY = {
    "fp8_skip_layers": SKIPS,
    "gemm_overrides": [],
    "recipe": {
        "name": "current",
        "class": "transformer_engine.common.recipe.Float8CurrentScaling",
        "kwargs": {"fp8_format": "HYBRID"},
        "reason": "test",
    },
}


class Attention(nn.Module):
    """Self-attention with TE-like attribute names (`qkv`, `proj`)."""

    def __init__(self, d: int = D_MODEL) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (y.view(b, t, HEADS, d // HEADS).transpose(1, 2) for y in self.qkv(x).chunk(3, dim=-1))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d: int = D_MODEL) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """A transformer block; `layer_number` (1-based) mimics TE/Megatron TransformerLayer."""

    def __init__(self, layer_number: int | None) -> None:
        super().__init__()
        if layer_number is not None:
            self.layer_number = layer_number
        self.ln1 = nn.LayerNorm(D_MODEL)
        self.self_attention = Attention()
        self.ln2 = nn.LayerNorm(D_MODEL)
        self.mlp = MLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ToyTransformer(nn.Module):
    """Embedding, `layers` (ModuleList of Blocks, layer_number 1..n unless numbered=False), norm, `lm_head`."""

    def __init__(self, n_layers: int = 4, numbered: bool = True, head_name: str = "lm_head") -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.layers = nn.ModuleList(Block(i + 1 if numbered else None) for i in range(n_layers))
        self.final_norm = nn.LayerNorm(D_MODEL)
        self.head_name = head_name
        setattr(self, head_name, nn.Linear(D_MODEL, VOCAB))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.layers:
            x = block(x)
        return getattr(self, self.head_name)(self.final_norm(x))


class Wrapper(nn.Module):
    """Stands in for DDP / Megatron Float16Module: the model lives at `.module`."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


class LayerNormMLP(nn.Module):
    """Fake of TE's fused LayerNormMLP: one module, parameters fc1_weight/fc2_weight, no fc1/fc2 children."""

    def __init__(self, d: int = D_MODEL) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(d)
        self.fc1_weight = nn.Parameter(torch.randn(4 * d, d) * 0.02)
        self.fc2_weight = nn.Parameter(torch.randn(d, 4 * d) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.layer_norm(x) @ self.fc1_weight.t()) @ self.fc2_weight.t()


class FusedBlock(nn.Module):
    def __init__(self, layer_number: int) -> None:
        super().__init__()
        self.layer_number = layer_number
        self.layernorm_mlp = LayerNormMLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.layernorm_mlp(x)


class FusedModel(nn.Module):
    def __init__(self, n_layers: int = 2) -> None:
        super().__init__()
        self.layers = nn.ModuleList(FusedBlock(i + 1) for i in range(n_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.layers:
            x = block(x)
        return x


def tokens(batch: int = 2, seq: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))

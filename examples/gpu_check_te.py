"""Transformer Engine helpers the verification kit's checks share (examples/gpu_check.py, gpu_check_loop.py).

Belongs here: the TE debug features folder, an autocast that works on TE 2.8 and later, and the small TE GPT the
checks train. Needs CUDA and Transformer Engine; imported only once examples/gpu_check.py found both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def te_features_dir() -> str:
    import transformer_engine

    return str(Path(transformer_engine.__file__).parent / "debug" / "features")


def autocast(enabled: bool, recipe: Any) -> Any:
    import transformer_engine.pytorch as te

    if hasattr(te, "autocast"):
        return te.autocast(enabled=enabled, recipe=recipe)
    return te.fp8_autocast(enabled=enabled, fp8_recipe=recipe)


def tiny_te_gpt(d: int = 256, layers: int = 4, vocab: int = 128, logit_scale: float = 1.0) -> torch.nn.Module:
    """Embedding, te.TransformerLayer numbered 1..n (names as nvdlfw logs them), te.Linear head."""
    import transformer_engine.pytorch as te

    class GPT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, d, device="cuda", dtype=torch.bfloat16)
            self.layers = torch.nn.ModuleList(
                te.TransformerLayer(
                    d,
                    4 * d,
                    d // 64,
                    layer_number=i + 1,
                    params_dtype=torch.bfloat16,
                    hidden_dropout=0.0,
                    attention_dropout=0.0,
                    self_attn_mask_type="causal",
                    device="cuda",
                )
                for i in range(layers)
            )
            self.lm_head = te.Linear(d, vocab, params_dtype=torch.bfloat16, device="cuda")

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.embed(tokens).transpose(0, 1)  # TE's default attn_input_format is "sbhd"
            for layer in self.layers:
                x = layer(x)
            return (self.lm_head(x) * logit_scale).transpose(0, 1)

    return GPT()

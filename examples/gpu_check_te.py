"""Transformer Engine helpers the verification kit's checks share (examples/gpu_check*.py).

Belongs here: the TE debug features folder, an autocast that works on TE 2.8 and later, the parity model (one
te.Linear per parity tensor), the small TE GPT the checks train, its GEMM modules, and the forward-hook capture
the precision checks re-run modules from (`capture_calls`, `rerun`). Needs CUDA and Transformer Engine; imported
only once examples/gpu_check.py found both.
"""

from __future__ import annotations

from collections.abc import Callable
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


def parity_te_model(tensors: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> torch.nn.Module:
    """One bias-free FP32 te.Linear on CUDA per parity tensor (examples/gpu_check_data.py `parity_tensors`: name ->
    (input, weight, output gradient)), holding that weight, named by nvdlfw_inspect (`model.<name>`): call it
    inside a debug session (after `debug_api.initialize`)."""
    import nvdlfw_inspect.api as debug_api
    import transformer_engine.pytorch as te

    model = torch.nn.Module()
    for name, (_x0, w, _) in tensors.items():
        layer = te.Linear(w.shape[1], w.shape[0], bias=False, params_dtype=torch.float32, device="cuda")
        with torch.no_grad():
            layer.weight.copy_(w.cuda())
        setattr(model, name, layer)
    debug_api.infer_and_assign_layer_names(model)
    return model


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


def gemm_modules(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """named_modules() path -> every TE GEMM module (te.Linear, te.LayerNormLinear, te.LayerNormMLP)."""
    import transformer_engine.pytorch as te

    kinds = (te.Linear, te.LayerNormLinear, te.LayerNormMLP)
    return {path: m for path, m in model.named_modules() if isinstance(m, kinds)}


def first(out: Any) -> torch.Tensor:
    """A module's output tensor (TE modules may return (output, bias))."""
    return out[0] if isinstance(out, (tuple, list)) else out


def capture_calls(modules: dict[str, torch.nn.Module], run: Callable[[], Any]) -> dict[str, tuple[Any, ...]]:
    """path -> (args, kwargs, output) of each module's first call while `run()` runs (forward hooks)."""
    seen: dict[str, tuple[Any, ...]] = {}
    hooks = [
        m.register_forward_hook(lambda mod, a, kw, out, f=f: seen.setdefault(f, (a, kw, out)), with_kwargs=True)
        for f, m in modules.items()
    ]
    try:
        run()
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def rerun(module: torch.nn.Module, call: tuple[Any, ...]) -> torch.Tensor:
    """The module's output on a captured call's inputs, outside any autocast (BF16 unless wrapped)."""
    args, kwargs, _ = call
    with torch.no_grad():
        return first(module(*args, **kwargs))

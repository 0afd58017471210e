"""Step 5 of the verification kit (examples/gpu_check.py): the `te-recipe` format run by Transformer Engine itself.

A decision over the kit's small TE GPT (examples/gpu_check_te.py `tiny_te_gpt`, names as nvdlfw_inspect logs them:
1-based `layer_number`) with a mix of rungs: two layers BF16 (a LayerNormLinear and the te.Linear head), FP8
current scaling as the outer recipe, one layer's fprop FP8 with dgrad/wgrad BF16 and another's the reverse (each a
HybridQuantizer), and block 3's LayerNormMLP at MXFP8 where TE says MXFP8 runs here (Blackwell), else at FP8 block
scaling where that runs (Hopper), else left at the outer recipe. It is rendered by the project's renderer
(`fp8_policy.policy.render.render(decision, "te-recipe")`), written to the out folder, imported, the model named
with its `assign_names`, and trained two steps under `te.autocast(recipe=CustomRecipe(qfactory=module.qfactory))`.

Checks: the module imports and names every GEMM module by its path; the loss is finite; the quantizers TE built
for each GEMM (read back from each module's `quantizers`, paired with the module's own `get_quantizer_roles`) are
the planned (fprop, dgrad, wgrad) formats; a module whose forward GEMMs are all planned BF16 gives an output
bit-identical to the same module run outside autocast on the same input, every other one a different output.

Belongs here: the step's decision, its expected per-GEMM formats (written out from the decision's own terms, not
computed by the renderer: tests/client/test_gpu_check.py checks them against the rendered module through the
project's stand-in loader, bench/te_recipe_loader.py), and the check. Imports TE only inside `check_te_recipe`.

TE facts, transformer_engine 2.20: common/recipe/__init__.py `CustomRecipe(qfactory=...)`; pytorch/quantization.py
`autocast`, `is_mxfp8_available` / `is_fp8_block_scaling_available` / `is_fp8_available` (re-exported by
transformer_engine.pytorch), `CustomRecipeState.make_quantizers` (one `qfactory(role)` per slot);
pytorch/module/base.py `TransformerEngineBaseModule.set_meta_tensor` (stores the built quantizers in
`self.quantizers["scaling_fwd" | "scaling_bwd"]`, in the order of `get_quantizer_roles(fwd=, num_quantizers=)`);
pytorch/module/linear.py, layernorm_linear.py, layernorm_mlp.py `get_quantizer_roles` (LayerNormMLP's roles are
named `<name>.fc1` / `<name>.fc2`); pytorch/tensor/hybrid_tensor.py `HybridQuantizer.rowwise_quantizer` /
`columnwise_quantizer`; pytorch/tensor/identity_tensor.py `IdentityQuantizer` (a GEMM consumes it in the held
dtype).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import torch

from fp8_policy.policy.names import layer_structure
from fp8_policy.policy.records import (
    GEMMS,
    RECIPE_CLASSES,
    GemmOverride,
    LayerInfo,
    LayerPrecision,
    PolicyDecision,
    Precision,
    RecipeChoice,
)

Row = tuple[str, bool, str]  # (check, passed, detail)
Mix = tuple[str, str, str]  # (fprop, dgrad, wgrad) format

BLOCKS = 4  # tiny_te_gpt's default
SUBLAYERS = ("self_attention.layernorm_qkv", "self_attention.proj", "layernorm_mlp.fc1", "layernorm_mlp.fc2")
HEAD = "model.lm_head"
OUTER = "current"  # FP8 per-tensor current scaling: runs on Hopper and Blackwell
BF16_LAYERS = ("model.layers.2.self_attention.layernorm_qkv", HEAD)
# layer -> its GEMMs kept in BF16: fprop FP8 with dgrad/wgrad BF16, and fprop BF16 with dgrad/wgrad FP8
OVERRIDES: dict[str, tuple[str, ...]] = {
    "model.layers.1.self_attention.proj": ("dgrad", "wgrad"),
    "model.layers.4.self_attention.proj": ("fprop",),
}
RUNG_LAYERS = ("model.layers.3.layernorm_mlp.fc1", "model.layers.3.layernorm_mlp.fc2")  # at `extra_rung`
STEPS = 2
# TE quantizer class -> the rung it is (pytorch/tensor/*.py)
KINDS = {
    "IdentityQuantizer": "bf16",
    "Float8CurrentScalingQuantizer": "current",
    "Float8Quantizer": "delayed",
    "Float8BlockQuantizer": "block",
    "MXFP8Quantizer": "mxfp8",
    "NVFP4Quantizer": "nvfp4",
}


def logged_names(blocks: int = BLOCKS) -> tuple[str, ...]:
    """tiny_te_gpt's GEMM layers as nvdlfw_inspect logs them (blocks by their 1-based `layer_number`)."""
    body = tuple(f"model.layers.{i}.{sub}" for i in range(1, blocks + 1) for sub in SUBLAYERS)
    return (*body, HEAD)


def role_name(logged: str) -> str:
    """The `QuantizerRole.name` TE gives that layer's GEMM once `assign_names` named the modules by their
    named_modules() path: `layers.<i-1>.<sublayer>` (a LayerNormMLP's `<path>.fc1` / `.fc2`), `lm_head`."""
    parts = logged.split(".")[1:]  # nvdlfw's `model.` root
    if parts[0] == "layers":
        parts[1] = str(int(parts[1]) - 1)
    return ".".join(parts)


def extra_rung(mxfp8: bool, block: bool) -> str | None:
    """The rung block 3's LayerNormMLP gets: MXFP8 where it runs, else FP8 block scaling, else none."""
    return "mxfp8" if mxfp8 else "block" if block else None


def build_decision(extra: str | None) -> PolicyDecision:
    """The step's decision (module docstring), over every layer of tiny_te_gpt."""
    layers = tuple(LayerInfo(n, layer_structure(n), Precision.FP8, True) for n in logged_names())
    overrides = tuple(GemmOverride(layer, gemms, "gpu-check: a per-GEMM mix") for layer, gemms in OVERRIDES.items())
    rungs = tuple(LayerPrecision(n, extra, ("gpu-check: another rung",), 1.0) for n in RUNG_LAYERS if extra)
    recipe = RecipeChoice(OUTER, RECIPE_CLASSES[OUTER], {"fp8_format": "HYBRID"}, "gpu-check")
    return PolicyDecision(
        skip_layers=BF16_LAYERS,
        gemm_overrides=overrides,
        recipe=recipe,
        layers=layers,
        layer_precisions=rungs,
    )


def expected(extra: str | None) -> dict[str, Mix]:
    """Logged layer -> the (fprop, dgrad, wgrad) formats TE must run it at."""
    out: dict[str, Mix] = {}
    for name in logged_names():
        rung = extra if extra and name in RUNG_LAYERS else OUTER
        kept = GEMMS if name in BF16_LAYERS else OVERRIDES.get(name, ())
        fprop, dgrad, wgrad = ("bf16" if gemm in kept else rung for gemm in GEMMS)
        out[name] = (fprop, dgrad, wgrad)
    return out


def _directions(quantizer: Any) -> tuple[str, str]:
    """(rowwise, columnwise) rung of one built quantizer."""
    if type(quantizer).__name__ == "HybridQuantizer":
        row, col = quantizer.rowwise_quantizer, quantizer.columnwise_quantizer
        return KINDS.get(type(row).__name__, type(row).__name__), KINDS.get(type(col).__name__, type(col).__name__)
    kind = KINDS.get(type(quantizer).__name__, type(quantizer).__name__)
    return kind, kind


def built_mixes(modules: dict[str, torch.nn.Module]) -> dict[str, Mix | str]:
    """Role name -> the (fprop, dgrad, wgrad) formats of the quantizers TE built for it (a sentence when the two
    operands of a GEMM disagree), read from each module's `quantizers` and `get_quantizer_roles`."""
    slots: dict[str, dict[str, set[tuple[str, str]]]] = {}
    for module in modules.values():
        for fwd, key in ((True, "scaling_fwd"), (False, "scaling_bwd")):
            quantizers = list(getattr(module, "quantizers", {}).get(key) or [])
            get_roles = getattr(module, "get_quantizer_roles")  # noqa: B009 (a TE method torch types do not know)
            roles = get_roles(fwd=fwd, num_quantizers=len(quantizers)) if quantizers else None
            for role, quantizer in zip(roles or [], quantizers, strict=True):
                if role is None or role.module_type != "linear" or quantizer is None:
                    continue
                if role.tensor_type in ("input", "weight", "grad_output"):
                    slots.setdefault(role.name, {}).setdefault(role.tensor_type, set()).add(_directions(quantizer))
    out: dict[str, Mix | str] = {}
    for name, tensors in slots.items():
        if set(tensors) != {"input", "weight", "grad_output"}:
            out[name] = f"slots built: {sorted(tensors)}"
            continue
        row = {t: {d[0] for d in tensors[t]} for t in tensors}
        col = {t: {d[1] for d in tensors[t]} for t in tensors}
        gemms = (
            row["input"] | row["weight"],  # fprop = weight.rowwise x input.rowwise
            col["weight"] | row["grad_output"],  # dgrad = weight.columnwise x grad_output.rowwise
            col["input"] | col["grad_output"],  # wgrad = input.columnwise x grad_output.columnwise
        )
        if all(len(g) == 1 for g in gemms):
            fprop, dgrad, wgrad = (next(iter(g)) for g in gemms)
            out[name] = (fprop, dgrad, wgrad)
        else:
            out[name] = f"operands disagree: fprop {gemms[0]}, dgrad {gemms[1]}, wgrad {gemms[2]}"
    return out


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("fp8_policy_recipe_gpu_check", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_te_recipe(work: Path) -> list[Row]:
    import transformer_engine.pytorch as te
    from transformer_engine.common.recipe import CustomRecipe

    from examples.gpu_check_te import autocast, capture_calls, first, gemm_modules, rerun, tiny_te_gpt
    from fp8_policy.policy.render import render

    if not hasattr(te, "HybridQuantizer"):
        return [("te-recipe: TE has HybridQuantizer", False, "needs TE >= 2.19; nothing of te-recipe was run")]
    fp8, reason = te.is_fp8_available(return_reason=True)
    if not fp8:
        return [("te-recipe: FP8 runs here", False, f"TE says: {reason}; nothing of te-recipe was run")]
    extra = extra_rung(te.is_mxfp8_available(), te.is_fp8_block_scaling_available())
    decision = build_decision(extra)
    want = expected(extra)
    work.mkdir(parents=True, exist_ok=True)
    rendered = render(decision, "te-recipe")
    path = work / rendered.filename
    path.write_text(rendered.content)
    recipe_module = _load(path)

    torch.manual_seed(0)
    model = tiny_te_gpt(layers=BLOCKS)
    recipe_module.assign_names(model)
    modules = gemm_modules(model)
    unnamed = [p for p, m in modules.items() if getattr(m, "name", None) != p]
    where = f"sm_{''.join(map(str, torch.cuda.get_device_capability()))}, extra rung {extra or 'none'}"
    rows: list[Row] = [
        (
            "te-recipe: module imports, assign_names names GEMM modules by path",
            not unnamed,
            f"{path.name} ({where}); {len(modules)} GEMM modules"
            + (f"; not by path: {[(p, getattr(modules[p], 'name', None)) for p in unnamed[:3]]}" if unnamed else ""),
        )
    ]

    recipe = CustomRecipe(qfactory=recipe_module.qfactory)
    tokens = torch.randint(0, 128, (8, 65), device="cuda")  # 8 x 64 inputs: MXFP8 wants multiples of 32
    losses = []
    for _ in range(STEPS):
        with autocast(True, recipe):
            logits = model(tokens[:, :-1])
        targets = tokens[:, 1:].reshape(-1)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets)
        loss.backward()
        losses.append(float(loss))
    rows.append((f"te-recipe: {STEPS} steps, loss finite", all(map(math.isfinite, losses)), f"losses {losses}"))

    built = built_mixes(modules)
    for name, mix in want.items():
        got = built.get(role_name(name), "no quantizers built")
        rows.append((f"te-recipe built {name}", got == mix, f"TE {got}, planned {mix} (fprop, dgrad, wgrad)"))

    def forward() -> None:
        with torch.no_grad(), autocast(True, recipe):
            model(tokens[:, :-1])

    calls = capture_calls(modules, forward)
    for path_, module in modules.items():
        fprops = {mix[0] for name, mix in want.items() if role_name(name) in (path_, f"{path_}.fc1", f"{path_}.fc2")}
        same = torch.equal(first(calls[path_][2]), rerun(module, calls[path_]))
        if fprops == {"bf16"}:
            rows.append((f"te-recipe bf16 fprop {path_}", same, "bit-identical to BF16" if same else "differs"))
        else:
            detail = "differs from BF16 (quantized)" if not same else "identical to BF16: not quantized"
            rows.append((f"te-recipe {'/'.join(sorted(fprops))} fprop {path_}", not same, detail))
    return rows

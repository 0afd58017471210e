"""The `te-recipe` format: a Python module with a module-level `qfactory(role)` for TE's `CustomRecipe`, giving every
(layer, GEMM) of a decision its precision without the debug API.

Belongs here: the per-(layer, GEMM) plan of a decision (`gemm_plan`), the per-mix factory names Megatron's precision
config points at (`mix_factory_name`), `applied`, and the module text. Must not be here: Megatron's YAML (megatron.py
uses `mixes` / `mix_factory_name` for its `custom_recipe_factory` matchers), other dialects.

TE facts (transformer_engine 2.20: pytorch/quantization.py `QuantizerRole`, pytorch/tensor/hybrid_tensor.py,
pytorch/custom_recipes/quantizer_factories.py, common/recipe/__init__.py `CustomRecipe`; HybridQuantizer since
TE 2.19, #2817):
* TE calls `qfactory(role)` once per quantizer slot; `role.module_type` is "linear" / "grouped_linear" / "dpa",
  `role.tensor_type` "input" / "weight" / "grad_output", `role.name` the TE module's `name` ("" when the framework
  gave none); boundary slots (output, grad_input) get `None`.
* Operands: fprop = weight.rowwise x input.rowwise, dgrad = weight.columnwise x grad_output.rowwise, wgrad =
  input.columnwise x grad_output.columnwise. So input = Hybrid(row=fprop, col=wgrad), weight = Hybrid(row=fprop,
  col=dgrad), grad_output = Hybrid(row=dgrad, col=wgrad): any (layer, GEMM) can be NVFP4, MXFP8, FP8 or BF16
  (`IdentityQuantizer`), both operands of one GEMM always in the same format. A slot whose two directions agree
  gets a plain quantizer; a HybridQuantizer takes two distinct quantizer instances.
* A TE GroupedLinear gives all its expert GEMMs one role (its module name): experts share their module's plan,
  the most precise any of them needs (grouped.py), an approximation said in the header.
* `role.name`: nvdlfw_inspect's `infer_and_assign_layer_names` sets each TE module's `name` to the logged name, so
  inside a debug session the logged names match; elsewhere call the module's `assign_names(model)` before the first
  forward (it names TE modules by their `named_modules()` path, which the plan also holds). A TE module built
  without `name=` is not nameless: its constructor names it `Layer_<n>` (pytorch/module/base.py
  `TransformerEngineBaseModule.__init__` -> `_validate_name`, since TE 2.12), so `assign_names` replaces that
  default and keeps any other name. A LayerNormMLP's roles are `<name>.fc1` / `<name>.fc2`
  (pytorch/module/layernorm_mlp.py `get_quantizer_roles`), its logged GEMM names. Megatron-LM (main, 2026-08)
  passes no `name=` to TE modules (megatron/core/extensions/transformer_engine.py), so under Megatron the
  per-module route is its precision config: one `custom_recipe_factory` per distinct GEMM mix (`mix_<...>`
  functions below need no name). Delayed scaling needs TE-managed state (`DelayedScalingRequest`) and Megatron's
  per-module config refuses it: a delayed rung runs per-tensor current scaling here, said in the header.
"""

from __future__ import annotations

from fp8_policy.policy.records import GEMMS, PRECISIONS, PolicyDecision, Precision
from fp8_policy.policy.render import grouped, pipeline, precision
from fp8_policy.policy.render.applied import AppliedPolicy, names
from fp8_policy.policy.render.heads import heads as logged_heads
from fp8_policy.policy.render.layout import is_one_based, layer_index, merged_overrides, torch_fqn
from fp8_policy.policy.render.options import RenderedPolicy, RenderOptions
from fp8_policy.policy.vocabulary import MEDIA_TYPES

MEDIA_TYPE = MEDIA_TYPES["te-recipe"]
FILENAME = "fp8_policy_recipe.py"
MODULE = FILENAME.removesuffix(".py")
Mix = tuple[str, str, str]  # (fprop, dgrad, wgrad) rung
# rung -> TE base factory (transformer_engine/pytorch/custom_recipes/quantizer_factories.py); bf16: IdentityQuantizer
FACTORIES = {
    "nvfp4": "nvfp4_factory",
    "mxfp8": "mxfp8_factory",
    "block": "float8_block_scaling_factory",
    "current": "current_scaling_factory",
}
GROUPED_WHY = "TE's GroupedLinear gives all its experts one QuantizerRole"


def _rung(rung: str) -> str:
    """The rung a slot runs at here: delayed -> current (module docstring)."""
    return "current" if rung == "delayed" else rung


def layer_mixes(decision: PolicyDecision) -> dict[str, Mix]:
    """Logged layer -> its (fprop, dgrad, wgrad) rungs once the decision is applied, every layer of the decision."""
    outer = _rung(decision.recipe.name)
    runs_at = precision.precision_of(decision)
    overrides = merged_overrides(decision)
    rungs = {name: precision.effective_rung(r, decision.recipe.name) for name, r in precision.ladder(decision).items()}
    kept = set(precision.skipped_layers(decision)) | {
        layer.name for layer in decision.layers if layer.precision is Precision.HIGH
    }
    out: dict[str, Mix] = {}
    for name in runs_at:
        if name in kept:
            out[name] = ("bf16", "bf16", "bf16")
            continue
        rung = _rung(rungs.get(name, outer))
        rung = outer if rung == "bf16" else rung  # a bf16 rung outside the plan's BF16 set is not applied
        gemms = overrides.get(name, ())
        fprop, dgrad, wgrad = ("bf16" if g in gemms else rung for g in GEMMS)
        out[name] = (fprop, dgrad, wgrad)
    return out


def gemm_plan(decision: PolicyDecision) -> dict[str, Mix]:
    """Module (logged name; a grouped module for its `.gemm_<i>` experts) -> its mix, for every module whose mix is
    not the outer recipe's, each GEMM of a grouped module at the most precise rung any of its experts needs."""
    outer = _rung(decision.recipe.name)
    order = {p: i for i, p in enumerate(PRECISIONS)}
    modules: dict[str, list[Mix]] = {}
    for name, mix in layer_mixes(decision).items():
        modules.setdefault(grouped.module_of(name), []).append(mix)
    plan: dict[str, Mix] = {}
    for module, members in modules.items():
        fprop, dgrad, wgrad = (max((m[i] for m in members), key=order.__getitem__) for i in range(3))
        if (fprop, dgrad, wgrad) != (outer, outer, outer):
            plan[module] = (fprop, dgrad, wgrad)
    return plan


def mix_factory_name(mix: Mix) -> str:
    """The module-level factory for one mix: `mix_fprop_mxfp8__dgrad_bf16__wgrad_bf16`."""
    return "mix_" + "__".join(f"{g}_{r}" for g, r in zip(GEMMS, mix, strict=True))


def mixes(decision: PolicyDecision) -> list[Mix]:
    """The distinct mixes of `gemm_plan`, in plan order."""
    return list(dict.fromkeys(gemm_plan(decision).values()))


def applied(decision: PolicyDecision) -> AppliedPolicy:
    """Exact per (layer, GEMM), except TE GroupedLinear experts, which share their module's plan."""
    overrides = {n: g for n, g in merged_overrides(decision).items() if n not in decision.skip_layers}
    layers = grouped.whole_module_bf16(decision, tuple(precision.whole_bf16_layers(decision)))
    experts = grouped.approximation(decision, GROUPED_WHY)
    in_groups = {n for members in grouped.groups(decision).values() for n in members}
    gemms = {n: g for n, g in overrides.items() if n not in layers and n not in in_groups}
    grouped_overrides = [n for n in overrides if n in in_groups and n not in layers]
    parts = [experts.rstrip(".")] if experts else []
    if grouped_overrides:
        parts.append(f"expert GEMM overrides apply to every expert of their module: {names(grouped_overrides)}")
        layers = tuple(dict.fromkeys((*layers, *grouped_overrides)))  # reported as whole layers: the safe reading
    result = AppliedPolicy("te-recipe", layers, gemms, (), "; ".join(parts) + "." if parts else None)
    return pipeline.qualify(result, decision, pipeline.by_debug_name(decision, "te-recipe"))


def _keys(decision: PolicyDecision, plan: dict[str, Mix]) -> dict[str, str]:
    """Module path (`named_modules()`, 0-based, wrappers stripped) -> logged name, for the modules in the plan."""
    one_based = is_one_based(decision)
    index = layer_index(decision)
    out = {}
    for name in plan:
        member = next((n for n in index if grouped.module_of(n) == name), name)
        out[grouped.module_of(torch_fqn(member, index.get(member), one_based))] = name
    return out


def _header(decision: PolicyDecision, plan: dict[str, Mix]) -> list[str]:
    outer = decision.recipe.name
    heads = logged_heads(decision)
    lines = [
        '"""TE CustomRecipe quantizer factory generated by fp8-policy (format te-recipe).',
        "",
        applied(decision).statement(),
        f"Outer recipe: {outer}; {len(plan)} module(s) run another (fprop, dgrad, wgrad) mix (PLAN below).",
        "Requires Transformer Engine >= 2.19 (HybridQuantizer, QuantizerRole): experimental in TE.",
        "",
        "Plain TE:   from fp8_policy_recipe import assign_names, recipe",
        "            assign_names(model)   # skip inside a debug session: nvdlfw_inspect names the modules already",
        "            with te.autocast(recipe=recipe()): ...",
        "Megatron:   --fp8-recipe custom --fp8-quantizer-factory fp8_policy_recipe.qfactory (newer: --custom-recipe",
        "            fp8_policy_recipe.qfactory) needs module names Megatron does not pass to TE; use the precision",
        "            config of the megatron format instead, whose matchers point at the mix_* factories below.",
    ]
    if outer == "delayed" or "delayed" in precision.ladder(decision).values():
        lines.append("Delayed-scaling rungs run per-tensor current scaling here (no TE-managed amax history).")
    if heads:
        lines.append(f"Heads ({names(heads)}) follow the plan when they are TE modules.")
    return [*lines, '"""']


_BODY = '''

def _quantizer(rung, role):
    """One TE quantizer for one direction of a slot: BF16 is IdentityQuantizer."""
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch.custom_recipes import quantizer_factories

    if rung == "bf16":
        return te.IdentityQuantizer()
    return getattr(quantizer_factories, FACTORIES[rung])(role)


def _slot(mix, role):
    """input = (fprop, wgrad), weight = (fprop, dgrad), grad_output = (dgrad, wgrad) as (rowwise, columnwise)."""
    import transformer_engine.pytorch as te

    fprop, dgrad, wgrad = mix
    tensor = role.tensor_type if role is not None else ""
    row, col = {"input": (fprop, wgrad), "weight": (fprop, dgrad), "grad_output": (dgrad, wgrad)}.get(
        tensor, (DEFAULT[0], DEFAULT[0])
    )
    if row == col:
        return _quantizer(row, role)
    return te.HybridQuantizer(
        rowwise_quantizer=_quantizer(row, role), columnwise_quantizer=_quantizer(col, role), columnwise_source="original"
    )


def mix_of(name):
    """The (fprop, dgrad, wgrad) rungs of a module name: a logged name, or its named_modules() path (DDP
    `module.` levels stripped), else the outer recipe's."""
    if name in PLAN:
        return PLAN[name]
    path = name
    while path.startswith("module."):
        path = path[len("module."):]
    logged = MODULE_PATHS.get(path)
    return PLAN[logged] if logged is not None else DEFAULT


def qfactory(role):
    """TE CustomRecipe factory: every (layer, GEMM) at its planned precision (role may be None)."""
    if role is None or role.module_type not in ("linear", "grouped_linear"):
        return _quantizer(DEFAULT[0], role)
    return _slot(mix_of(role.name or ""), role)


def recipe(**kwargs):
    """`CustomRecipe(qfactory=qfactory, **kwargs)`."""
    from transformer_engine.common.recipe import CustomRecipe

    return CustomRecipe(qfactory=qfactory, **kwargs)


def assign_names(model):
    """Name every TE module by its named_modules() path (TE reads `name` when it builds the roles), unless a
    framework named it: TE's own default, `Layer_<n>` (given in the constructor), is replaced."""
    from transformer_engine.pytorch.module.base import TransformerEngineBaseModule

    for path, module in model.named_modules():
        name = getattr(module, "name", None) or ""
        default = name.startswith("Layer_") and name[len("Layer_"):].isdigit()
        if isinstance(module, TransformerEngineBaseModule) and (not name or default):
            module.name = path
    return model
'''


def _mix_text(mix: Mix) -> str:
    return "(" + ", ".join(f'"{r}"' for r in mix) + ")"


def render(decision: PolicyDecision, options: RenderOptions) -> RenderedPolicy:
    """The module text (module docstring)."""
    plan = gemm_plan(decision)
    outer = _rung(decision.recipe.name)
    lines = [*_header(decision, plan), "", f"FACTORIES = {FACTORIES!r}", f"DEFAULT = {_mix_text((outer,) * 3)}"]
    lines.append("# logged module name -> (fprop, dgrad, wgrad)")
    lines.append("PLAN = {")
    lines += [f"    {name!r}: {_mix_text(mix)}," for name, mix in plan.items()]
    lines.append("}")
    lines.append("# named_modules() path (0-based block index, wrappers stripped) -> logged name")
    lines.append("MODULE_PATHS = {")
    lines += [f"    {path!r}: {name!r}," for path, name in _keys(decision, plan).items()]
    lines.append("}")
    lines.append(_BODY.rstrip("\n"))
    for mix in mixes(decision):
        lines += [
            "",
            "",
            f"def {mix_factory_name(mix)}(role):",
            f'    """fprop {mix[0]}, dgrad {mix[1]}, wgrad {mix[2]} for every module it is given (no name needed)."""',
            '    if role is None or role.module_type not in ("linear", "grouped_linear"):',
            "        return _quantizer(DEFAULT[0], role)",
            f"    return _slot({_mix_text(mix)}, role)",
        ]
    return RenderedPolicy(content="\n".join(lines) + "\n", media_type=MEDIA_TYPE, filename=FILENAME)

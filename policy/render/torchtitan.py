"""The `torchtitan` format: torchtitan 0.3's quantization converter configs for a `PolicyDecision`.

Belongs here: sorting the decision's modules into converters, the FQN lists, the approximations and the Python text.
Must not be here: torchao's own snippet (torchao.py), other dialects.

torchtitan 0.3.0 (torchtitan/components/quantization/{float8,mx,nvfp4,utils}.py), applied in list order by
`model_registry(flavor, converters=[...])` on the model's config tree, each converter matching `Linear.Config`
entries by FQN (`layers.0.attention.wq`, `traverse` in torchtitan/config/configurable.py), a converted config being a
subclass of `Linear.Config` that a later converter would match again:
* `Float8LinearConverter.Config(recipe_name="rowwise"|"rowwise_with_gw_hp", filter_fqns=[...])`: `filter_fqns` is an
  EXCLUDE list (substring match, `utils.module_filter_fn`; dims not divisible by 16 are skipped too): every other
  Linear, logged or not, becomes float8 rowwise. torchtitan 0.3 has no tensorwise recipe: current and delayed
  rungs run rowwise (finer scales: the safe side); a block (1x128) rung rowwise too (scales per row, coarser along
  K: said as an approximation).
* `MXFP8LinearConverter.Config(fqns=[...])`, `NVFP4LinearConverter.Config(fqns=[...])`: INCLUDE lists (substring
  match), and an EMPTY list converts every Linear: a converter is emitted only with a non-empty list.
* `Float8GroupedExpertsConverter.Config()`, `MXFP8GroupedExpertsConverter.Config(recipe_name="mxfp8_rceil",
  pad_multiple=32)`: every `GroupedExperts` of the model, no FQN selection, and no NVFP4 grouped converter: the
  routed experts run at the most precise rung any of them needs (NVFP4 -> MXFP8; any BF16 -> no converter).
Rules: BF16 modules (skips, GEMM overrides promoted whole: converters take whole modules, layers that ran BF16)
are in no converter and in Float8's exclude list; include lists hold torchtitan module FQNs (block index 0-based); when the outer recipe is an
include-list one (MXFP8, NVFP4), Linears not logged stay BF16 and a float8 rung there goes BF16 too (an exclude-list
converter would also take every unlogged Linear, the LM head included). An FQN that is a substring of another known
FQN would take it along: said. Logged names are mapped to torchtitan's module FQNs by torchtitan_names.py (q/k/v
together, a fused fc1 as w1 + w3, said as approximations; names it does not know stay as logged, said as unmapped);
logged layers sharing one target run at the most precise rung among them.
"""

from __future__ import annotations

from collections import defaultdict

from fp8_policy.policy.records import PRECISIONS, PolicyDecision
from fp8_policy.policy.render import grouped, pipeline, precision
from fp8_policy.policy.render import torchtitan_names as tt_names
from fp8_policy.policy.render.applied import AppliedPolicy, names, whole_module_overrides
from fp8_policy.policy.render.heads import heads as logged_heads
from fp8_policy.policy.render.layout import is_one_based, layer_index, merged_overrides, torch_fqn
from fp8_policy.policy.render.options import RenderedPolicy, RenderOptions
from fp8_policy.policy.vocabulary import MEDIA_TYPES

MEDIA_TYPE = MEDIA_TYPES["torchtitan"]
FILENAME = "torchtitan_converters.py"
FLOAT8 = ("block", "current", "delayed")
INCLUDE = {"mxfp8": "MXFP8LinearConverter", "nvfp4": "NVFP4LinearConverter"}


class Plan:
    """The decision sorted into torchtitan's converters, the logged names mapped to torchtitan's (torchtitan_names)."""

    def __init__(self, decision: PolicyDecision) -> None:
        one_based, index = is_one_based(decision), layer_index(decision)
        runs_at = precision.precision_of(decision)
        outer = decision.recipe.name
        mla = tt_names.is_mla([layer.name for layer in decision.layers])
        self.decision = decision
        self.fqns: dict[str, str] = {}  # fqn -> converter key: bf16 | float8 | mxfp8 | nvfp4
        self.sources: dict[str, list[str]] = defaultdict(list)  # fqn -> the logged layers it stands for
        self.notes: list[str] = []
        self.experts: dict[str, str] = {}  # logged expert layer -> its rung
        rungs: dict[str, str] = {}  # fqn -> the most precise rung of its logged layers (the safe side)
        approximations: dict[str, list[str]] = defaultdict(list)
        unmapped: list[str] = []
        order = {p: i for i, p in enumerate(PRECISIONS)}
        for layer in decision.layers:
            name = layer.name
            rung = runs_at.get(name, outer)
            path = torch_fqn(name, index.get(name), one_based)
            where = tt_names.target(path, mla)
            if grouped.split(name) is not None or (where is not None and where.routed):
                self.experts[name] = rung
                continue
            if where is None:
                unmapped.append(name)
            elif where.note:
                approximations[where.note].append(name)
            for fqn in where.fqns if where is not None else (path,):
                self.sources[fqn].append(name)
                if fqn not in rungs or order[rung] > order[rungs[fqn]]:
                    rungs[fqn] = rung
        moved: list[str] = []
        for fqn, rung in rungs.items():
            self.fqns[fqn] = self._own_key(rung)
            if rung in FLOAT8 and self.fqns[fqn] == "bf16":
                moved.append(fqn)
        self.notes += [f"{note}: {names(layers)}" for note, layers in approximations.items()]
        self._taken_along(runs_at)
        if unmapped:
            self.notes.append(
                f"{len(unmapped)} logged name(s) have no known torchtitan module and are listed as logged (unmapped: "
                f"rename them to your model's FQNs): {names(unmapped)}"
            )
        if moved:
            self.notes.append(
                f"{len(moved)} float8 rung(s) under the {outer} include-list converter run BF16 (Float8's exclude list "
                f"would also take every unlogged Linear): {names(moved)}"
            )
        if any(rung == "block" for rung in runs_at.values()):
            self.notes.append("block-scaled (1x128) rungs run float8 rowwise: one scale per row, coarser along K")
        self._experts_rung()
        self._substrings()

    def _taken_along(self, runs_at: dict[str, str]) -> None:
        """Logged layers sharing one target (q/k/v) run at the most precise rung among them: the others are said
        (taken along), and those lifted to BF16 listed for `applied`."""
        self.taken_bf16: list[str] = []
        outer = self.decision.recipe.name
        for fqn, layers in self.sources.items():
            key = self.fqns[fqn]
            lifted = [n for n in layers if self._own_key(runs_at.get(n, outer)) != key]
            if len(layers) > 1 and lifted:
                self.taken_bf16 += lifted if key == "bf16" else []
                self.notes.append(f"{fqn!r} runs {key} for {names(layers)} together, taking along {names(lifted)}")

    def _own_key(self, rung: str) -> str:
        key = "float8" if rung in FLOAT8 else rung
        return "bf16" if key == "float8" and self.decision.recipe.name not in FLOAT8 else key

    def _experts_rung(self) -> None:
        if not self.experts:
            self.grouped: str | None = None
            return
        order = {p: i for i, p in enumerate(PRECISIONS)}
        top = max(self.experts.values(), key=order.__getitem__)
        self.grouped = None if top == "bf16" else ("mxfp8" if top in ("nvfp4", "mxfp8") else "float8")
        lower = sorted({r for r in self.experts.values() if r != top})
        if lower or top == "nvfp4":
            runs = "BF16" if self.grouped is None else self.grouped
            self.notes.append(
                f"the grouped-experts converters take every routed expert of the model (no FQN selection, no NVFP4 "
                f"grouped converter in 0.3): all {len(self.experts)} logged expert GEMM(s) run {runs}"
                + (f", where some asked {'/'.join(lower)}" if lower else "")
            )

    def _substrings(self) -> None:
        for fqn, key in self.fqns.items():
            if key not in INCLUDE:
                continue
            taken = [other for other, k in self.fqns.items() if other != fqn and fqn in other and k != key]
            if taken:
                self.notes.append(f"{fqn!r} ({key}, substring match) also converts {names(taken)}")

    def listed(self, key: str) -> list[str]:
        return [fqn for fqn, k in self.fqns.items() if k == key]


def applied(decision: PolicyDecision) -> AppliedPolicy:
    """Skips exact, GEMM overrides and routed experts as whole modules, the approximations of `Plan`."""
    base = whole_module_overrides(decision, "torchtitan", "torchtitan converts whole Linear modules")
    plan = Plan(decision)
    experts = tuple(plan.experts) if plan.experts and plan.grouped is None else ()
    layers = tuple(dict.fromkeys((*base.bf16_layers, *experts, *plan.taken_bf16)))
    parts = [part.rstrip(".") for part in (base.approximation, *plan.notes) if part]
    result = AppliedPolicy("torchtitan", layers, {}, (), "; ".join(parts) + "." if parts else None)
    return pipeline.qualify(result, decision, pipeline.by_position(decision, "torchtitan"))


def _converters(plan: Plan) -> list[str]:
    outer = plan.decision.recipe.name
    lines = [
        "def converters(model_compile_enabled: bool = False) -> list:",
        '    """The converter configs, in order."""',
    ]
    lines.append("    out = []")
    if outer in FLOAT8:
        overrides = merged_overrides(plan.decision)
        if overrides and all(g == ("wgrad",) for g in overrides.values()):
            lines.append(
                '    # wgrad-only overrides: recipe_name="rowwise_with_gw_hp" keeps wgrad in BF16 for EVERY Linear'
            )
        lines += [
            "    out.append(",
            "        Float8LinearConverter.Config(",
            '            recipe_name="rowwise", filter_fqns=FLOAT8_FILTER_FQNS, model_compile_enabled=model_compile_enabled',
            "        )",
            "    )",
        ]
    for key, converter in INCLUDE.items():
        if plan.listed(key):
            lines.append(
                f"    out.append({converter}.Config(fqns={key.upper()}_FQNS, model_compile_enabled=model_compile_enabled))"
            )
    if plan.grouped == "mxfp8":
        lines.append("    out.append(MXFP8GroupedExpertsConverter.Config(model_compile_enabled=model_compile_enabled))")
    elif plan.grouped == "float8":
        lines.append(
            "    out.append(Float8GroupedExpertsConverter.Config(model_compile_enabled=model_compile_enabled))"
        )
    return [*lines, "    return out"]


def render(decision: PolicyDecision, options: RenderOptions) -> RenderedPolicy:
    """A Python module: the FQN lists and `converters()` for `model_registry(flavor, converters=converters())`."""
    plan = Plan(decision)
    outer = decision.recipe.name
    excluded = [fqn for fqn, key in plan.fqns.items() if key != "float8"]
    heads = logged_heads(decision)
    lines = [
        '"""torchtitan 0.3 quantization converters generated by fp8-policy (format torchtitan).',
        "",
        applied(decision).statement(),
        f"Outer recipe: {outer}. FQNs are torchtitan 0.3's module names (Llama3/Qwen3/DeepSeek-V3 config trees) mapped",
        "from the logged Megatron / Hugging Face / TE names, block index 0-based; `layers.<i>.attention.qkv_linear.` is",
        "a prefix (fused wqkv, or wq + wkv with fuse_qkv=False). Names without a known mapping stay as logged (said above).",
        "Float8LinearConverter's filter_fqns EXCLUDES (every other Linear runs float8 rowwise: torchtitan 0.3 has no",
        "tensorwise recipe); MXFP8/NVFP4LinearConverter's fqns INCLUDE (an empty list would convert every Linear).",
    ]
    if heads:
        lines.append(
            f"Heads ({names(heads)}): in the lists like any module; an unlisted head stays BF16 under include lists."
        )
    lines += [
        '"""',
        "",
        "from torchtitan.components.quantization import (",
        "    Float8GroupedExpertsConverter,",
        "    Float8LinearConverter,",
        "    MXFP8GroupedExpertsConverter,",
        "    MXFP8LinearConverter,",
        "    NVFP4LinearConverter,",
        ")",
        "",
        f"BF16_FQNS = {plan.listed('bf16')!r}",
        f"FLOAT8_FILTER_FQNS = {excluded!r}  # exclude list: BF16 and the other converters' modules",
        f"MXFP8_FQNS = {plan.listed('mxfp8')!r}  # include list",
        f"NVFP4_FQNS = {plan.listed('nvfp4')!r}  # include list",
        "",
        "",
        *_converters(plan),
        "",
        "",
        '# Usage: model_spec = model_registry("<flavor>", converters=converters(model_compile_enabled=True))',
    ]
    return RenderedPolicy(content="\n".join(lines) + "\n", media_type=MEDIA_TYPE, filename=FILENAME)


def module_fqns(decision: PolicyDecision, fused_qkv: bool = True) -> dict[str, tuple[str, ...]]:
    """Logged non-expert layer -> the torchtitan `Linear` FQNs its rendering acts on (`torchtitan_names.concrete`:
    the fused `wqkv` layout, or `wq` + `wkv`); a name with no mapping -> itself. For loaders and checks."""
    plan = Plan(decision)
    out: dict[str, list[str]] = defaultdict(list)
    for fqn, layers in plan.sources.items():
        for name in layers:
            out[name] += tt_names.concrete(fqn, fused_qkv)
    return {name: tuple(fqns) for name, fqns in out.items()}


def fqn_groups(decision: PolicyDecision) -> dict[str, list[str]]:
    """Converter key -> FQNs (for the JSON and tests)."""
    out: dict[str, list[str]] = defaultdict(list)
    for fqn, key in Plan(decision).fqns.items():
        out[key].append(fqn)
    return dict(out)

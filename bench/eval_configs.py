"""The eval's config checkers: each format policy/vocabulary.py names (`FORMATS`; its checker is `check_<format>`,
te-yaml -> check_te_yaml) checked for acceptance with the tool's own parser or a re-implementation of its loader
(bench/te_recipe_loader.py, bench/torchtitan_loader.py)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml

from bench import eval_bf16, te_recipe_loader, torchtitan_loader
from bench.te_config_manager import TeConfigManager
from fp8_policy.policy.records import GEMMS, LayerGroup, PolicyDecision
from fp8_policy.policy.render import render, torchtitan
from fp8_policy.policy.render.precision import whole_bf16_layers
from fp8_policy.policy.vocabulary import FORMATS

LAYER_DISABLE = frozenset({"DisableFP8Layer", "DisableQuantizationLayer"})
GEMM_DISABLE = frozenset({"DisableFP8GEMM", "DisableQuantizationGEMM"})


class ConfigChecker(TeConfigManager):
    """Checks rendered artifacts; te-yaml through nvdlfw_inspect's real ConfigManager (use as a context manager)."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self._torch_linear: Any = None

    # -- te-yaml
    def check_te_yaml(self, text: str, decision: PolicyDecision) -> list[str]:
        try:
            manager = self.load(text)
        except Exception as exc:  # AssertionError for unknown features / missing fields, yaml errors, ...
            return [f"ConfigManager rejected the file: {type(exc).__name__}: {exc}"]
        errors: list[str] = []
        skip = set(whole_bf16_layers(decision))  # skipped, and layers that ran in BF16 (kept there)
        overrides = {o.layer: o for o in decision.gemm_overrides if o.layer not in skip}
        names = dict.fromkeys([*(layer.name for layer in decision.layers), *skip, *overrides])
        resolved: dict[str, dict] = {}
        for name in names:
            try:
                config = manager.get_config_for_layer(name)
            except ValueError as exc:
                errors.append(f"{name}: {exc}")
                continue
            features = {**config.get("transformer_engine", {}), **config.get("base", {})}
            resolved[name] = features
            layer_off, gemm_off = LAYER_DISABLE & set(features), GEMM_DISABLE & set(features)
            if name in skip:
                if len(layer_off) != 1 or gemm_off:
                    errors.append(f"{name}: skipped but gets {sorted(features)}")
            elif name in overrides:
                want = set(overrides[name].gemms)
                got = set(features[next(iter(gemm_off))].get("gemms", ())) if len(gemm_off) == 1 else None
                if layer_off or got != want:
                    errors.append(f"{name}: override {sorted(want)} but gets {sorted(features)} gemms={got}")
            elif layer_off or gemm_off:
                errors.append(f"{name}: kept in FP8 but gets {sorted(layer_off | gemm_off)}")
        manager.reset()
        got = eval_bf16.te_yaml_applied(resolved, LAYER_DISABLE, GEMM_DISABLE)
        return errors + eval_bf16.compare("te-yaml", got, decision)

    # -- megatron
    def check_megatron(self, text: str, decision: PolicyDecision) -> list[str]:
        errors: list[str] = []
        result = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True, check=False)
        if result.returncode != 0:
            errors.append(f"bash -n: {result.stderr.strip()}")
        heredoc = re.search(r"<<'(\w+)'\n(.*?)\n\1$", text, re.S | re.M)
        if heredoc:
            try:
                config = yaml.safe_load(heredoc[2])
                configs, matchers = config["configs"], config["matchers"]
                unknown = [k for k, m in matchers.items() if m.get("config") not in configs or not m.get("pattern")]
                if unknown:
                    errors.append(f"precision config: matchers without a known config/pattern: {unknown}")
            except Exception as exc:
                errors.append(f"precision-config YAML: {type(exc).__name__}: {exc}")
        heads = {layer.name for layer in decision.layers if layer.structure.group is LayerGroup.HEAD}
        asked = (*decision.skip_layers, *(o.layer for o in decision.gemm_overrides))
        changed = any(name not in heads for name in asked)  # a head needs no setting: Megatron runs it in BF16
        routed = heredoc is not None or "--first-last-layers-bf16" in text
        if changed and not routed:
            errors.append("layers are skipped/overridden but neither a precision config nor BF16 flags are emitted")
        if "FP8_POLICY_ARGS=(" not in text:
            errors.append("no FP8_POLICY_ARGS array")
            return errors
        try:
            got = eval_bf16.megatron_applied(text, decision)
        except Exception as exc:
            return [*errors, f"flags/precision config unreadable: {type(exc).__name__}: {exc}"]
        return errors + eval_bf16.compare("megatron", got, decision)

    # -- hydra
    @staticmethod
    def check_hydra(text: str, decision: PolicyDecision) -> list[str]:
        errors: list[str] = []
        for line in text.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                tokens = shlex.split(line)
            except ValueError as exc:
                errors.append(f"{line!r}: {exc}")
                continue
            if len(tokens) != 1 or not re.fullmatch(r"[+~]?[A-Za-z_][\w.]*=.*", tokens[0]):
                errors.append(f"not one key=value override: {line!r}")
                continue
            key, value = tokens[0].split("=", 1)
            if key == "fp8_layers":
                parsed = yaml.safe_load(value)
                if not isinstance(parsed, list) or not all(isinstance(v, int) and v >= 1 for v in parsed):
                    errors.append(f"fp8_layers is not a list of 1-based block numbers: {value!r}")
        if errors:
            return errors
        if "analysis would allow FP8" in text and any(
            layer.structure.group.value == "head"
            and (layer.name in decision.skip_layers or layer.name in {o.layer for o in decision.gemm_overrides})
            for layer in decision.layers
        ):
            errors.append("says the analysis would allow FP8 on a head it asked to keep in BF16")
        return errors + eval_bf16.compare("hydra", eval_bf16.hydra_applied(text, decision), decision)

    # -- torchao
    def check_torchao(self, text: str, decision: PolicyDecision) -> list[str]:
        try:
            namespace: dict[str, Any] = {"__name__": "torchao_fp8_filter"}
            exec(compile(text, "torchao_fp8_filter.py", "exec"), namespace)  # noqa: S102 - our own output
            skip_fqns, keep = namespace["SKIP_FQNS"], namespace["module_filter_fn"]
            if self._torch_linear is None:
                import torch

                self._torch_linear = torch.nn.Linear(2, 2)
        except Exception as exc:
            return [f"snippet does not run: {type(exc).__name__}: {exc}"]
        errors = [f"{fqn}: converted although listed" for fqn in skip_fqns if keep(self._torch_linear, fqn)]
        if not keep(self._torch_linear, "fp8_policy_eval.some.other.linear"):
            errors.append("an unlisted nn.Linear is not converted")
        covered = set(whole_bf16_layers(decision)) | {o.layer for o in decision.gemm_overrides}
        if len(skip_fqns) != len(covered):
            errors.append(f"SKIP_FQNS has {len(skip_fqns)} entries for {len(covered)} skipped/overridden/BF16 layers")
        got = eval_bf16.torchao_applied(keep, self._torch_linear, decision)
        return errors + eval_bf16.compare("torchao", got, decision)

    # -- te-recipe
    def check_te_recipe(self, text: str, decision: PolicyDecision) -> list[str]:
        """Imported with a stand-in of TE's CustomRecipe machinery: every requested BF16 layer and GEMM is BF16."""
        folder = self.workdir / "te_recipe"
        folder.mkdir(exist_ok=True)
        errors: list[str] = []
        try:
            with te_recipe_loader.loaded(text, folder) as module:
                for name in decision.skip_layers:
                    if te_recipe_loader.gemm_formats(module.qfactory, name) != ("bf16",) * 3:
                        errors.append(f"{name}: skipped but not in BF16")
                for o in decision.gemm_overrides:
                    got = dict(zip(GEMMS, te_recipe_loader.gemm_formats(module.qfactory, o.layer), strict=True))
                    errors += [f"{o.layer}: {g} requested in BF16 but {got[g]}" for g in o.gemms if got[g] != "bf16"]
        except Exception as exc:
            return [f"module does not load: {type(exc).__name__}: {exc}"]
        return errors

    # -- torchtitan
    def check_torchtitan(self, text: str, decision: PolicyDecision) -> list[str]:
        """Run through a re-implementation of torchtitan 0.3's converters: no requested BF16 layer is converted."""
        fqns = torchtitan.module_fqns(decision)  # logged layer -> torchtitan Linear FQNs (fused q/k/v layout)
        linears = {fqn: (256, 256) for targets in fqns.values() for fqn in targets}
        try:
            result, _grouped = torchtitan_loader.apply(text, linears, experts=False)
        except Exception as exc:
            return [f"converters do not build: {type(exc).__name__}: {exc}"]
        asked = [*decision.skip_layers, *(o.layer for o in decision.gemm_overrides)]
        return [
            f"{n}: requested in BF16 but {result[fqn]} ({fqn})"
            for n in asked
            for fqn in fqns.get(n, ())
            if result[fqn] != "bf16"
        ]

    def check(self, decision: PolicyDecision) -> dict[str, list[str]]:
        """Errors per format (empty list: accepted); a renderer exception is an error of its format."""
        out: dict[str, list[str]] = {}
        for fmt in FORMATS:
            check = getattr(self, f"check_{fmt.replace('-', '_')}")  # every format of the vocabulary has its checker
            try:
                text = render(decision, fmt).content
            except Exception as exc:
                out[fmt] = [f"render failed: {type(exc).__name__}: {exc}"]
                continue
            out[fmt] = check(text, decision)
        return out

"""The verification kit's check of `LogQuantizationSensitivity` (client/collect/te_features/) on a CUDA GPU with TE.

Two bias-free te.Linear fed the parity tensors (examples/gpu_check.py) for 3 steps (a 4th forward flushes the last
one) under a TE debug session with the feature loaded from `feature_dirs`; its lines must cover every (layer, GEMM,
format) of those steps and equal, to 1e-3 relative, the same formulas computed on CPU by the feature's own logic
(client/collect/te_sensitivity.py) on the tensors TE handed it. MXFP8 and current scaling only: NVFP4's stochastic
rounding draws differ between a CUDA and a CPU generator. Needs CUDA and TE (imported by gpu_check.py only then).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from examples.gpu_check_data import STATS_LOG, parity_tensors, read_log
from examples.gpu_check_te import autocast, parity_te_model, te_features_dir

FORMATS = ("mxfp8", "current")


def check_sensitivity(work: Path) -> list[tuple[str, bool, str]]:
    import nvdlfw_inspect.api as debug_api
    from transformer_engine.common.recipe import Float8CurrentScaling, Format

    from fp8_policy.client.collect.sensitivity import layer_sensitivity, stat_name
    from fp8_policy.client.collect.te_sensitivity import TE_FEATURE_DIR

    config = work / "sensitivity.yaml"
    work.mkdir(parents=True, exist_ok=True)
    config.write_text(
        "sensitivity:\n  enabled: true\n  layers:\n    layer_name_regex_pattern: '.*'\n  transformer_engine:\n"
        f"    LogQuantizationSensitivity:\n      enabled: true\n      formats: [{', '.join(FORMATS)}]\n      freq: 1\n"
    )
    tensors = parity_tensors()
    expected: dict[tuple[str, int], float] = {}
    debug_api.initialize(
        config_file=str(config), feature_dirs=[te_features_dir(), TE_FEATURE_DIR], log_dir=str(work / "te")
    )
    try:
        model = parity_te_model(tensors)
        recipe: Any = Float8CurrentScaling(fp8_format=Format.HYBRID)
        for step in range(4):
            with autocast(True, recipe):
                outs = {}
                for name in ("fc1", "fc2"):
                    x0, w, g0 = tensors[name]
                    x = (x0 * 4.0**step).cuda().requires_grad_(True)
                    outs[name] = (getattr(model, name)(x), x0 * 4.0**step, w, g0 * 0.5**step)
            if step == 3:
                break  # the 4th forward only flushes step 2's lines
            sum((y.float() * g.cuda()).sum() for y, _, _, g in outs.values()).backward()
            for name, (_, x, w, g) in outs.items():
                full = f"model.{name}"
                for fmt, gemms in layer_sensitivity(x, w, g, FORMATS).items():
                    for gemm, value in gemms.items():
                        expected[(stat_name(full, gemm, fmt), step)] = value
            debug_api.step()
    finally:
        debug_api.end_debug()
    logged = read_log(work / "te" / STATS_LOG)
    got = {key: float(value) for key, value in logged.items() if key[0].endswith("_sensitivity")}
    missing = sorted(set(expected) - set(got))
    off = [
        f"{k[0]}@{k[1]}: GPU {got[k]:.4f}, CPU {v:.4f}"
        for k, v in expected.items()
        if k in got and not math.isclose(got[k], v, rel_tol=1e-3, abs_tol=1e-3)
    ]
    detail = f"{len(got)} lines for {len(expected)} expected" + (f"; missing {missing[:2]}" if missing else "")
    detail += f"; differ: {off[:2]}" if off else ""
    return [("LogQuantizationSensitivity = CPU formulas", bool(got) and not missing and not off, detail)]


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print(check_sensitivity(Path(tmp)))

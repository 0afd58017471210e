"""Apply an fp8-policy recommendation to a Transformer Engine model (needs a CUDA GPU with TE installed).

    pip install 'fp8-policy[te]'
    python examples/apply_te.py --url http://fp8-policy:8000 --run-id 42
    python examples/apply_te.py --policy policy.json --debug-api     # the TE debug-API route
    python examples/apply_te.py --url ... --run-id 42 --monitor te_monitor.yaml   # route 1, watched by the debug API

Two routes, same policy:
1. Per-module autocast (default): `apply_policy(model, policy, backend="te")` makes each skipped TE module's
   forward run under `te.autocast(enabled=False)` inside the training `te.autocast(enabled=True, recipe=...)`;
   the recipe comes from `recipe_from_policy(policy)`. Per-GEMM overrides become whole-module skips (the
   report says which). Not with DelayedScaling (its amax reduction conflicts with per-layer toggling: the
   report warns; the service recommends current or block scaling when it skips layers).
   With `--monitor FILE` the run is watched through the debug API with the service's `te-monitor` config
   (`fp8-policy recommend RUN --format te-monitor -o FILE`): the layers the policy keeps in BF16 get
   LogTensorStats only (TE asserts when LogFp8TensorStats watches a layer outside FP8), and `apply_policy`
   checks the active session first (`DebugConfigConflict` names any layer a config would stop TE on).
   Layers of the policy's precision ladder run under their own `te.autocast(recipe=...)` (report:
   `precision_wrapped`).
2. TE debug API (`--debug-api`): `write_te_debug_config(policy, path)` writes DisableFP8Layer /
   DisableFP8GEMM sections (exact per-GEMM control); nvdlfw_inspect must be initialised BEFORE the first TE
   module is built, and `infer_and_assign_layer_names` gives the same names the analysed logs used.

TE calls used here were checked against NVIDIA/TransformerEngine @ d0067d0: `te.TransformerLayer(hidden_size,
ffn_hidden_size, num_attention_heads, ..., layer_number=..., params_dtype=...)` (pytorch/transformer.py l. 300-354;
it stores `layer_number` even when None, so pass it: nvdlfw names blocks by it), `te.Linear`, `te.autocast`
(pytorch/quantization.py l. 972), `debug_api.initialize(config_file, feature_dirs, log_dir)` (docs/debug/
1_getting_started.rst).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from fp8_policy import UnmatchedLayers, apply_policy, recipe_from_policy, write_te_debug_config  # 'fp8-policy[te]'

HIDDEN, FFN, HEADS, LAYERS, VOCAB, SEQ, BATCH = 1024, 4096, 16, 4, 32000, 512, 2


def build_model() -> torch.nn.Module:
    """Embedding, TE TransformerLayers numbered 1..n (as in the logs), TE LM head: logged as `model.lm_head`."""
    import transformer_engine.pytorch as te

    class LM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, HIDDEN, device="cuda", dtype=torch.bfloat16)
            self.layers = torch.nn.ModuleList(
                te.TransformerLayer(
                    HIDDEN,
                    FFN,
                    HEADS,
                    layer_number=i + 1,
                    params_dtype=torch.bfloat16,
                    hidden_dropout=0.0,
                    attention_dropout=0.0,
                )
                for i in range(LAYERS)
            )
            self.lm_head = te.Linear(HIDDEN, VOCAB, params_dtype=torch.bfloat16)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.embed(tokens).transpose(0, 1)  # TE default attn_input_format is "sbhd"
            for layer in self.layers:
                x = layer(x)
            return self.lm_head(x).transpose(0, 1)

    return LM()


def load_policy(args: argparse.Namespace) -> dict:
    if args.policy:
        return json.loads(Path(args.policy).read_text())
    from fp8_policy.client import PolicyClient

    with PolicyClient(args.url) as api:
        return api.recommendation(args.run_id)


def train(model: torch.nn.Module, recipe: object, steps: int, on_step=None) -> None:
    import transformer_engine.pytorch as te

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device="cuda")
        with te.autocast(enabled=True, recipe=recipe):  # skipped modules re-disable it inside
            logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if on_step:
            on_step()
        print(f"loss {loss.item():.4f}")


def autocast_route(policy: dict, steps: int, monitor: str | None = None, log_dir: str = ".") -> None:
    on_step = None
    if monitor:  # the debug API must be initialised before the first TE module is built
        import nvdlfw_inspect.api as debug_api
        import transformer_engine

        features = str(Path(transformer_engine.__file__).parent / "debug" / "features")
        debug_api.initialize(config_file=monitor, feature_dirs=[features], log_dir=log_dir)
        on_step = debug_api.step
    model = build_model()
    if monitor:
        debug_api.infer_and_assign_layer_names(model)
    recipe = recipe_from_policy(policy)
    try:  # before or after DDP/FSDP (both resolve), before torch.compile
        report = apply_policy(model, policy, backend="te", recipe=recipe)
    except UnmatchedLayers as exc:  # e.g. the policy says `model.output`, the model has `lm_head`
        raise SystemExit(str(exc)) from exc
    print(report.summary())
    train(model, recipe, steps, on_step=on_step)
    if monitor:
        debug_api.end_debug()


def debug_api_route(policy: dict, steps: int, log_dir: str) -> None:
    import nvdlfw_inspect.api as debug_api
    import transformer_engine

    config = write_te_debug_config(policy, Path(log_dir) / "fp8_policy_debug.yaml")
    features = str(Path(transformer_engine.__file__).parent / "debug" / "features")
    debug_api.initialize(config_file=str(config), feature_dirs=[features], log_dir=log_dir)  # before TE modules
    model = build_model()
    debug_api.infer_and_assign_layer_names(model)  # names as in the analysed logs: model.layers.1...
    train(model, recipe_from_policy(policy), steps, on_step=debug_api.step)
    debug_api.end_debug()  # the metadata log's plan lines read "High Precision" for the disabled GEMMs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", help="a saved recommendation JSON")
    parser.add_argument("--url", default="http://localhost:8000")
    parser.add_argument("--run-id", type=int)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--debug-api", action="store_true", help="apply through the TE debug API instead")
    parser.add_argument("--log-dir", default="./fp8_policy_logs")
    parser.add_argument("--monitor", help="a te-monitor YAML: watch the autocast route with the TE debug API")
    args = parser.parse_args(argv)
    if not args.policy and args.run_id is None:
        parser.error("give --policy or --run-id")
    policy = load_policy(args)
    if args.debug_api:
        debug_api_route(policy, args.steps, args.log_dir)
    else:
        autocast_route(policy, args.steps, args.monitor, args.log_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

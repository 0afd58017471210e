"""Synthetic versions of published FP8 studies, as pairs of runs (before / after a change), for tests and demos.

`og2_boundary_study()`: the OG2-7B "FL2 vs FL4" comparison (bionemo-framework fp8_analysis; Llama-3 architecture,
FP8 block scaling). Run FL2 keeps the first/last 2 of 32 blocks in BF16 (and the LM head, bionemo's default); the
fc2 activation underflow of the last FP8 block (block 30, 1-based) climbs from ~8 % to ~18 %. Run FL4 keeps the
first/last 4 blocks in BF16; the same climb (to ~16 %) appears at the new last FP8 block (block 28). Every other
layer is healthy. Scaled down in iterations so it writes and analyses in about a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from fp8_policy.policy.synthetic.profiles import Rule, Scenario, all_of, blocks, ramp, roles
from fp8_policy.policy.synthetic.run import SyntheticRun


@dataclass(frozen=True)
class BoundaryStudy:
    """Two runs of one model: `before` and `after` a wider BF16 edge, with the layer that degrades in each."""

    before: SyntheticRun
    after: SyntheticRun
    degrading_before: str
    degrading_after: str
    metadata: dict[str, object] = field(default_factory=dict)  # what the uploader would send for both runs


def _bf16_edges(run: SyntheticRun, n: int) -> frozenset[str]:
    ordinals = [*range(n), *range(run.num_layers - n, run.num_layers)]
    heads = {spec.name for spec in run.layers() if spec.role == "head"}
    return frozenset(name for o in ordinals for name in run.block(o)) | heads


def og2_boundary_study(*, num_layers: int = 32, iterations: int = 600, seed: int = 30) -> BoundaryStudy:
    base = SyntheticRun(family="llama", num_layers=num_layers, iterations=iterations, freq=10, seed=seed)
    act, uf = "activation", "underflows%"
    runs = []
    degrading = []
    for edge, peak in ((2, 18.0), (4, 16.1)):
        last_fp8 = num_layers - edge - 1  # 0-based position of the last FP8 block
        rule = Rule(all_of(blocks(last_fp8), roles("fc2")), ramp(8.0, peak), act, uf)
        run = replace(base, bf16_layers=_bf16_edges(base, edge), profile=Scenario((rule,)), seed=seed + edge)
        runs.append(run)
        degrading.append(next(name for name in run.block(last_fp8) if name.endswith("fc2")))
    metadata = {"recipe": "Float8BlockScaling", "gpu": "H100", "num_layers": num_layers}
    return BoundaryStudy(runs[0], runs[1], degrading[0], degrading[1], metadata)

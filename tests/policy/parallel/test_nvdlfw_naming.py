"""The naming conventions of policy/parallel/naming.py, checked with the real nvdlfw_inspect on Megatron-shaped
model chunks: `layer_number` children get global 1-based names on every stage, plain ModuleList children local
ones; and the synthetic parallel job writer logs exactly those names."""

from __future__ import annotations

import pytest

from fp8_policy.policy.parallel import LAYER_NUMBER, LOCAL, ParallelLayout
from fp8_policy.policy.synthetic import SyntheticRun
from fp8_policy.policy.synthetic.parallel import ParallelJob, write_parallel_job
from tests.policy.parallel.megatron_chunks import stage_names


@pytest.mark.parametrize(("naming", "numbered"), [(LAYER_NUMBER, True), (LOCAL, False)])
@pytest.mark.parametrize("vpp", [None, 2])
def test_the_writer_logs_what_nvdlfw_inspect_names(naming: str, numbered: bool, vpp: int | None, tmp_path) -> None:
    if naming == LOCAL and vpp:
        pytest.skip("local names of several chunks collide: covered by the resolve tests")
    layout = ParallelLayout(pp=2, dp=1, vpp=vpp, num_layers=8)
    run = SyntheticRun(family="megatron", num_layers=8, first_index=0, iterations=0)
    written = write_parallel_job(ParallelJob(run, layout, naming=naming), tmp_path / "logs")
    for pp_rank in range(2):
        expected = stage_names(layout, pp_rank, numbered, tmp_path / f"nvdlfw{pp_rank}")
        assert set(written.logged_to_global[pp_rank]) == expected

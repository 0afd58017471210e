"""policy/parallel against a test-side re-implementation of Megatron-LM's own rules (megatron_parallel.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fp8_policy.policy.parallel import ParallelLayout, block_home, rank_coord, stage_blocks
from fp8_policy.policy.parallel.pipeline_layout import stage_decoder_counts
from tests.policy.parallel import megatron_parallel as mg

ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "tp-dp-pp", "tp-pp-dp")


@given(
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2, 3, 4]),
    cp=st.sampled_from([1, 2]),
    dp=st.sampled_from([1, 2, 3]),
    order=st.sampled_from(ORDERS),
)
@settings(max_examples=60, deadline=None)
def test_dense_coordinates_follow_megatrons_rank_generator(tp: int, pp: int, cp: int, dp: int, order: str) -> None:
    layout = ParallelLayout(tp=tp, pp=pp, cp=cp, dp=dp, order=_full(order))
    world = layout.world_size
    for rank in range(world):
        ours = rank_coord(layout, rank)
        theirs = mg.dense_coordinates(world, tp, pp, cp, _full(order), rank)
        assert (ours.tp, ours.cp, ours.dp, ours.pp) == (theirs["tp"], theirs["cp"], theirs["dp"], theirs["pp"])


@given(
    tp=st.sampled_from([1, 2]),
    pp=st.sampled_from([1, 2]),
    ep=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([2, 4]),
    etp=st.sampled_from([None, 1]),
)
@settings(max_examples=40, deadline=None)
def test_expert_coordinates_follow_megatrons_expert_generator(
    tp: int, pp: int, ep: int, dp: int, etp: int | None
) -> None:
    layout = ParallelLayout(tp=tp, pp=pp, dp=dp, ep=ep, etp=etp)
    world = layout.world_size
    expert_tp = etp or tp
    if world % (expert_tp * ep * pp):
        return
    for rank in range(world):
        ours = rank_coord(layout, rank)
        theirs = mg.expert_coordinates(world, expert_tp, ep, pp, layout.order, rank)
        assert (ours.etp, ours.ep, ours.edp) == (theirs["tp"], theirs["ep"], theirs["dp"])


def test_the_documented_example_tp2_pp4_dp2() -> None:
    """parallel_state's default order: tp = rank % 2, dp = (rank // 2) % 2, pp = rank // 4."""
    layout = ParallelLayout(tp=2, pp=4, dp=2)
    for rank in range(16):
        coord = rank_coord(layout, rank)
        assert (coord.tp, coord.dp, coord.pp) == (rank % 2, (rank // 2) % 2, rank // 4)


def _configs() -> st.SearchStrategy[mg.Config]:
    even = st.builds(
        lambda pp, per, vpp, emb, loss: mg.Config(
            num_layers=pp * per * (vpp or 1) - emb - loss,
            pipeline_model_parallel_size=pp,
            virtual_pipeline_model_parallel_size=vpp if pp > 1 else None,
            account_for_embedding_in_pipeline_split=bool(emb),
            account_for_loss_in_pipeline_split=bool(loss),
        ),
        st.integers(1, 6),
        st.integers(1, 4),
        st.sampled_from([None, 2, 3]),
        st.sampled_from([0, 1]),
        st.sampled_from([0, 1]),
    )
    uneven = st.builds(
        lambda pp, middle, first, last, vpp: mg.Config(
            num_layers=middle * max(pp - (first is not None) - (last is not None), 0) * (vpp or 1)
            + (first or 0) * (vpp or 1)
            + (last or 0) * (vpp or 1),
            pipeline_model_parallel_size=pp,
            num_layers_in_first_pipeline_stage=None if first is None else first * (vpp or 1),
            num_layers_in_last_pipeline_stage=None if last is None else last * (vpp or 1),
            virtual_pipeline_model_parallel_size=vpp,
        ),
        st.integers(3, 6),
        st.integers(1, 3),
        st.sampled_from([None, 1, 2, 3]),
        st.sampled_from([None, 1, 2, 4]),
        st.sampled_from([None, 2]),
    )
    return st.one_of(even, uneven).filter(lambda c: c.num_layers >= 1)


def _layout_of(config: mg.Config) -> ParallelLayout:
    return ParallelLayout(
        pp=config.pipeline_model_parallel_size,
        vpp=config.virtual_pipeline_model_parallel_size,
        num_layers=config.num_layers,
        first_stage_layers=config.num_layers_in_first_pipeline_stage,
        last_stage_layers=config.num_layers_in_last_pipeline_stage,
        embedding_in_split=config.account_for_embedding_in_pipeline_split,
        loss_in_split=config.account_for_loss_in_pipeline_split,
    )


@given(config=_configs())
@settings(max_examples=200, deadline=None)
def test_stage_blocks_follow_megatrons_offsets_and_layer_counts(config: mg.Config) -> None:
    """Where Megatron accepts the configuration, the blocks of every (pp rank, virtual stage) are its
    `layer_number - 1` values; where it asserts, so do we (StageError)."""
    layout = _layout_of(config)
    vp_stages = [None] if config.virtual_pipeline_model_parallel_size is None else range(layout.virtual_stages)
    for pp_rank in range(config.pipeline_model_parallel_size):
        for vp in vp_stages:
            try:
                numbers = mg.layer_numbers(config, pp_rank, vp)
            except (AssertionError, ZeroDivisionError):
                with pytest.raises(ValueError):
                    stage_blocks(layout, pp_rank, vp or 0)
                continue
            assert list(stage_blocks(layout, pp_rank, vp or 0)) == [n - 1 for n in numbers]
            for index, number in enumerate(numbers):
                assert block_home(layout, number - 1) == (pp_rank, vp or 0, index)


@pytest.mark.parametrize(
    ("text", "pp"),
    [("Ettt|tt|tt|ttL", 2), ("Ett|(tt|)*6,ttL", 4), ("Et|t|tt|tt|t|tL", 3), ("E|(t|)*7L", 3)],
)
def test_explicit_layouts_follow_pipeline_parallel_layer_layout(text: str, pp: int) -> None:
    flat = [list(stage) for stage in _megatron_unroll(text)]
    config = mg.Config(num_layers=sum(s.count("t") for s in flat), pipeline_model_parallel_size=pp)
    config.layout = mg.layout_2d(flat, pp)
    config.virtual_pipeline_model_parallel_size = len(flat) // pp
    counts = stage_decoder_counts(text, pp)
    layout = ParallelLayout(pp=pp, vpp=len(counts[0]) if len(counts[0]) > 1 else None, stage_counts=counts)
    layout = ParallelLayout(**{**_fields(layout), "num_layers": config.num_layers})
    for pp_rank in range(pp):
        for vp in range(len(flat) // pp):
            expected = [n - 1 for n in mg.layer_numbers(config, pp_rank, vp)]
            assert list(stage_blocks(layout, pp_rank, vp)) == expected


def _megatron_unroll(text: str) -> list[str]:
    """Megatron's two re.sub passes (parse_str_to_list), for the test's small layouts only."""
    import re

    text = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)
    return text.split("|")


def _fields(layout: ParallelLayout) -> dict[str, object]:
    return {name: getattr(layout, name) for name in layout.__dataclass_fields__}


def _full(order: str) -> str:
    tokens = order.split("-")
    return "-".join(tokens + [t for t in ("tp", "cp", "ep", "dp", "pp") if t not in tokens])

"""Reading a layout from metadata (names, bounds, notes) and telling replicas apart."""

from __future__ import annotations

import pytest

from fp8_policy.policy.parallel import group_replicas, layout_from_metadata, replica_mismatches
from fp8_policy.policy.parallel.pipeline_layout import LayoutError, stage_decoder_counts


def test_megatron_argument_names_and_transformer_config_names() -> None:
    reading = layout_from_metadata(
        {
            "tensor_model_parallel_size": 8,
            "pipeline_model_parallel_size": 8,
            "world_size": 1024,
            "num_layers": 64,
            "num_layers_in_first_pipeline_stage": 4,
            "expert_model_parallel_size": 1,
        }
    )
    layout = reading.layout
    assert layout is not None and not reading.notes
    assert (layout.tp, layout.pp, layout.dp, layout.first_stage_layers) == (8, 8, 16, 4)
    assert layout.describe() == "TP8 x PP8 x DP16"


def test_nested_parallel_object_and_virtual_stages_from_layers_per_stage() -> None:
    layout = layout_from_metadata(
        {"parallel": {"pp": 4, "num_layers_per_virtual_pipeline_stage": 2, "world_size": 8}, "num_layers": 16}
    ).layout
    assert layout is not None and (layout.pp, layout.vpp, layout.dp) == (4, 2, 2)


def test_no_layout_keys_means_no_layout() -> None:
    assert layout_from_metadata({"num_layers": 12, "gpu": "H100"}).layout is None


@pytest.mark.parametrize(
    ("metadata", "said"),
    [
        ({"pipeline_model_parallel_size": 10**18}, "left out"),
        ({"pipeline_model_parallel_size": 2, "num_layers": 10**18}, "left out"),
        ({"tensor_model_parallel_size": "8"}, "left out"),
        ({"tensor_model_parallel_size": 3, "world_size": 8}, "not a multiple"),
        ({"pipeline_model_parallel_size": 2, "data_parallel_size": 3, "world_size": 8}, "does not match"),
        ({"order": "tp-xx-pp"}, "left out"),
        ({"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "(t)*99999999"}, "left out"),
    ],
)
def test_bad_values_are_left_out_with_a_note(metadata: dict, said: str) -> None:
    reading = layout_from_metadata(metadata, ranks_seen=8)
    assert any(said in note for note in reading.notes)


def test_layout_strings_are_bounded_before_they_are_expanded() -> None:
    with pytest.raises(LayoutError):
        stage_decoder_counts("((t)*9999999|)*9999999", 1)
    with pytest.raises(LayoutError):
        stage_decoder_counts("E" + "|" * 5000, 1)
    assert stage_decoder_counts([["embedding", "decoder"], ["decoder", "loss"]], 2) == ((1,), (1,))


def test_replicas_group_by_whole_rank_digest() -> None:
    assert group_replicas({0: b"a", 1: b"a", 2: b"b", 3: b"a", 4: b"b"}) == {1: 0, 3: 0, 4: 2}


def test_a_minority_replica_is_a_mismatch_and_all_different_is_unreduced() -> None:
    digests = {0: b"a", 1: b"a", 2: b"z", 3: b"a", 4: b"p", 5: b"q", 6: b"r", 7: b"x", 8: b"y"}
    verdict = replica_mismatches([(0, 1, 2, 3), (4, 5, 6), (7, 8)], digests, "dense layers")
    assert [(m.differing, m.agreeing) for m in verdict.mismatches] == [((2,), (0, 1, 3))]
    assert verdict.unreduced == ((4, 5, 6),)
    assert verdict.undecided == ((7, 8),)

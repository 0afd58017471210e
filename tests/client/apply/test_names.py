"""Logged name -> module resolution, checked against nvdlfw_inspect's real naming."""

from __future__ import annotations

import pytest
from torch import nn

from fp8_policy.client.apply.names import NameIndex, UnmatchedLayers, normalize, resolve_names, walk
from tests.client.apply.models import FusedModel, ToyTransformer, Wrapper


def nvdlfw_names(model: nn.Module, tmp_path) -> set[str]:
    """The names the real `infer_and_assign_layer_names` (nvdlfw_inspect 0.2.2) assigns."""
    import nvdlfw_inspect.api as debug_api  # `from ...api import x` trips the module's __getattr__
    from nvdlfw_inspect.logging import initialize_logger

    initialize_logger(str(tmp_path))
    debug_api.infer_and_assign_layer_names(model)
    return {m.name for m in model.modules() if isinstance(getattr(m, "name", None), str)}


@pytest.mark.parametrize(
    "build",
    [
        lambda: ToyTransformer(),  # 1-based layer_number
        lambda: ToyTransformer(numbered=False),  # 0-based index
        lambda: Wrapper(Wrapper(ToyTransformer())),  # Megatron-style model.module.module...
        lambda: FusedModel(),
    ],
    ids=["layer_number", "index", "wrapped", "fused"],
)
def test_walk_names_equal_nvdlfw_inspect_names(build, tmp_path) -> None:
    model = build()
    ours = {entry.name for entry in walk(model) if entry.part is None}
    assert ours == nvdlfw_names(model, tmp_path)


def test_layer_number_names_map_to_zero_based_fqns() -> None:
    index = NameIndex(ToyTransformer())
    found, how = index.resolve("model.layers.1.self_attention.qkv")
    assert (found[0].fqn, how) == ("layers.0.self_attention.qkv", "exact")
    assert index.resolve("model.layers.0.self_attention.qkv") is None  # 1-based: there is no layer 0


@pytest.mark.parametrize(
    ("logged", "wrap"),
    [
        ("model.module.layers.2.mlp.fc1", False),  # logs from a DDP run, unwrapped model
        ("model.layers.2.mlp.fc1", True),  # logs from an unwrapped run, DDP model
        ("model.module.module.layers.2.mlp.fc1", True),
    ],
)
def test_ddp_module_levels_resolve_either_way(logged: str, wrap: bool) -> None:
    inner = ToyTransformer()
    index = NameIndex(Wrapper(inner) if wrap else inner)
    found, how = index.resolve(logged)
    assert found[0].module is inner.layers[1].mlp.fc1
    assert how == "wrapper levels"


def test_exact_wrapped_name_is_exact() -> None:
    inner = ToyTransformer()
    found, how = NameIndex(Wrapper(inner)).resolve("model.module.lm_head")
    assert (found[0].module, how) == (inner.lm_head, "exact")


def test_normalize_keeps_inner_module_attributes() -> None:
    assert normalize("model.module.module.decoder.layers.1.module") == "model.decoder.layers.1.module"
    assert normalize("model._orig_mod.layers.0._checkpoint_wrapped_module.mlp") == "model.layers.0.mlp"


def test_layernorm_mlp_fc1_fc2_map_to_the_fused_module() -> None:
    model = FusedModel()
    index = NameIndex(model)
    for part in ("fc1", "fc2"):
        (entry,), how = index.resolve(f"model.layers.2.layernorm_mlp.{part}")
        assert entry.module is model.layers[1].layernorm_mlp
        assert (entry.part, entry.fqn, how) == (part, "layers.1.layernorm_mlp", "exact")


def test_head_named_output_suggests_lm_head() -> None:
    _resolved, unmatched = resolve_names(NameIndex(ToyTransformer()), ["model.output"])
    assert unmatched[0].suggestions[0] == "model.lm_head"
    assert "`model.output` not found; did you mean `model.lm_head`" in str(UnmatchedLayers(unmatched))


def test_lm_head_suggests_output_for_a_model_whose_head_is_output() -> None:
    _resolved, unmatched = resolve_names(NameIndex(ToyTransformer(head_name="output")), ["model.lm_head"])
    assert unmatched[0].message().startswith("`model.lm_head` not found; did you mean `model.output`")


def test_off_by_one_layer_gets_a_close_suggestion() -> None:
    _resolved, unmatched = resolve_names(NameIndex(ToyTransformer()), ["model.layers.5.mlp.fc2"])
    assert "model.layers.4.mlp.fc2" in unmatched[0].suggestions


def test_layer_number_none_names_every_block_alike(tmp_path) -> None:
    # TE's TransformerLayer stores layer_number=None by default (transformer.py), and nvdlfw then names
    # every block `layers.None`: one logged name for all of them.
    model = ToyTransformer(n_layers=3)
    for block in model.layers:
        block.layer_number = None
    assert "model.layers.None.mlp.fc1" in nvdlfw_names(model, tmp_path)
    found, _ = NameIndex(model).resolve("model.layers.None.mlp.fc1")
    assert [e.fqn for e in found] == ["layers.0.mlp.fc1", "layers.1.mlp.fc1", "layers.2.mlp.fc1"]


def test_list_of_chunks_named_from_the_same_root() -> None:
    first, second = ToyTransformer(n_layers=1), ToyTransformer(n_layers=1)
    found, _ = NameIndex([first, second]).resolve("model.lm_head")
    assert [e.module for e in found] == [first.lm_head, second.lm_head]
    assert [e.chunk for e in found] == [0, 1]

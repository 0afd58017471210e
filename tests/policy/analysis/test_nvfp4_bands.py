"""NVFP4's underflow bands come from the format: a NumPy emulation of TE's NVFP4 cast (policy/nvfp4_emulation.py)
on healthy Gaussian and heavy-tailed tensors. These tests recompute the bands and pin the casts to TE's rules
(transformer_engine/pytorch/custom_recipes/reference_nvfp4.py, debug/features/utils/stats_computation.py)."""

from __future__ import annotations

import numpy as np

from fp8_policy.policy.analysis.formats import NVFP4_WEIGHT_BANDS
from fp8_policy.policy.nvfp4_emulation import cast_e2m1, cast_e4m3, derive_bands, quantize_nvfp4
from fp8_policy.policy.thresholds import Thresholds


def test_the_1d_bands_are_the_ones_the_analysis_uses() -> None:
    bands = derive_bands((1, 16))
    th = Thresholds()
    assert (bands.warning, bands.critical, bands.severe) == (th.nvfp4_warning, th.nvfp4_critical, th.nvfp4_severe)
    assert 6.0 < bands.levels["gaussian"] < 8.0  # several percent of healthy data: FP8's 0.5/2/4 % cannot apply
    assert bands.levels["gaussian"] < bands.levels["student_t4"] < bands.levels["laplace"]


def test_the_16x16_weight_bands_are_recomputed() -> None:
    bands = derive_bands((16, 16))
    assert (bands.warning, bands.critical, bands.severe) == NVFP4_WEIGHT_BANDS
    assert bands.levels["gaussian"] > derive_bands((1, 16)).levels["gaussian"]  # a 256-element tile loses more


def test_e2m1_rounds_with_te_tie_rules() -> None:
    scaled = np.array([0.25, 0.2501, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.001, -0.25, -0.3, 6.0], dtype=np.float32)
    expected = [0.0, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.0, -0.5, 6.0]
    assert cast_e2m1(scaled).tolist() == expected


def test_e4m3_rounds_to_nearest_even_with_subnormals() -> None:
    values = np.array([1.0625, 1.1875, 300.0, 448.0, 2.0**-9, 2.0**-11, 0.0], dtype=np.float32)
    assert cast_e4m3(values).tolist() == [1.0, 1.25, 288.0, 448.0, 2.0**-9, 0.0, 0.0]


def test_underflow_is_a_share_of_all_elements_as_te_counts_it() -> None:
    # one block: amax 6 maps to 6; 0.2 (scaled 0.2 <= 0.25) becomes zero; the 8 zeros stay zeros (not underflows)
    row = np.array([6.0, 0.2, 3.0, 1.0, 2.0, 4.0, 0.5, 1.5] + [0.0] * 8, dtype=np.float32)
    result = quantize_nvfp4(row.reshape(1, 16))
    assert result.underflows_pct == 100.0 * 1 / 16
    assert abs(result.dequantized[0, 0] - 6.0) < 1e-5 and result.dequantized[0, 1] == 0.0


def test_a_block_far_below_the_tensor_amax_is_still_scaled_by_its_own_e4m3_scale() -> None:
    x = np.concatenate([np.full(16, 1000.0), np.linspace(1e-3, 2e-3, 16)]).astype(np.float32).reshape(1, 32)
    result = quantize_nvfp4(x)
    assert result.underflows_pct == 0.0  # 16-element blocks: the small block keeps its values

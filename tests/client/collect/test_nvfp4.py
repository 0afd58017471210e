"""The CPU NVFP4 quantizer: TE's arithmetic worked by hand, and agreement with torchao's independent NVFP4 reference.

E2M1 magnitudes: 0, 0.5, 1, 1.5, 2, 3, 4, 6. With the per-tensor amax A, S_enc = 2688 / A (448 * 6); a block's
decode scale is e4m3(block_amax * S_enc / 6), its elements are multiplied by 1 / (scale / S_enc).
"""

from __future__ import annotations

import pytest
import torch

from fp8_policy.client.collect.nvfp4 import (
    e2m1_codes,
    e2m1_rounded,
    e2m1_values,
    fake_quantize_nvfp4,
    global_encode_scale,
    quantize_nvfp4,
)
from fp8_policy.collect import quantization_stats


def magnitudes(q_codes: torch.Tensor) -> list[float]:
    return e2m1_values(q_codes).abs().flatten().tolist()


class TestRounding:
    def test_ties_round_to_the_even_code_as_tes_cast_to_fp4x2(self) -> None:
        ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
        assert e2m1_values(e2m1_codes(ties)).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]
        assert e2m1_values(e2m1_codes(-ties)).tolist() == [-0.0, -1.0, -1.0, -2.0, -2.0, -4.0, -4.0]

    def test_values_next_to_a_midpoint_round_to_the_nearer_side(self) -> None:
        up = torch.nextafter(torch.tensor([0.25, 2.5, 5.0]), torch.tensor(10.0))
        down = torch.nextafter(torch.tensor([0.75, 3.5]), torch.tensor(0.0))
        assert e2m1_values(e2m1_codes(up)).tolist() == [0.5, 3.0, 6.0]
        assert e2m1_values(e2m1_codes(down)).tolist() == [0.5, 3.0]

    def test_saturates_at_six(self) -> None:
        assert e2m1_values(e2m1_codes(torch.tensor([7.0, 1e30, float("inf"), -9.0]))).tolist() == [6, 6, 6, -6]

    def test_stochastic_rounding_is_unbiased_between_neighbours(self) -> None:
        x = torch.full((200_000,), 2.25)  # between 2 and 3: rounds up with probability 0.25
        values = e2m1_values(e2m1_codes(x, stochastic=True, generator=torch.Generator().manual_seed(0)))
        assert set(values.unique().tolist()) == {2.0, 3.0}
        assert values.mean().item() == pytest.approx(2.25, abs=0.005)


class TestTensorQuantization:
    def test_zeros(self) -> None:
        q = quantize_nvfp4(torch.zeros(4, 32))
        assert q.nonzero() == 0 and q.amax.item() == 0.0 and global_encode_scale(q.amax).item() == 1.0
        assert torch.equal(q.dequantized, torch.zeros(4, 32))
        assert quantization_stats(torch.zeros(4, 32), recipe="nvfp4") == {"underflows%": 0.0, "mse": 0.0}

    def test_an_all_equal_block_is_exact(self) -> None:
        x = torch.full((2, 16), -0.37)
        q = quantize_nvfp4(x)
        assert q.block_scales.float().tolist() == [[448.0], [448.0]]
        assert magnitudes(q.codes) == [6.0] * 32
        torch.testing.assert_close(q.dequantized, x, rtol=2e-7, atol=0.0)  # 6 * 448 * amax / 2688 in float32

    def test_scale_one_block_keeps_the_grid_values_and_rounds_ties_to_even(self) -> None:
        # global amax 2688 -> S_enc = 1; the second block's amax 6 -> decode scale 1, multiplier 1
        grid = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 0.1, 0.3])
        x = torch.cat([torch.full((16,), 2688.0), grid]).reshape(1, 32)
        q = quantize_nvfp4(x)
        assert q.block_scales.float().tolist() == [[448.0, 1.0]]
        assert magnitudes(q.codes)[16:] == [0, 1, 1, 2, 2, 4, 4, 6, 0.5, 1, 1.5, 2, 3, 4, 0, 0.5]

    def test_a_huge_outlier_flushes_its_block_but_not_the_others(self) -> None:
        x = torch.ones(1, 48)
        x[0, 3] = 1e4
        q = quantize_nvfp4(x)
        # block 0: scale 448 for amax 1e4, 1 * 6 / 1e4 -> 0; blocks 1 and 2 keep their ones
        assert q.nonzero() == 1 + 32
        stats = quantization_stats(x, recipe="nvfp4")
        assert stats["underflows%"] == pytest.approx(100 * 15 / 48)

    def test_block_scales_in_the_e4m3_subnormal_range(self) -> None:
        # block amax / global amax = 2^-12 -> decode scale 448 * 2^-12 ~= 0.109 (normal), and 2^-20 -> 4.3e-4,
        # which rounds to the E4M3 subnormal 2^-9 * 0 = 0 ... (2^-9 = 0.00195 is the smallest): it becomes 0
        x = torch.cat([torch.full((16,), 1.0), torch.full((16,), 2.0**-12), torch.full((16,), 2.0**-20)]).reshape(1, 48)
        q = quantize_nvfp4(x)
        scales = q.block_scales.float()[0].tolist()
        assert scales[0] == 448.0 and scales[1] == pytest.approx(448 * 2.0**-12, rel=0.07) and scales[2] == 0.0
        # TE: the zero scale makes the multiplier FLT_MAX, so the third block's elements saturate to 6 (non-zero
        # codes: not counted as underflows) while they dequantize to exactly zero
        assert magnitudes(q.codes)[32:] == [6.0] * 16
        assert torch.equal(q.dequantized[0, 32:], torch.zeros(16))
        assert q.nonzero() == 48

    def test_tiny_tensors_scale_like_any_other_tensor(self) -> None:
        base = torch.randn(8, 32, generator=torch.Generator().manual_seed(3))
        q_base, q_tiny = quantize_nvfp4(base), quantize_nvfp4(base * 2.0**-100)
        assert torch.equal(q_base.codes, q_tiny.codes)

    def test_a_tensor_of_float32_subnormals_flushes_entirely(self) -> None:
        # amax ~ 2^-139: S_enc = 2688 / amax overflows float32 and is capped at FLT_MAX (core_nvfp4.cuh); every
        # block's decode scale, ~2^-140 * FLT_MAX / 6, rounds to E4M3 zero and the multiplier (capped at FLT_MAX)
        # cannot lift 2^-140 off zero either
        x = torch.randn(8, 32, generator=torch.Generator().manual_seed(3)) * 2.0**-140
        q = quantize_nvfp4(x)
        assert (q.block_scales.float() == 0.0).all() and q.nonzero() == 0
        assert quantization_stats(x, recipe="nvfp4")["underflows%"] == 100.0 * int(x.count_nonzero()) / x.numel()

    def test_two_d_tiles_share_one_scale_per_16x16(self) -> None:
        w = torch.ones(32, 32)
        w[0, 0] = 100.0
        q = quantize_nvfp4(w, two_d=True)
        # rows 0-15 of columns 0-15 share the outlier's scale; every other tile keeps its ones
        assert q.block_scales.shape == (32, 2)
        assert (q.block_scales.float()[:16, 0] == 448.0).all() and (q.block_scales.float()[16:, 0] < 448.0).all()
        assert q.nonzero() == 1 + 3 * 256
        rowwise = quantize_nvfp4(w)
        assert rowwise.nonzero() == 1 + 1024 - 16  # 1x16 blocks: only row 0's first block flushes

    def test_shapes_that_are_not_whole_blocks_are_zero_padded(self) -> None:
        x = torch.randn(5, 20, generator=torch.Generator().manual_seed(1))
        q = quantize_nvfp4(x)
        assert q.codes.shape == (5, 20) and q.dequantized.shape == (5, 20)
        assert torch.equal(quantize_nvfp4(x[:, :16]).codes, q.codes[:, :16])


torchao_nvfp4 = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
torchao_kernels = pytest.importorskip("torchao.prototype.mx_formats.kernels")


def torchao_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """torchao's two-level NVFP4 (`nvfp4_quantize` with `per_tensor_amax_to_scale`): scales, E2M1 values, dequant."""
    scale = torchao_nvfp4.per_tensor_amax_to_scale(x.abs().max())
    scales, packed = torchao_nvfp4.nvfp4_quantize(x.contiguous(), block_size=16, per_tensor_scale=scale)
    values = torchao_kernels.f4_unpacked_to_f32(torchao_kernels.unpack_uint4(packed)).reshape(x.shape)
    dequantized = (values.reshape(x.shape[0], -1, 16) * (scales.float() * scale).unsqueeze(-1)).reshape(x.shape)
    return scales.reshape(x.shape[0], -1), values, dequantized


CASES = {
    "gaussian": lambda g: torch.randn(64, 256, generator=g),
    "heavy_tailed": lambda g: torch.randn(64, 256, generator=g) * torch.exp(torch.randn(64, 256, generator=g) * 1.5),
    "tiny_gradients": lambda g: torch.randn(32, 128, generator=g) * 1e-7,
    "outlier_rows": lambda g: (
        torch.randn(32, 128, generator=g) * torch.where(torch.arange(32) % 7 == 0, 300.0, 1.0)[:, None]
    ),
    "all_equal_blocks": lambda g: torch.randn(16, 8, generator=g).repeat_interleave(16, dim=1),
    "midpoint_ties": lambda g: torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 4).reshape(2, 16) * 448.0,
    "outlier_in_every_block": lambda g: (
        torch.randn(16, 64, generator=g) * torch.where(torch.arange(64) % 16 == 5, 1e4, 1.0)
    ),
    "float32_subnormals_beside_normals": lambda g: (
        torch.randn(16, 64, generator=g) * torch.where(torch.arange(64) < 32, 1.0, 1e-39)
    ),
    "signed_zeros_and_ones": lambda g: torch.tensor([0.0, -0.0, 1.0, -1.0] * 8).reshape(2, 16),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_torchao_nvfp4_reference(case: str) -> None:
    x = CASES[case](torch.Generator().manual_seed(7)).float()
    ours = quantize_nvfp4(x)
    scales, values, dequantized = torchao_reference(x)
    # equal block scales, except where TE's is below E4M3's smallest normal 2^-6 and torchao clamps it up to 2^-6
    # (see test_torchao_clamps_tiny_block_scales_where_te_does_not)
    # and the elements of such blocks then differ too (TE's zero scale gives the multiplier FLT_MAX): they are
    # compared in the crafted tests above, everything else must be identical
    ours_scales, tiny = ours.block_scales.float(), ours.block_scales.float() < 2.0**-6
    assert torch.equal(torch.where(tiny, torch.tensor(2.0**-6), ours_scales), scales.float())
    assert bool(tiny.any()) == (case == "float32_subnormals_beside_normals")
    same = ~tiny.repeat_interleave(16, dim=1)
    assert torch.equal(e2m1_values(ours.codes)[same], values[same])
    torch.testing.assert_close(ours.dequantized[same], dequantized[same], rtol=2e-7, atol=0.0)


def test_torchao_clamps_tiny_block_scales_where_te_does_not() -> None:
    # The one documented divergence: torchao clamps a block's scale to E4M3's smallest normal 2^-6 before the
    # cast; TE keeps the (subnormal or zero) E4M3 value. Both agree on the block that is not tiny.
    x = torch.cat([torch.full((16,), 1.0), torch.full((16,), 2.0**-16)]).reshape(1, 32)
    ours = quantize_nvfp4(x)
    scales, _values, _ = torchao_reference(x)
    assert ours.block_scales.float()[0, 0] == scales.float()[0, 0] == 448.0
    assert ours.block_scales.float()[0, 1].item() == pytest.approx(448 * 2.0**-16, rel=0.25)
    assert scales.float()[0, 1].item() == 2.0**-6


@pytest.mark.parametrize("two_d", [False, True])
@pytest.mark.parametrize("family", ["gaussian", "heavy_tailed", "outlier_rows"])
def test_the_analysis_bands_emulation_quantizes_exactly_like_the_collector(family: str, two_d: bool) -> None:
    """policy/ derives NVFP4 bands from its own NumPy emulation (policy/ must not import the client); both must
    give the same E2M1 values and `nvfp4_underflows%`, or the bands would judge numbers the collector does not
    write."""
    np = pytest.importorskip("numpy")
    emulation = pytest.importorskip("fp8_policy.policy.nvfp4_emulation")
    x = CASES[family](torch.Generator().manual_seed(11)).float()
    ours = quantize_nvfp4(x, two_d=two_d)
    theirs = emulation.quantize_nvfp4(x.numpy(), (16, 16) if two_d else (1, 16))
    assert np.array_equal(e2m1_values(ours.codes).numpy(), theirs.fp4)
    expected = quantization_stats(x, recipe="nvfp4", two_d=two_d)["underflows%"]
    assert theirs.underflows_pct == pytest.approx(expected, rel=1e-12)


class TestFakeQuantizeMatchesTheCodes:
    """Training's fast path (`e2m1_rounded`, `fake_quantize_nvfp4`: values without codes) must be bit for bit what
    the codes dequantize to, random draws included."""

    @staticmethod
    def bits(x: torch.Tensor) -> torch.Tensor:
        return x.contiguous().view(torch.int32)

    def test_every_grid_value_midpoint_and_neighbour_rounds_the_same(self) -> None:
        grid = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0])
        around = torch.cat([grid, torch.nextafter(grid, grid + 1), torch.nextafter(grid, grid - 1)])
        values = torch.cat([around, -around, torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])])
        assert torch.equal(self.bits(e2m1_rounded(values)), self.bits(e2m1_values(e2m1_codes(values))))
        stochastic = values.repeat(500)
        ours = e2m1_rounded(stochastic, stochastic=True, generator=torch.Generator().manual_seed(3))
        codes = e2m1_codes(stochastic, stochastic=True, generator=torch.Generator().manual_seed(3))
        assert torch.equal(self.bits(ours), self.bits(e2m1_values(codes)))

    @pytest.mark.parametrize("two_d", [False, True])
    @pytest.mark.parametrize("stochastic", [False, True])
    def test_fake_quantize_is_the_dequantized_tensor(self, two_d: bool, stochastic: bool) -> None:
        torch.manual_seed(7)
        for rows, cols, exponent in ((5, 40, 0), (33, 17, -20), (16, 64, 12), (1, 3, -3)):
            x = torch.randn(rows, cols) * 10.0**exponent
            x[0, 0] = float("nan") if rows > 1 else x[0, 0]
            expected = quantize_nvfp4(
                x, two_d=two_d, stochastic_rounding=stochastic, generator=torch.Generator().manual_seed(rows)
            ).dequantized
            ours = fake_quantize_nvfp4(
                x, two_d=two_d, stochastic_rounding=stochastic, generator=torch.Generator().manual_seed(rows)
            )
            assert ours.shape == x.shape and torch.equal(self.bits(ours), self.bits(expected))

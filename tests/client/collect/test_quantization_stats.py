"""`quantization_stats` against values worked out by hand from TE's definitions (stats_computation.py).

E4M3: max 448, smallest subnormal 2^-9, so |x|*scale <= 2^-10 rounds to zero (a tie rounds to even = 0).
E5M2: max 57344, smallest subnormal 2^-16, zero at <= 2^-17.
"""

from __future__ import annotations

import math

import pytest
import torch

from fp8_policy.client.collect.delayed import DelayedScaler
from fp8_policy.client.collect.fp8 import E4M3, E5M2, float_to_e8m0
from fp8_policy.client.collect.quantizers import quantize_mxfp8
from fp8_policy.collect import QuantSums, parse_stat_name, quantization_stats, quantization_sums


def f32(value: float) -> float:
    """`value` rounded to float32, as TE's fp32 scale arithmetic stores it."""
    return float(torch.tensor(value, dtype=torch.float32))


def above(value: float) -> float:
    """The next float32 above `value`."""
    return float(torch.nextafter(torch.tensor(value, dtype=torch.float32), torch.tensor(math.inf)))


class TestZeros:
    def test_zeros_and_negative_zero_are_not_underflows(self) -> None:
        x = torch.tensor([0.0, -0.0, 1.0, -1.0])

        stats = quantization_stats(x)

        # amax 1 -> scale 448, +-1 -> +-448 exactly; the two zeros count only in the denominator
        assert stats == {
            "underflows%": 0.0,
            "scale_inv_min": f32(1 / f32(448.0)),
            "scale_inv_max": f32(1 / f32(448.0)),
            "mse": 0.0,
        }

    def test_a_value_that_becomes_negative_zero_is_an_underflow(self) -> None:
        # -1e-6 * 448 = -4.5e-4 < 2^-10 -> FP8 byte 0x80 (-0), which TE >= 2.8 counts as zero
        stats = quantization_stats(torch.tensor([-1e-6, 1.0]))

        assert stats["underflows%"] == 50.0

    def test_all_zero_tensor_keeps_scale_one(self) -> None:
        # amax 0 -> compute_scale_from_amax returns scale 1
        assert quantization_stats(torch.zeros(3, 5)) == {
            "underflows%": 0.0,
            "scale_inv_min": 1.0,
            "scale_inv_max": 1.0,
            "mse": 0.0,
        }

    def test_all_zero_tensor_under_mxfp8_has_exponent_zero_everywhere(self) -> None:
        # every block amax 0 -> E8M0 byte 0; TE's nonzero_min finds no non-zero entry and reports 0
        stats = quantization_stats(torch.zeros(2, 64), recipe="mxfp8")

        assert stats == {"underflows%": 0.0, "scale_inv_min": 0.0, "scale_inv_max": 0.0, "mse": 0.0}


class TestRoundHalfToEven:
    def test_e4m3_underflow_edge_at_two_to_the_minus_ten(self) -> None:
        # scale 1 (amax 448): 2^-10 is half the smallest subnormal -> ties to even -> 0; one ulp above -> 2^-9
        x = torch.tensor([448.0, 2.0**-10, above(2.0**-10), -(2.0**-10)])

        stats = quantization_stats(x)

        assert stats["underflows%"] == 50.0
        expected_sq = (2.0**-10) ** 2 + (2.0**-9 - above(2.0**-10)) ** 2 + (2.0**-10) ** 2
        assert stats["mse"] == pytest.approx(expected_sq / 4, rel=1e-6)

    def test_three_halves_of_the_smallest_subnormal_rounds_up_to_the_even_neighbour(self) -> None:
        # 1.5 * 2^-9 lies between 1 and 2 subnormal units: the tie goes to 2 units (even), so no underflow
        stats = quantization_stats(torch.tensor([448.0, 1.5 * 2.0**-9]))

        assert stats["underflows%"] == 0.0
        assert stats["mse"] == pytest.approx((2.0**-8 - 1.5 * 2.0**-9) ** 2 / 2, rel=1e-6)

    def test_e5m2_underflow_edge_at_two_to_the_minus_seventeen(self) -> None:
        x = torch.tensor([57344.0, 2.0**-17, above(2.0**-17), 2.0**-16])

        stats = quantization_stats(x, fp8_format="E5M2")

        assert stats["underflows%"] == 25.0
        assert stats["scale_inv_min"] == stats["scale_inv_max"] == 1.0


class TestSaturation:
    def test_delayed_scaling_saturates_and_counts_overflows(self) -> None:
        # scale_inv 0.5 -> scale 2: 300*2 = 600 -> 448 -> dequantized 224; 100*2 = 200 is a tie between
        # 192 and 208 -> 192 (even mantissa) -> 96. Overflow limit 448 * 0.5 = 224.
        x = torch.tensor([300.0, -300.0, 100.0, 0.0])

        stats = quantization_stats(x, recipe="delayed", scale_inv=0.5)

        assert stats == {
            "underflows%": 0.0,
            "scale_inv_min": 0.5,
            "scale_inv_max": 0.5,
            "mse": (76.0**2 * 2 + 4.0**2) / 4,
            "overflows%": 50.0,
        }

    def test_e5m2_saturates_to_its_max_instead_of_infinity(self) -> None:
        stats = quantization_stats(torch.tensor([1.0e5, 1.0]), fp8_format="E5M2", recipe="delayed", scale_inv=1.0)

        assert stats["overflows%"] == 50.0
        assert stats["mse"] == pytest.approx((1.0e5 - 57344.0) ** 2 / 2)

    def test_current_scaling_cannot_overflow(self) -> None:
        x = torch.tensor([3.0, -2.5, 1.0])

        stats = quantization_stats(x)

        assert stats["scale_inv_min"] == f32(1 / f32(448.0 / 3.0))
        assert "overflows%" not in stats


class TestNonFinite:
    def test_inf_gives_scale_one_and_nan_stays_non_zero(self) -> None:
        # amax is inf -> scale 1; 1e-9 -> 0 (the one underflow); inf -> 448; NaN -> NaN byte (non-zero)
        stats = quantization_stats(torch.tensor([math.nan, 1.0, math.inf, 1e-9]))

        assert stats["underflows%"] == 25.0
        assert (stats["scale_inv_min"], stats["scale_inv_max"]) == (1.0, 1.0)
        assert math.isnan(stats["mse"])

    def test_nan_does_not_enter_the_amax(self) -> None:
        # CUDA's fmaxf skips NaN: amax 2 -> scale 224; 1e-4 * 224 = 0.0224 is a representable subnormal
        stats = quantization_stats(torch.tensor([math.nan, 2.0, 1e-4]))

        assert stats["underflows%"] == 0.0
        assert stats["scale_inv_max"] == f32(1 / f32(224.0))


class TestMxfp8:
    def test_blocks_that_do_not_divide_evenly(self) -> None:
        # Two rows of 40: a full block of 32 and a partial block of 8 each.
        x = torch.zeros(2, 40)
        x[0, :32] = 1.0  # amax 1: 1/448 -> rounded up to 2^-8 -> E8M0 119, multiplier 2^8
        x[0, 1] = 2.0**-19  # * 2^8 = 2^-11 -> 0 (underflow)
        x[0, 2] = 1.5 * 2.0**-17  # * 2^8 = 1.5 * 2^-9 -> tie -> 2^-8 -> dequantized 2^-16
        x[0, 32:] = 1.0  # amax 1000: 1000/448 = 2.23 -> 2^2 -> E8M0 129, multiplier 2^-2
        x[0, 32] = 1000.0  # / 4 = 250 -> 256 (E4M3 step 16) -> dequantized 1024
        x[0, 33] = 1e-3  # / 4 = 2.5e-4 < 2^-10 -> 0 (underflow)
        x[1, 32:] = 2.0**-20  # amax 2^-20: /448 -> 2^-28 -> E8M0 99, exact
        # row 1's first block is all zero -> E8M0 0, which nonzero_min skips

        stats = quantization_stats(x, recipe="mxfp8")

        square_error = (2.0**-19) ** 2 + (2.0**-16 - 1.5 * 2.0**-17) ** 2 + 24.0**2 + 1e-3**2
        assert stats["underflows%"] == 100 * 2 / 80
        assert (stats["scale_inv_min"], stats["scale_inv_max"]) == (99.0, 129.0)
        assert stats["mse"] == pytest.approx(square_error / 80, rel=1e-5)

    def test_a_partial_block_behaves_like_a_zero_padded_one(self) -> None:
        torch.manual_seed(1)
        x = torch.randn(4, 40) * torch.logspace(-9, 2, 40)
        padded = torch.cat([x, torch.zeros(4, 24)], dim=1)

        short, full = quantization_sums(x, recipe="mxfp8"), quantization_sums(padded, recipe="mxfp8")

        assert (short.underflows, short.square_error, short.scale_inv_min, short.scale_inv_max) == (
            full.underflows,
            full.square_error,
            full.scale_inv_min,
            full.scale_inv_max,
        )
        assert (short.numel, full.numel) == (160, 256)

    def test_columnwise_blocks_run_down_the_columns(self) -> None:
        x = torch.ones(32, 2)
        x[:, 1] = 4.0  # column 1's block amax 4: 4/448 -> 2^-6 -> E8M0 121; column 0: 119

        row = quantization_stats(x, recipe="mxfp8")
        col = quantization_stats(x, recipe="mxfp8", columnwise=True)

        assert (col["scale_inv_min"], col["scale_inv_max"]) == (119.0, 121.0)
        assert row["scale_inv_min"] == row["scale_inv_max"] == 121.0  # each row mixes 1 and 4

    def test_e8m0_rounds_the_exponent_up(self) -> None:
        values = torch.tensor([1.0, 1.5, 2.0**-130, 0.0, math.inf, math.nan])
        assert float_to_e8m0(values).tolist() == [127, 128, 0, 0, 254, 255]

    def test_matches_torchao_rceil_bit_for_bit(self) -> None:
        mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
        torch.manual_seed(0)
        for dtype in (torch.float32, torch.bfloat16):
            x = (torch.randn(16, 256) * torch.logspace(-8, 4, 256)).to(dtype)
            scale, data = mx.to_mx(x, torch.float8_e4m3fn, 32, mx.ScaleCalculationMode.RCEIL)
            ours = quantize_mxfp8(x, E4M3)
            assert torch.equal(scale.view(torch.uint8).reshape(-1), ours.scale_inv.reshape(-1))
            assert torch.equal(data.view(torch.uint8), ours.data.view(torch.uint8))


class TestBlockScaling:
    def test_power_of_two_scales_per_128x128_tile_with_partial_edge_tiles(self) -> None:
        x = torch.ones(130, 130)
        x[129, 129] = 100.0  # edge tile (1,1): 448/100 = 4.48 -> 4; 400 ties 384/416 -> 384 -> 96
        # every other tile: amax 1 -> 448 -> rounded down to 256

        stats = quantization_stats(x, recipe="block")

        assert stats == {"underflows%": 0.0, "scale_inv_min": 1 / 256, "scale_inv_max": 0.25, "mse": 16.0 / (130 * 130)}

    def test_one_by_128_tiles(self) -> None:
        x = torch.ones(2, 130)
        x[1, 0] = 2.0**-20  # its tile's amax is 1 -> scale 256 -> 2^-12 -> underflow

        stats = quantization_stats(x, recipe="block", block_dims=1)

        assert stats["underflows%"] == 100 / 260
        assert (stats["scale_inv_min"], stats["scale_inv_max"]) == (1 / 256, 1 / 256)


class TestArguments:
    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"recipe": "delayed"}, "pass scale_inv"),
            ({"recipe": "current", "scale_inv": 1.0}, "only used by delayed"),
            ({"recipe": "current", "columnwise": True}, "columnwise"),
            ({"recipe": "mxfp4"}, "unknown recipe"),
            ({"recipe": "nvfp4", "scale_inv": 1.0}, "no scale_inv"),
            ({"fp8_format": "E3M4"}, "unknown FP8 format"),
            ({"recipe": "delayed", "scale_inv": 0.0}, "positive finite"),
        ],
    )
    def test_bad_arguments_raise_value_error(self, kwargs: dict, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            quantization_stats(torch.ones(4), **kwargs)

    def test_empty_and_integer_tensors_are_refused(self) -> None:
        with pytest.raises(ValueError, match="empty"):
            quantization_stats(torch.ones(0))
        with pytest.raises(ValueError, match="floating-point"):
            quantization_stats(torch.ones(3, dtype=torch.int32))

    def test_bf16_input_is_dequantized_to_bf16_like_te(self) -> None:
        x = torch.tensor([1.0, 3.0, 0.1], dtype=torch.bfloat16)
        stats = quantization_stats(x)
        assert stats["underflows%"] == 0.0 and stats["mse"] >= 0.0


class TestStatNamesAndSums:
    def test_stat_names_follow_logfp8tensorstats(self) -> None:
        assert parse_stat_name("mxfp8_scale_inv_min_columnwise") == parse_stat_name("mxfp8_scale_inv_min_columnwise")
        parsed = parse_stat_name("fp8_block_scaling_underflows%_columnwise")
        assert (parsed.recipe, parsed.base, parsed.columnwise) == ("block", "underflows%", True)
        nvfp4 = parse_stat_name("nvfp4_underflows%")  # LogNvfp4TensorStats' name
        assert (nvfp4.recipe, nvfp4.base, nvfp4.feature) == ("nvfp4", "underflows%", "LogNvfp4TensorStats")
        bad_names = ("fp8_current_scaling_mse_columnwise", "mxfp8_overflows%", "cos", "nvfp4_scale_inv_max")
        for bad in (*bad_names, "nvfp4_mse_columnwise", "mxfp4_underflows%"):
            with pytest.raises(ValueError):
                parse_stat_name(bad)

    def test_feeds_combine_by_summing_numerators(self) -> None:
        a = quantization_sums(torch.tensor([448.0, 2.0**-10]))  # 1 underflow of 2
        b = quantization_sums(torch.tensor([1.0, 1.0, 1.0, 1e-9]))  # 1 underflow of 4, scale 448
        total = QuantSums()
        total.add(a)
        total.add(b)
        assert total.value("underflows%") == 100 * 2 / 6
        assert total.value("scale_inv_min") == f32(1 / f32(448.0))
        assert total.value("scale_inv_max") == 1.0
        assert total.value("mse") == pytest.approx((a.square_error + b.square_error) / 6)


class TestDelayedScaler:
    def test_scale_follows_the_max_of_the_history_with_margin(self) -> None:
        scaler = DelayedScaler(E4M3, history_len=2, margin=1)
        scales = [float(scaler.scale)]
        for amax in (2.0, 8.0, 1.0, 1.0):
            scaler.observe(torch.tensor([amax, -amax / 2]))
            scaler.update()
            scales.append(float(scaler.scale))
        # 448 * 2^-1 = 224 over max(last two amaxes)
        assert scales == [1.0, 112.0, 28.0, 28.0, 224.0]

    def test_zero_or_non_finite_amax_keeps_the_previous_scale(self) -> None:
        scaler = DelayedScaler(E5M2, history_len=1, amax_compute_algo="most_recent")
        scaler.observe(torch.tensor([4.0]))
        scaler.update()
        for x in (torch.zeros(3), torch.tensor([math.inf])):
            scaler.observe(x)
            scaler.update()
            assert float(scaler.scale) == 57344.0 / 4.0

    def test_micro_batches_share_the_step_amax_and_a_step_without_casts_changes_nothing(self) -> None:
        scaler = DelayedScaler(E4M3, history_len=4)
        scaler.observe(torch.tensor([1.0]))
        scaler.observe(torch.tensor([7.0]))
        scaler.update()
        scaler.update()
        assert float(scaler.scale) == 64.0 and list(scaler.history) == [7.0]

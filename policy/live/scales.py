"""How the live detectors read scale_inv values: MXFP8's E8M0 exponent bytes as the powers of two they encode.

Belongs here: `read_scales`, shared by the per-series detectors (policy/live/events.py) and the batched ones
(policy/live/batch.py), so both read a series the same way; which series start as E8M0, linear or undecided is
policy/analysis/format_bands.py's `SeriesBands.scale_form`. Must not be here: the jump rule itself.

Rules (the batch analysis' reading, policy/analysis/formats.py and layer_formats.py, one point at a time):
* MXFP8 logs scale_inv as the E8M0 exponent byte printed as a float (`127.0000` = 1.0; TE
  `pytorch/tensor/mxfp8_tensor.py`): a byte b is the scale 2^(b - 127), so a swing 118 -> 128 is a factor 2^10, not
  the 8 % its printed numbers differ by.
* A series read as E8M0 stays so while its values are bytes (integers in 0..255); its first value that is not one
  makes it linear from there on (the batch reads a series with any such value as linear).
* An undecided series (no format known from its name or the run metadata) is decided by its first finite value
  that is neither 1.0 (delayed scaling's warm-up scale) nor 0 (TE before 2.17 logged MXFP8's scale_inv_min as 0,
  TE #3041): a byte of at least 64 makes it E8M0 from that point (a per-tensor FP8 scale_inv of 64 would mean an
  amax of 28672; layer_formats.is_e8m0), anything else linear.
* Bytes 0 (padding, TE masks it) and 255 (NaN) of an E8M0 series are impossible scales: those points are left out
  of the detectors, as the batch leaves them out of every statistic, as if never logged (read before the detectors'
  "already seen" rule; every point of a piece is read, a re-sent one too, so a series is read alike however its
  points are cut into pieces).
"""

from __future__ import annotations

import numpy as np

from fp8_policy.policy.analysis.format_bands import E8M0, LINEAR, UNDECIDED

E8M0_BIAS = 127
MIN_FIRST_BYTE = 64
_NEVER = np.iinfo(np.int64).max


def read_scales(series: np.ndarray, values: np.ndarray, form: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`series`: per point, the index of its series in `form` (a series' points contiguous, in order); `values`:
    the points as logged; `form`: per series, UNDECIDED / E8M0 / LINEAR before these points (updated in place).
    Returns the values as scales and the mask of the points kept (impossible E8M0 bytes out)."""
    index = np.arange(values.size)
    finite = np.isfinite(values)
    with np.errstate(invalid="ignore"):
        byte = finite & (values == np.round(values)) & (values >= 0) & (values <= 255)
    start = np.where(form == E8M0, -1, _NEVER)  # the first point of each series read as E8M0
    undecided = form == UNDECIDED
    decider = undecided[series] & finite & (values != 1.0) & (values != 0.0)
    first = np.full(form.size, _NEVER)
    np.minimum.at(first, series[decider], index[decider])
    decided = first < _NEVER
    at = np.where(decided, first, 0)
    says_e8m0 = decided & byte[at] & (values[at] >= MIN_FIRST_BYTE) if values.size else decided
    start = np.where(undecided & says_e8m0, first, start)
    after = index >= start[series]
    not_byte = after & finite & ~byte
    stop = np.full(form.size, _NEVER)
    np.minimum.at(stop, series[not_byte], index[not_byte])
    e8m0 = after & (index < stop[series])
    scales = values.copy()
    powers = e8m0 & finite  # NaN / inf stay as logged (the nonfinite event's)
    scales[powers] = np.exp2(values[powers] - E8M0_BIAS)
    keep = ~(e8m0 & ((values == 0.0) | (values == 255.0)))
    form[(stop < _NEVER) | (undecided & decided & ~says_e8m0)] = LINEAR
    form[(start < _NEVER) & (stop == _NEVER)] = E8M0
    return scales, keep

"""policy.live.batch.advance_piece (every series of a piece at once, state as a SeriesTable document) must raise
exactly the events of the per-series detectors (live_events.advance series by series, then rank_divergence, with
the per-series JSON state the service stored before) and leave the same state, on random multi-rank logs cut into
pieces at random byte offsets: band walks, rising trends, scale jumps, NaN/inf, a diverging rank, resumed
sessions that re-send old iterations, names that are no metric."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

from fp8_policy.policy.analysis.format_bands import SeriesBands
from fp8_policy.policy.live.batch import advance_piece
from fp8_policy.policy.live.events import LiveEvent, SeriesState, advance, rank_divergence
from fp8_policy.policy.live.table import KIND_UNDERFLOW, SeriesTable
from fp8_policy.policy.names import split_metric_name
from fp8_policy.policy.parse.stats_log import NoStatsLines, ParsedStats, StatsLogParser
from fp8_policy.policy.records import MetricName
from fp8_policy.policy.thresholds import Thresholds

T = Thresholds()
BANDS = SeriesBands(T)  # each series' bands and scale reading (nvfp4_* with NVFP4's bands, E8M0 bytes decided)
KEY = "__series__"
LAYERS = [f"model.layers.{i}.mlp.fc{j}" for i in range(3) for j in (1, 2)]
STATS = ["underflows%", "scale_inv_min", "scale_inv_max", "overflows%", "nvfp4_underflows%", "mxfp8_scale_inv_max"]
BYTES_LAYER = "model.layers.2.mlp.fc1"  # its bare scale_inv are E8M0 bytes (an MXFP8 layer; read as powers of two)


def _bytes(rng: np.random.Generator, n: int) -> np.ndarray:
    """E8M0 exponent bytes: a walk around 120 with swings of several binades, now and then a 0 or 255 byte."""
    vals = np.clip(120 + np.cumsum(rng.choice([0, 0, 0, 1, -1, 5, -5], size=n)), 70, 160).astype(np.float64)
    vals[rng.random(n) < 0.03] = 0.0
    vals[rng.random(n) < 0.02] = 255.0
    return vals


def _values(rng: np.random.Generator, name: str, n: int, offset: float) -> np.ndarray:
    if "mxfp8_scale_inv" in name or (name.startswith(BYTES_LAYER) and "_scale_inv_" in name):
        return _bytes(rng, n)
    if "nvfp4_underflows" in name:  # NVFP4's bands: 10 / 13 / 19.5 %
        return np.round(_series_values(rng, "underflows%", n, offset) * 4 + 6.0, 4)
    return _series_values(rng, name.rsplit("_", 1)[-1] if "underflows" not in name else "underflows%", n, offset)


def reference_piece(stored: dict, rank: int, parsed: ParsedStats) -> tuple[list[LiveEvent], dict]:
    """What service/live/actions._detect did before: one SeriesState per series, stored as JSON per series."""
    states: dict[tuple[int, MetricName], SeriesState] = {}
    keys: dict[tuple[int, MetricName], str] = {}
    for key, data in stored.items():
        r_text, _tab, name = key.partition("\t")
        metric = split_metric_name(name)
        if metric is not None:
            states[(int(r_text), metric)] = SeriesState.from_dict(data)
            keys[(int(r_text), metric)] = key
    events: list[LiveEvent] = []
    touched: set[MetricName] = set()
    for k, name in enumerate(parsed.names):
        metric = split_metric_name(name)
        if metric is None:
            continue
        its, vals = parsed.series(k)
        state = states.setdefault((rank, metric), SeriesState())
        keys[(rank, metric)] = f"{rank}\t{name}"
        events += advance(state, metric, rank, its, vals, BANDS.of(metric), scale_form=BANDS.scale_form(metric))
        touched.add(metric)
    events += rank_divergence(states, T, touched)
    return events, json.loads(json.dumps({keys[key]: state.to_dict() for key, state in states.items()}))


def _series_values(rng: np.random.Generator, stat: str, n: int, offset: float) -> np.ndarray:
    if stat == "underflows%":
        if rng.random() < 0.3:  # a steady rise: projections
            vals = offset + np.linspace(0, rng.uniform(0.5, 3.0), n) + rng.normal(0, 0.05, n)
        else:  # a walk through the bands
            vals = offset + np.cumsum(rng.normal(0.01, 0.4, n))
        vals = np.round(vals.clip(0, None), 4)
    elif stat.startswith("scale_inv"):
        vals = 10.0 ** rng.choice([-2.0, -2.0, -2.0, -2.5, -4.0, 0.0], size=n)
        vals[rng.random(n) < 0.03] = 0.0
    else:
        vals = np.round(rng.random(n), 4)
    special = rng.random(n)
    vals[special < 0.02] = np.nan
    vals[(special >= 0.02) & (special < 0.03)] = np.inf
    vals[(special >= 0.03) & (special < 0.035)] = -np.inf
    return vals


def _value_text(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.6g}" if value and abs(value) < 1e-3 else f"{value:.4f}"


def random_log(rng: np.random.Generator, rank: int, ranks: int) -> bytes:
    """One rank's statistics log: iterations in steps, a resumed session now and then, one name no metric."""
    names = [f"{layer}_{tensor}_{stat}" for layer in LAYERS for tensor in ("activation", "gradient") for stat in STATS]
    fewer = ("nvfp4_", "mxfp8_")  # the format-specific series: fewer of them, the piece stays small
    names = [n for n in names if rng.random() < (0.3 if any(p in n for p in fewer) else 0.6)] + ["not a metric name"]
    steps = int(rng.integers(20, 90))
    its = np.cumsum(rng.integers(1, 40, size=steps))
    if rng.random() < 0.5:  # resumed from a checkpoint: some iterations come again
        cut = int(rng.integers(1, steps))
        back = int(rng.integers(0, cut))
        its = np.concatenate((its[:cut], its[back:]))
    offset = 2.5 if ranks >= 3 and rank == ranks - 1 and rng.random() < 0.7 else 0.0  # a diverging rank
    lines = []
    values = {name: _values(rng, name, its.size, offset) for name in names}
    for k, it in enumerate(its.tolist()):
        for name in names:
            stamp = "2026-01-15 23:06:40,060"
            lines.append(
                f"{stamp} - INFO - {name} \t\t\t\t iteration={it:06d} \t\t\t\t value={_value_text(values[name][k])}"
            )
    return ("\n".join(lines) + "\n").encode()


def parse(data: bytes) -> ParsedStats | None:
    parser = StatsLogParser(workers=1)
    try:
        parser.feed(io.BytesIO(data), "rank_0/nvdlfw_inspect_statistics_logs/x.log")
    except NoStatsLines:
        return None
    return parser.finish()


def _norm(event: LiveEvent) -> tuple:
    return tuple(
        "nan" if isinstance(v, float) and math.isnan(v) else v
        for v in (event.kind, event.severity, event.layer, event.tensor, event.stat, event.rank, event.iteration,
                  event.value, event.message)
    ) + (repr(sorted(event.detail.items())),)  # fmt: skip


def assert_same_state(table: SeriesTable, stored: dict) -> None:
    assert len(table) == len(stored)
    for row in range(len(table)):
        key = f"{int(table.rank[row])}\t{table.names[int(table.name[row])]}"
        want = SeriesState.from_dict(stored[key]).to_dict()
        got = table.state(row).to_dict()
        if table.kind[row] != KIND_UNDERFLOW:  # a window is kept for underflows% series only (nothing else reads it)
            want["w"] = got["w"] = []
        assert got == want, key


@pytest.mark.parametrize("seed", range(40))
def test_the_batched_detectors_raise_exactly_the_per_series_events(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ranks = int(rng.choice([1, 3, 4]))
    logs = [random_log(rng, rank, ranks) for rank in range(ranks)]
    cuts = [sorted({0, len(log), *rng.integers(0, len(log), size=int(rng.integers(1, 12))).tolist()}) for log in logs]
    order = [rank for rank in range(ranks) for _ in range(len(cuts[rank]) - 1)]
    rng.shuffle(order)
    sent, parsed_to = [0] * ranks, [0] * ranks
    stored: dict = {}  # the reference's state document (per series)
    document: dict = {}  # the batched one
    legacy_at = int(rng.integers(0, len(order) + 1))  # from here on the batch starts from the per-series document
    fired = 0
    for step, rank in enumerate(order):
        piece_end = cuts[rank][cuts[rank].index(sent[rank]) + 1]
        sent[rank] = piece_end
        data = logs[rank][parsed_to[rank] : piece_end]
        whole = data[: data.rfind(b"\n") + 1]
        parsed_to[rank] += len(whole)
        parsed = parse(whole) if whole else None
        if parsed is None:
            continue
        before = stored
        want, stored = reference_piece(before, rank, parsed)
        table = SeriesTable.from_stored(before if step == legacy_at else document, KEY)
        got = advance_piece(table, rank, parsed.names, parsed.offsets, parsed.iterations, parsed.values, T)
        assert [_norm(e) for e in got] == [_norm(e) for e in want]
        fired += len(got)
        document = json.loads(json.dumps({KEY: table.to_document()}))
        assert_same_state(SeriesTable.from_stored(document, KEY), stored)
    assert fired > 0


def test_a_document_reads_back_with_its_names_as_one_string_or_a_list() -> None:
    table = SeriesTable()
    names = [f"{layer}_gradient_underflows%" for layer in LAYERS]
    parsed = parse(random_log(np.random.default_rng(7), 0, 1))
    assert parsed is not None
    advance_piece(table, 0, parsed.names, parsed.offsets, parsed.iterations, parsed.values, T)
    doc = json.loads(json.dumps(table.to_document()))
    listed = {**doc, "names": doc["names"].split("\n")}  # as the first documents of this form were written
    for stored in (doc, listed):
        again = SeriesTable.from_document(stored)
        assert again.names == table.names and set(names) & set(again.names)
        assert [again.state(r).to_dict() for r in range(len(again))] == [
            table.state(r).to_dict() for r in range(len(table))
        ]

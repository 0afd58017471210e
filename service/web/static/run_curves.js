// The run page's Training curves card (#run-curves): loss, grad_norm and lr (then any other scalar the run has:
// param_norm, tokens_per_s, mem_gb) from GET /live/runs/<id>/scalars, which serves the scalars.jsonl an upload
// carried (kept at ingest) and the one a live run streamed (kept at finalize) alike.
//
// The curves share one x axis with the FP8 statistics: iterations (a scalar's `step` is the training iteration
// nvdlfw_inspect logs), over the union of the scalars' steps and the run's logged iterations. The ticks under
// each plot mark where FP8 statistics were logged (the heatmap's columns, heatmap.json?cells=N). Hovering one
// chart moves the cursor on all of them, and the read-out under them links that iteration to the statistics:
// every scalar's value there and, for the heatmap's series (the URL's tensor/stat, else the analysis's focus,
// else gradient underflows%), the worst layer in the heatmap column holding that iteration.
//
// A run without scalars says so in a sentence (and, when its upload had a scalars file that was not kept, why):
// no empty chart is drawn.

import { h, replace } from "./dom.js";
import { api, qs, errorBox } from "./api.js";
import { fmtInt, fmtNum, plural } from "./format.js";
import { card, loading, selectField } from "./widgets.js";
import { lineChart } from "./chart.js";
import { LINE_COLORS, SCALARS } from "./story.js";
import { focusOf } from "./heatmap.js";

const FIRST = ["loss", "grad_norm", "lr"];
const ORDER = [...FIRST, ...SCALARS.filter((k) => !FIRST.includes(k))];
const FP8_CELLS = 400;
const SMOOTHING = [["0", "none"], ["0.6", "0.6"], ["0.9", "0.9"], ["0.99", "0.99"]];

/* state: the run page's hashState (the heatmap's tensor/stat, and this card's `smooth`). */
export function curvesCard(ctx, run, analysisPromise, state) {
  const body = h("div", { id: "run-curves-body" }, loading("Loading the training curves…"));
  const actions = h("span", { id: "run-curves-actions" });
  const el = card("Training curves", { id: "run-curves", actions,
    subtitle: "The run's training scalars on the iteration axis of its FP8 statistics (ticks: iterations with statistics). Hover a curve to read the statistics at that iteration." }, body);
  load(ctx, run, analysisPromise, state, body, actions, el).catch((err) => {
    if (err.name === "AbortError" || !ctx.alive()) return;
    replace(body, errorBox(err, { title: "Training curves unavailable" }));
  });
  return el;
}

async function load(ctx, run, analysisPromise, state, body, actions, el) {
  const data = await api(`/live/runs/${run.id}/scalars`, { signal: ctx.signal });
  const names = ORDER.filter((k) => data.series[k] && data.series[k].steps.length);
  const report = (run.ingest_report || {}).scalars || null;
  el.dataset.records = String(data.records);
  if (!names.length) {
    replace(body, noCurves(report));
    return;
  }
  const fp8 = await fp8Columns(ctx, run, analysisPromise, state);
  if (!ctx.alive()) return;
  const steps = names.flatMap((k) => [data.series[k].steps[0], data.series[k].steps[data.series[k].steps.length - 1]]);
  const domain = [Math.min(...steps, run.iteration_min ?? Infinity), Math.max(...steps, run.iteration_max ?? -Infinity)];
  const grid = h("div", { class: "live-scalars run-curves-grid", id: "run-curves-charts" });
  const readout = h("div", { class: "run-curves-readout small", id: "run-curves-readout", "aria-live": "polite" },
    h("span", { class: "muted" }, "Hover a curve: each scalar and the FP8 statistics at that iteration."));
  const notes = [
    h("span", null, `${plural(data.records, "record")} ${report ? "from the upload's scalars.jsonl" : "streamed while the run was live"}`),
    fp8.columns ? h("span", null, ` · ticks: the ${fmtInt(fp8.columns.first.length)} heatmap columns of ${fp8.tensor} ${fp8.stat}`)
      : h("span", null, ` · ${fp8.problem}`),
    report && report.warning ? h("span", { class: "run-curves-warning" }, ` · ${report.warning}`) : null,
  ];
  replace(body, grid, readout, h("p", { class: "muted small", id: "run-curves-note" }, notes));
  let charts = [];
  const draw = () => {
    const smoothing = Number(state.get("smooth", "0")) || 0;
    const width = Math.max(420, Math.floor(((grid.clientWidth || 900) - 16) / Math.min(3, names.length)));
    charts = names.map((k, i) => {
      const chart = lineChart({
        series: [{ label: k, color: LINE_COLORS[i % LINE_COLORS.length],
          points: data.series[k].steps.map((st, j) => [st, data.series[k].values[j]]) }],
        width, height: 220, xLabel: "iteration", yLabel: k, title: k, smoothing: k === "lr" ? 0 : smoothing,
        xDomain: domain, marks: fp8.columns ? fp8.columns.first : [],
        onHover: (x) => hover(k, x),
      });
      return { name: k, chart };
    });
    replace(grid, charts.map(({ name, chart }) => h("div", { class: "live-scalar", dataset: { scalar: name } }, chart)));
    grid.dataset.scalars = names.join(" ");
  };
  const hover = (from, x) => {
    for (const { name, chart } of charts) if (name !== from) chart.cursorAt(x);
    if (x !== null) replace(readout, readoutAt(x, names, data, fp8, readout));
  };
  replace(actions, selectField("Smoothing", "run-curves-smooth", SMOOTHING, state.get("smooth", "0"), (v) => {
    state.set({ smooth: v === "0" ? "" : v });
    draw();
  }));
  ctx.later(draw, 0); // once in the page: the charts take the card's width
}

function noCurves(report) {
  const how = h("span", null, " Pack a ", h("code", null, "scalars.jsonl"), " (one JSON object per line: ",
    h("code", null, '{"step", "loss", "grad_norm", "lr"}'), ") with the logs: ",
    h("code", null, "fp8-policy upload DIR"), " takes ", h("code", null, "DIR/scalars.jsonl"), " or ",
    h("code", null, "--scalars FILE"), "; a live run streams it with ", h("code", null, "watch --scalars FILE"), ".");
  if (report && report.warning) {
    return h("div", { id: "run-curves-empty" },
      h("div", { class: "alert alert-warning", role: "status" }, h("div", { class: "alert-body" },
        h("strong", { class: "alert-title" }, "The upload's training scalars were not kept"), report.warning)),
      h("p", { class: "muted" }, "No curves are drawn.", how));
  }
  return h("p", { class: "muted", id: "run-curves-empty" }, "This run has no training scalars (loss, grad norm, learning rate), so no curves are drawn.", how);
}

/* The heatmap columns of the series the heatmap shows: {tensor, stat, columns: {first, last, values}, rows}. */
async function fp8Columns(ctx, run, analysisPromise, state) {
  const analysis = await analysisPromise.catch(() => null);
  const focus = focusOf(analysis);
  const wanted = [[state.get("tensor"), state.get("stat")], focus ? [focus.tensor, focus.stat] : [], ["gradient", "underflows%"]]
    .filter(([t, st]) => t && st);
  for (const [tensor, stat] of wanted) {
    try {
      const map = await api(`/runs/${run.id}/heatmap.json${qs({ tensor, stat, cells: FP8_CELLS })}`, { signal: ctx.signal });
      if (map.cells && map.cells.first.length) return { tensor, stat, columns: map.cells, rows: map.rows };
    } catch (err) {
      if (err.name === "AbortError") throw err;
    }
  }
  return { problem: "no FP8 statistics series to mark on the axis" };
}

/* The read-out at iteration x: each scalar at its nearest step, and the worst layer of the FP8 column there. */
function readoutAt(x, names, data, fp8, readout) {
  readout.dataset.iteration = String(x);
  const values = names.map((k) => {
    const { steps, values: vs } = data.series[k];
    let j = 0;
    for (let i = 1; i < steps.length; i += 1) if (Math.abs(steps[i] - x) < Math.abs(steps[j] - x)) j = i;
    return h("span", { class: "run-curves-value", dataset: { scalar: k } }, `${k} `, h("strong", null, fmtNum(vs[j], 4)));
  });
  const parts = [h("strong", null, `iteration ${fmtInt(x)}`), " · ", values.flatMap((v, i) => (i ? [" · ", v] : [v]))];
  if (fp8.columns) {
    const { first, last, values: cells } = fp8.columns;
    let c = first.findIndex((f, i) => f <= x && x <= last[i]);
    if (c < 0) for (let i = 0, best = Infinity; i < first.length; i += 1) {
      const d = Math.min(Math.abs(first[i] - x), Math.abs(last[i] - x));
      if (d < best) [best, c] = [d, i];
    }
    let worst = -1;
    fp8.rows.forEach((row, r) => {
      const v = cells[r][c];
      if (v !== null && v !== undefined && (worst < 0 || v > cells[worst][c])) worst = r;
    });
    const span = first[c] === last[c] ? `iteration ${fmtInt(first[c])}` : `iterations ${fmtInt(first[c])}–${fmtInt(last[c])}`;
    const unit = fp8.stat.includes("%") ? "%" : "";
    Object.assign(readout.dataset, { fp8First: String(first[c]), fp8Last: String(last[c]), worstLayer: worst < 0 ? "" : fp8.rows[worst].layer });
    parts.push(h("div", { class: "run-curves-fp8" }, `FP8 ${fp8.tensor} ${fp8.stat} at ${span}: `, worst < 0
      ? h("span", { class: "muted" }, "no layer logged there")
      : [h("span", null, "worst "), h("span", { class: "mono" }, fp8.rows[worst].layer), " ",
        h("strong", null, `${fmtNum(cells[worst][c], 4)}${unit}`)]));
  }
  return parts;
}

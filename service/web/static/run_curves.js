// The Training curves card (#run-curves) of the run page and of a live run's page (live.js): loss, grad_norm and
// lr (then any other scalar the run has: param_norm, tokens_per_s, mem_gb) from GET /live/runs/<id>/scalars, which
// serves the scalars.jsonl an upload carried (kept at ingest), the one a live run streamed (kept at finalize) and
// what a live run has streamed so far alike. The live page calls refresh() as the pieces arrive.
//
// The curves share one x axis with the FP8 statistics: iterations (a scalar's `step` is the training iteration
// nvdlfw_inspect logs), over the union of the scalars' steps and the run's logged iterations. The ticks under
// each plot mark where FP8 statistics were logged (the heatmap's columns, heatmap.json?cells=N). Hovering one
// chart moves the cursor on all of them, and the read-out under them links that iteration to the statistics:
// every scalar's value there and, for the heatmap's series, the worst layer in the heatmap column holding that
// iteration (and the layer selected, the URL's `layer`, when there is one). The series follows the heatmap: its card
// calls follow() with each selection it loads (tensor, stat, rank, sublayer); until then the URL's tensor/stat, else
// the analysis's focus, else gradient underflows%. A change redraws the ticks and the read-out where it stands.
//
// A run without scalars says so in a sentence (and, when its upload had a scalars file that was not kept, why):
// no empty chart is drawn. Lines of the scalars file left out (not a JSON object with an integer step, a step
// below 0) are counted under the card, on both pages, with the upload's ingest warning when there is one.

import { h, replace } from "./dom.js";
import { api, qs, errorBox } from "./api.js";
import { fmtInt, fmtNum, plural } from "./format.js";
import { card, loading, selectField } from "./widgets.js";
import { lineChart, redrawOnResize } from "./chart.js";
import { LINE_COLORS, SCALARS } from "./story.js";
import { focusOf } from "./heatmap.js";

const FIRST = ["loss", "grad_norm", "lr"];
const ORDER = [...FIRST, ...SCALARS.filter((k) => !FIRST.includes(k))];
const FP8_CELLS = 400;
const SMOOTHING = [["0", "none"], ["0.6", "0.6"], ["0.9", "0.9"], ["0.99", "0.99"]];

const selectionKey = (sel) => (sel ? [sel.tensor, sel.stat, sel.rank || "", sel.sublayer || ""].join("|") : "");

/* state: the page's hashState (the heatmap's tensor/stat/rank/sublayer, the layer picked, this card's `smooth`).
 * analysisPromise: the run's analysis (its focus), or null (a live run). live: the live run's heatmap.json.
 * Returns { el, refresh({ scalars, stats }), follow(selection), reread() }: refresh fetches again what grew (both by
 * default), follow shows another heatmap series, reread writes the read-out again (another layer picked). */
export function curvesCard(ctx, run, state, { analysisPromise = null, live = false } = {}) {
  const body = h("div", { id: "run-curves-body" }, loading("Loading the training curves…"));
  const actions = h("span", { id: "run-curves-actions" });
  const el = card("Training curves", { id: "run-curves", actions,
    subtitle: "The run's training scalars on the iteration axis of its FP8 statistics (ticks: iterations with statistics). Hover a curve to read the statistics at that iteration." }, body);
  const grid = h("div", { class: "live-scalars run-curves-grid", id: "run-curves-charts" });
  const readout = h("div", { class: "run-curves-readout small", id: "run-curves-readout", "aria-live": "polite" },
    h("span", { class: "muted" }, "Hover a curve: each scalar and the FP8 statistics at that iteration."));
  const note = h("p", { class: "muted small", id: "run-curves-note" });
  const skipped = h("div"); // the lines of the scalars file left out, when any were (skippedNote)
  const report = live ? null : (run.ingest_report || {}).scalars || null;
  let data = null; // GET .../scalars
  let fp8 = null; // the heatmap columns of the series followed
  let wanted = null; // the heatmap's selection, once it reported one
  let fp8Token = 0;
  let names = [];
  let charts = [];
  let at = null; // the iteration the read-out is at

  async function loadFp8() {
    const mine = ++fp8Token;
    const got = await fp8Columns(ctx, run, analysisPromise, state, wanted, live);
    if (mine !== fp8Token) return false; // a newer selection is on its way
    fp8 = got;
    return true;
  }

  // The FP8 columns (a heatmap.json) are fetched only for a run with curves to draw: most uploads carry no
  // scalars, and their run page asked the service for a heatmap nothing showed. Before the scalars come, an
  // upload's ingest report saying it kept some lets both requests go at once; otherwise the columns follow them.
  const drawsCurves = () => (data ? curveNames(data).length > 0 : Boolean(report && report.records > 0));

  async function refresh({ scalars = true, stats = true } = {}) {
    try {
      await Promise.all([
        scalars || !data ? api(`/live/runs/${run.id}/scalars`, { signal: ctx.signal }).then((d) => { data = d; }) : null,
        (stats || !fp8) && drawsCurves() ? loadFp8() : null,
      ]);
      if (!fp8 && drawsCurves()) await loadFp8(); // the scalars brought curves the report did not promise
    } catch (err) {
      if (err.name === "AbortError" || !ctx.alive()) return;
      data = null;
      replace(body, errorBox(err, { title: "Training curves unavailable" }));
      return;
    }
    render();
  }

  function render() {
    if (!ctx.alive() || !data) return;
    names = curveNames(data);
    el.dataset.records = String(data.records);
    if (!names.length) {
      replace(body, noCurves(report, live), skipped);
      replace(skipped, skippedNote(data, null)); // an upload's report warning is in noCurves' alert already
      replace(actions);
      return;
    }
    if (!fp8) return; // the columns are on their way (refresh renders again)
    const source = report ? "from the upload's scalars.jsonl" : live ? "streamed so far" : "streamed while the run was live";
    replace(note, h("span", null, `${plural(data.records, "record")} ${source}`),
      fp8.columns ? h("span", null, ` · ticks: the ${fmtInt(fp8.columns.first.length)} heatmap columns of ${seriesName(fp8)}`)
        : h("span", null, ` · ${fp8.problem}`));
    replace(skipped, skippedNote(data, report));
    if (grid.parentNode !== body) replace(body, grid, readout, note, skipped);
    if (!actions.firstChild) {
      replace(actions, selectField("Smoothing", "run-curves-smooth", SMOOTHING, state.get("smooth", "0"), (v) => {
        state.set({ smooth: v === "0" ? "" : v });
        draw();
      }));
    }
    draw();
    reread();
  }

  function draw() {
    const smoothing = Number(state.get("smooth", "0")) || 0;
    // each chart is drawn at its grid column's width, measured once the cells are laid out (never rescaled)
    const cells = names.map((k) => h("div", { class: "live-scalar", dataset: { scalar: k } }));
    replace(grid, cells);
    const ends = names.flatMap((k) => [data.series[k].steps[0], data.series[k].steps[data.series[k].steps.length - 1]]);
    const cols = fp8.columns ? [fp8.columns.first[0], fp8.columns.last[fp8.columns.last.length - 1]] : [];
    const domain = [Math.min(...ends, ...cols, run.iteration_min ?? Infinity), Math.max(...ends, ...cols, run.iteration_max ?? -Infinity)];
    charts = names.map((k, i) => ({ name: k, chart: lineChart({
      series: [{ label: k, color: LINE_COLORS[i % LINE_COLORS.length],
        points: data.series[k].steps.map((st, j) => [st, data.series[k].values[j]]) }],
      width: Math.floor(cells[i].getBoundingClientRect().width) || 420, minWidth: 240, height: 220, xLabel: "iteration", yLabel: k, title: k,
      smoothing: k === "lr" ? 0 : smoothing, xDomain: domain, marks: fp8.columns ? fp8.columns.first : [],
      onHover: (x) => hover(k, x),
    }) }));
    charts.forEach(({ chart }, i) => cells[i].append(chart));
    grid.dataset.scalars = names.join(" ");
  }

  function hover(from, x) {
    for (const { name, chart } of charts) if (name !== from) chart.cursorAt(x);
    if (x === null) return; // the read-out stays at the last iteration hovered
    at = x;
    reread();
  }

  function reread() {
    if (at !== null && data && fp8 && names.length) replace(readout, readoutAt(at, names, data, fp8, state.get("layer"), readout));
  }

  function follow(selection) {
    const same = selectionKey(selection) === selectionKey(fp8 && fp8.columns ? fp8 : wanted);
    wanted = selection;
    if ((same && fp8) || !drawsCurves()) return; // already shown, or no curve to mark (refresh fetches it if one comes)
    loadFp8().then((fresh) => fresh && render()).catch((err) => {
      if (err.name !== "AbortError" && ctx.alive()) replace(body, errorBox(err, { title: "Training curves unavailable" }));
    });
  }

  redrawOnResize(ctx, body, () => {
    if (data && fp8 && names.length && grid.parentNode === body) draw();
  });
  return { el, refresh, follow, reread };
}

/* The scalars of GET .../scalars that have points, in the order the cards are drawn. */
function curveNames(data) {
  return ORDER.filter((k) => data.series[k] && data.series[k].steps.length);
}

function noCurves(report, live) {
  if (live) {
    return h("p", { class: "muted", id: "run-curves-empty" }, "No training scalars received yet, so no curves are drawn. A training job streams them with ",
      h("code", null, "fp8-policy watch --scalars FILE"), " (one JSON object per line: ", h("code", null, '{"step", "loss", "grad_norm", "lr"}'), ").");
  }
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

/* The scalar lines the service left out, counted by GET .../scalars (over the whole file) and, for an upload, by
 * its ingest report, whose warning names them (with samples of the unreadable ones): nothing is dropped silently.
 * null when every line was drawn. */
function skippedNote(data, report) {
  const unreadable = Math.max(data.unreadable_lines || 0, (report && report.unreadable_lines) || 0);
  const negative = Math.max(data.negative_steps || 0, (report && report.negative_steps) || 0);
  if (!unreadable && !negative && !(report && report.warning)) return null;
  const why = [unreadable ? `${fmtInt(unreadable)} not a JSON object with an integer "step"` : null,
    negative ? `${fmtInt(negative)} with a step below 0 (training steps count from 0)` : null].filter(Boolean);
  return h("p", { class: "small run-curves-warning", id: "run-curves-skipped", role: "status",
    dataset: { unreadable: String(unreadable), negative: String(negative) } },
  why.length ? `${plural(unreadable + negative, "scalar line")} skipped, not drawn: ${why.join("; ")}.` : null,
  report && report.warning ? h("span", { class: "muted" }, ` Ingest report: ${report.warning}`) : null);
}

/* "gradient underflows%", with the heatmap's rank and sublayer when it is filtered to one. */
function seriesName(fp8) {
  return `${fp8.tensor} ${fp8.stat}${fp8.rank ? ` (rank ${fp8.rank})` : ""}${fp8.sublayer ? ` (${fp8.sublayer} of each block)` : ""}`;
}

/* The heatmap columns of the series the heatmap shows: {tensor, stat, rank, sublayer, columns: {first, last,
 * values}, rows}: the heatmap's selection (`wanted`), else the URL's, else the analysis's focus, else gradient
 * underflows%; the first that has columns. */
async function fp8Columns(ctx, run, analysisPromise, state, wanted, live) {
  const analysis = analysisPromise ? await analysisPromise.catch(() => null) : null;
  const focus = focusOf(analysis);
  const candidates = [wanted,
    { tensor: state.get("tensor"), stat: state.get("stat"), rank: state.get("rank"), sublayer: state.get("sublayer") },
    focus, { tensor: "gradient", stat: "underflows%" }].filter((c) => c && c.tensor && c.stat);
  for (const { tensor, stat, rank = "", sublayer = "" } of candidates) {
    try {
      const map = await api(`${live ? "/live" : ""}/runs/${run.id}/heatmap.json${qs({ tensor, stat, rank, sublayer, cells: FP8_CELLS })}`, { signal: ctx.signal });
      if (map.cells && map.cells.first.length) return { tensor, stat, rank, sublayer, columns: map.cells, rows: map.rows };
    } catch (err) {
      if (err.name === "AbortError") throw err;
    }
  }
  return { problem: "no FP8 statistics series to mark on the axis" };
}

/* The read-out at iteration x: each scalar at its nearest step, the worst layer of the FP8 column there and the
 * layer picked (`layer`, when the series has it). */
function readoutAt(x, names, data, fp8, layer, readout) {
  readout.dataset.iteration = String(x);
  const values = names.map((k) => {
    const { steps, values: vs } = data.series[k];
    let j = 0;
    for (let i = 1; i < steps.length; i += 1) if (Math.abs(steps[i] - x) < Math.abs(steps[j] - x)) j = i;
    return h("span", { class: "run-curves-value", dataset: { scalar: k } }, `${k} `, h("strong", null, fmtNum(vs[j], 4)));
  });
  const parts = [h("strong", null, `iteration ${fmtInt(x)}`), " · ", values.flatMap((v, i) => (i ? [" · ", v] : [v]))];
  delete readout.dataset.layer;
  if (fp8.columns) {
    const { first, last, values: cells } = fp8.columns;
    let c = first.findIndex((f, i) => f <= x && x <= last[i]);
    if (c < 0) for (let i = 0, best = Infinity; i < first.length; i += 1) {
      const d = Math.min(Math.abs(first[i] - x), Math.abs(last[i] - x));
      if (d < best) [best, c] = [d, i];
    }
    const valueAt = (r) => (fp8.rows[r].kind === "bf16" ? null : cells[r][c] ?? null);
    let worst = -1;
    fp8.rows.forEach((row, r) => {
      const v = valueAt(r);
      if (v !== null && (worst < 0 || v > valueAt(worst))) worst = r;
    });
    const span = first[c] === last[c] ? `iteration ${fmtInt(first[c])}` : `iterations ${fmtInt(first[c])}–${fmtInt(last[c])}`;
    const unit = fp8.stat.includes("%") ? "%" : "";
    Object.assign(readout.dataset, { fp8First: String(first[c]), fp8Last: String(last[c]), worstLayer: worst < 0 ? "" : fp8.rows[worst].layer });
    parts.push(h("div", { class: "run-curves-fp8" }, `FP8 ${seriesName(fp8)} at ${span}: `, worst < 0
      ? h("span", { class: "muted" }, "no layer logged there")
      : [h("span", null, "worst "), h("span", { class: "mono" }, fp8.rows[worst].layer), " ",
        h("strong", null, `${fmtNum(valueAt(worst), 4)}${unit}`)]));
    const picked = layer ? fp8.rows.findIndex((row) => row.layer === layer) : -1;
    if (picked >= 0) {
      const v = valueAt(picked);
      readout.dataset.layer = layer;
      parts.push(h("div", { class: "run-curves-layer" }, "selected layer ", h("span", { class: "mono" }, layer), " ",
        v === null ? h("span", { class: "muted" }, fp8.rows[picked].kind === "bf16" ? "not in FP8 (BF16)" : "not logged there")
          : h("strong", null, `${fmtNum(v, 4)}${unit}`)));
    }
  }
  return parts;
}

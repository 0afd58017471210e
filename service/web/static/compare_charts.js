// The compare page's overlays: one layer's tensor stat (GET /compare/series) and one training scalar such as the
// loss (GET /compare/scalars) of every compared run, one line per run in its colour, on one iteration axis (runs
// align on the iteration number as logged). A run without the metric has no line and the legend says why.
//
// The choice (layer, tensor, stat, scalar, log scale) is kept in the hash, so a link shows the same overlay. Both
// charts take their card's width, and take it again when the window is resized (debounced, as the run page's).

import { h, replace } from "./dom.js";
import { toNum, fmtInt, plural } from "./format.js";
import { api, qs, errorBox } from "./api.js";
import { card, loading, selectField } from "./widgets.js";
import { lineChart, redrawOnResize } from "./chart.js";
import { SCALARS } from "./story.js";
import { runStyle, runKey } from "./compare_colors.js";

/* lineChart series of an overlay answer: runs without values are left out (the legend names them). */
function seriesOf(data) {
  return data.runs.map((run, i) => ({ run, i })).filter(({ run }) => !run.missing).map(({ run, i }) => ({
    label: `#${run.id}${run.name ? ` ${run.name}` : ""}`, ...runStyle(i),
    points: data.iterations.map((it, k) => [it, toNum(run.values[k])]).filter(([, v]) => v !== null),
  }));
}

function legend(data, id) {
  return h("ul", { class: "compare-legend", id, "aria-label": "Runs" }, data.runs.map((run, i) => h("li", {
    class: ["legend-item", run.missing ? "legend-missing" : null], "data-run": String(run.id), "data-missing": run.missing ? "true" : null,
  }, runKey(run, i), h("span", { class: "muted small" }, run.missing ? ` — ${run.missing}` : ` · ${plural(run.points, "point")}`))));
}

/* The frame a card draws its overlay in: show(data, opts) draws it at the frame's width, and again whenever that
 * width changes; anything else put in the frame (loading, an error, a sentence) calls clear() first.
 * load(busyText, failTitle, fill, onFail) is one load of the card: the frame busy and saying busyText while
 * `await fill()` runs, and on failure (an abort is passed on) onFail() then an error box titled failTitle. */
function chartFrame(ctx, id) {
  const frame = h("div", { class: "compare-chart", id, "aria-busy": "true" });
  let draw = null;
  redrawOnResize(ctx, frame, () => draw && draw());
  const chart = {
    frame,
    show(data, opts) {
      draw = () => replace(frame, lineChart({ series: seriesOf(data), width: Math.max(420, (frame.clientWidth || 900) - 4), height: 320, ...opts }));
      draw();
    },
    clear() {
      draw = null;
    },
    async load(busyText, failTitle, fill, onFail = () => {}) {
      chart.clear();
      frame.setAttribute("aria-busy", "true");
      replace(frame, loading(busyText));
      try {
        await fill();
      } catch (err) {
        if (err.name === "AbortError") throw err;
        onFail();
        replace(frame, errorBox(err, { title: failTitle }));
      } finally {
        frame.setAttribute("aria-busy", "false");
      }
    },
  };
  return chart;
}

/* Card #compare-overlay: pick a layer, tensor and stat; one line per run. */
export function overlayCard(ctx, cmp, ids, state, sync) {
  const runsOf = new Map(cmp.layers.map((row) => [row.name, row.cells.filter(Boolean).length]));
  const names = cmp.layers.map((row) => row.name);
  const focus = cmp.focus || {};
  state.layer = names.includes(state.layer) ? state.layer : focus.layer || names[0] || "";
  const tensors = [...new Set(cmp.metrics.map((m) => m.tensor))];
  state.tensor = tensors.includes(state.tensor) ? state.tensor : focus.tensor || tensors[0] || "gradient";
  const statsOf = (tensor) => cmp.metrics.filter((m) => m.tensor === tensor).map((m) => m.stat);
  const pickStat = () => {
    const stats = statsOf(state.tensor);
    if (!stats.includes(state.stat)) state.stat = stats.includes(focus.stat) ? focus.stat : stats.includes("underflows%") ? "underflows%" : stats[0];
  };
  pickStat();
  const chart = chartFrame(ctx, "overlay-chart");
  const { frame } = chart;
  const keys = h("div", { id: "overlay-legend-box" });
  const note = h("p", { class: "muted small", id: "overlay-note" });
  const statField = h("span");
  const n = ids.length;
  const layerOptions = names.map((name) => [name, runsOf.get(name) === n ? name : `${name} (${runsOf.get(name)} of ${n} runs)`]);

  function renderStatField() {
    replace(statField, selectField("Stat", "overlay-stat", statsOf(state.tensor).map((st) => [st, st]), state.stat, (v) => {
      state.stat = v;
      load();
    }));
  }

  async function load() {
    sync();
    return chart.load("Loading series…", "No series to overlay", async () => {
      const data = await api(`/compare/series${qs({ runs: ids.join(","), layer: state.layer, tensor: state.tensor, stat: state.stat })}`, { signal: ctx.signal });
      replace(keys, legend(data, "overlay-legend"));
      note.textContent = data.grouped > 1 ? `Each point is the mean of up to ${fmtInt(data.grouped)} consecutive iterations.` : "";
      chart.show(data, {
        xLabel: "iteration", yLabel: `${state.tensor} ${state.stat}`, unit: state.stat.endsWith("%") ? "%" : "", log: state.log,
        title: `${state.tensor} ${state.stat} of ${state.layer}, one line per run`,
      });
    }, () => replace(keys));
  }

  renderStatField();
  ctx.later(() => load().catch(() => {}), 0); // once in the page: the chart takes the card's width
  return card("Overlay", {
    id: "compare-overlay",
    subtitle: "One layer's statistic in every run (max over ranks per iteration), aligned on the iteration number.",
  },
  h("div", { class: "controls" },
    selectField("Layer", "overlay-layer", layerOptions, state.layer, (v) => {
      state.layer = v;
      load();
    }),
    selectField("Tensor", "overlay-tensor", tensors.map((t) => [t, t]), state.tensor, (v) => {
      state.tensor = v;
      pickStat();
      renderStatField();
      load();
    }),
    statField,
    h("div", { class: "field field-check" },
      h("input", { type: "checkbox", id: "overlay-log", checked: state.log, onchange: (e) => { state.log = e.target.checked; load(); } }),
      h("label", { for: "overlay-log" }, "Log scale"))),
  keys, frame, note);
}

/* Card #compare-loss: a training scalar of every run, or an honest "no loss recorded". */
export function scalarCard(ctx, ids, state, sync) {
  const chart = chartFrame(ctx, "loss-chart");
  const { frame } = chart;
  const keys = h("div", { id: "loss-legend-box" });
  const picker = h("span");
  if (!SCALARS.includes(state.scalar)) state.scalar = "loss";

  async function load() {
    sync();
    return chart.load("Loading training scalars…", "Training scalars unavailable", async () => {
      const data = await api(`/compare/scalars${qs({ runs: ids.join(","), name: state.scalar })}`, { signal: ctx.signal });
      const recorded = new Set(data.runs.flatMap((r) => r.recorded));
      replace(picker, recorded.size ? selectField("Scalar", "loss-name", SCALARS.filter((k) => recorded.has(k) || k === state.scalar).map((k) => [k, k]),
        state.scalar, (v) => {
          state.scalar = v;
          load();
        }) : null);
      replace(keys, legend(data, "loss-legend"));
      if (data.runs.every((r) => r.missing)) {
        replace(frame, h("p", { class: "muted empty-note", id: "compare-loss-none" }, recorded.size
          ? `No ${state.scalar} recorded in any of these runs.`
          : "No loss recorded: none of these runs kept training scalars (a run streamed with fp8-policy watch --scalars FILE keeps"
            + " them, and so does an upload carrying scalars.jsonl: fp8-policy upload DIR --scalars FILE)."));
        replace(keys);
        return;
      }
      chart.show(data, { xLabel: "step", yLabel: state.scalar, title: `${state.scalar}, one line per run` });
    });
  }

  ctx.later(() => load().catch(() => {}), 0);
  return card("Training curves", {
    id: "compare-loss",
    subtitle: "The training scalars each run recorded (loss by default), aligned on the step.",
  }, h("div", { class: "controls" }, picker), keys, frame);
}

// Live run page (#/runs/<id> while the run's status is `live`): the heatmap growing as the training job's
// statistics arrive, scale factors (scale_inv_min / _max) per layer over the iterations, the training curves
// (run_curves.js, the finished run's card: loss, grad_norm, ... on the statistics' iterations, its read-out following
// the heatmap's tensor and stat), a timeline of early-warning events and the alerts sent for them, and the run's
// notes and tags (notes.js: editable while it trains, as on the finished run's page).
//
// Polling (every POLL_MS): GET /live/runs/<id>?after=<last event id> gives the status, the received file sizes and
// the new events; the heatmap, scale and curves cards are fetched again only when a file they read has grown
// (the server answers an unchanged live heatmap from memory anyway), the timeline's page when new events came.
// The timeline pages through every event (story.js). When the run leaves `live` (finalized) the page re-routes
// to the normal run page, which keeps the scalars and the timeline (story.js's card).
//
// The selects are kept in the URL hash (as on the other pages; defaults left out): tensor, stat (heatmap: the
// run page's keys, so the finalized run's heatmap opens on the same selection), scale_tensor, scale_stat.

import { h, replace, $ } from "./dom.js";
import { api, qs, errorBox, ApiError } from "./api.js";
import { fmtInt, fmtBytes, fmtDate, fmtNum, fmtTime, plural, runLabel } from "./format.js";
import { statusBadge, figure, card, selectField, chip } from "./widgets.js";
import { route, setTitle } from "./router.js";
import { colorAt, sizedCanvas } from "./heatmap_draw.js";
import { lineChart } from "./chart.js";
import { TENSORS } from "./constants.js";
import { LINE_COLORS, eventTimeline } from "./story.js";
import { notesCard } from "./notes.js";
import { curvesCard } from "./run_curves.js";

const POLL_MS = 2000;
const CELLS = 400; // heatmap columns asked for (the server averages more iterations into them)
const SCALE_CELLS = 200;
const HEATMAP_STATS = ["underflows%", "overflows%", "scale_inv_min", "scale_inv_max", "mse"];
const SCALE_STATS = ["scale_inv_min", "scale_inv_max"];

function cssVar(name, fallback) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}

/* A selection read from the URL hash: the value under `key` when it is one of `allowed`, else `fallback`. */
const fromHash = (state, key, allowed, fallback) => (allowed.includes(state.get(key)) ? state.get(key) : fallback);
/* Keep a selection in the URL hash; its default is left out, as the run page does. */
const toHash = (state, key, value, fallback) => state.set({ [key]: value === fallback ? "" : value });

const statsSignature = (files) => files.filter((f) => f.kind !== "scalars").map((f) => `${f.path}:${f.size}`).join("|");
const scalarsSize = (files) => (files.find((f) => f.kind === "scalars") || { size: 0 }).size;

/* state: the run page's hashState (run.js), which keeps this page's selects. */
export async function liveView(ctx, run, state) {
  const view = $("#view");
  setTitle(`${runLabel(run)} (live)`);
  const updated = h("span", { class: "muted small live-updated", id: "live-updated", "aria-live": "polite" }, "connecting…");
  const figures = h("div", { class: "figures", id: "live-figures" });
  const curves = curvesCard(ctx, run, state, { live: true });
  const heat = heatmapPanel(ctx, run, state, curves.follow);
  const scale = scalePanel(ctx, run, state);
  const timeline = timelinePanel(ctx, run);
  replace(view,
    h("div", { class: "page-head" },
      h("div", null,
        h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/runs" }, "Runs"), " / ",
          h("a", { href: `#/runs?project=${encodeURIComponent(run.project)}` }, run.project)),
        h("h1", null, h("bdi", { class: "run-label" }, runLabel(run)), " ", h("span", { class: "muted run-id" }, `#${run.id}`)),
        h("div", { class: "run-meta" }, statusBadge(run.status),
          h("span", { class: "run-tags", id: "run-head-tags" }, run.tags.map((t) => chip(t, `#/runs${qs({ tag: t })}`))),
          h("span", { class: "muted small", title: run.created_at }, `started ${fmtDate(run.created_at)}`), " · ", updated))),
    h("div", { class: "alert alert-info", role: "status" }, h("span", { class: "live-dot", "aria-hidden": "true" }),
      " Training in progress: this page follows the statistics as they arrive. The analysis and the recommendation come once the run is finalized."),
    figures, notesCard(ctx, run), heat.card, curves.el, scale.card, timeline.card);

  let after = 0;
  let timelineLoaded = false;
  let lastStats = null;
  let lastScalars = -1;
  async function poll() {
    try {
      const live = await api(`/live/runs/${run.id}?after=${after}`, { signal: ctx.signal });
      if (live.status !== "live") {
        route(); // finalized: the normal run page (queued → ready) takes over
        return;
      }
      if (live.events.length || !timelineLoaded) {
        if (live.events.length) after = live.events[live.events.length - 1].id;
        await timeline.refresh(); // the page shown, with the new total
        timelineLoaded = true;
      }
      const signature = statsSignature(live.files);
      const grown = signature !== lastStats;
      const size = scalarsSize(live.files);
      const more = size !== lastScalars;
      [lastStats, lastScalars] = [signature, size];
      await Promise.all([grown ? heat.load() : null, grown ? scale.load() : null,
        grown || more ? curves.refresh({ scalars: more, stats: grown }) : null]);
      await timeline.loadAlerts();
      showFigures(live);
      updated.textContent = `updated ${fmtTime()}`;
    } catch (err) {
      if (err.name === "AbortError" || !ctx.alive()) return;
      updated.textContent = `update failed (${err instanceof ApiError ? err.error : err.message}); retrying`;
    }
    ctx.later(poll, POLL_MS);
  }

  function showFigures(live) {
    const stats = live.files.filter((f) => f.kind === "stats");
    const ranks = new Set(stats.map((f) => (/rank_(\d+)/.exec(f.path) || [])[1]).filter(Boolean));
    const its = heat.iterations();
    replace(figures,
      figure("Ranks", fmtInt(ranks.size || stats.length)),
      figure("Received", fmtBytes(live.files.reduce((n, f) => n + f.size, 0)), plural(live.files.length, "file")),
      figure("Iterations", its ? `${fmtInt(its.first)}–${fmtInt(its.last)}` : "—", its ? `${fmtInt(its.count)} logged` : null),
      figure("Events", fmtInt(timeline.total())));
  }

  await poll();
}

/* The growing heatmap: heatmap.json of the live run, drawn on a canvas (rows × iteration columns).
 * onSeries({tensor, stat}): another series picked (the curves' read-out follows it). */
function heatmapPanel(ctx, run, state, onSeries) {
  const canvas = h("canvas", { id: "live-heatmap", class: "heatmap-canvas", role: "img", "aria-label": "Live heatmap" });
  const status = h("div", { class: "heatmap-status" });
  const note = h("p", { class: "muted small", id: "live-heatmap-note" });
  const frame = h("div", { class: "heatmap-frame" }, canvas, status);
  const view = { tensor: fromHash(state, "tensor", TENSORS, "gradient"), stat: fromHash(state, "stat", HEATMAP_STATS, "underflows%") };
  let data = null;
  const tensorSelect = selectField("Tensor", "live-heatmap-tensor", TENSORS.map((t) => [t, t]), view.tensor, (v) => {
    view.tensor = v;
    toHash(state, "tensor", v, "gradient");
    onSeries({ ...view });
    load();
  });
  const statSelect = selectField("Stat", "live-heatmap-stat", HEATMAP_STATS.map((x) => [x, x]), view.stat, (v) => {
    view.stat = v;
    toHash(state, "stat", v, "underflows%");
    onSeries({ ...view });
    load();
  });
  const el = card("Heatmap so far", { id: "live-heatmap-card", actions: [tensorSelect, statSelect],
    subtitle: "Each layer's value at each logged iteration, maximum over ranks; it grows as the job logs." }, frame, note);

  async function load() {
    try {
      const query = new URLSearchParams({ tensor: view.tensor, stat: view.stat, cells: String(CELLS) });
      data = await api(`/live/runs/${run.id}/heatmap.json?${query}`, { signal: ctx.signal });
      status.replaceChildren();
      draw();
    } catch (err) {
      if (err.name === "AbortError") throw err;
      data = null;
      canvas.hidden = true;
      replace(status, err instanceof ApiError && err.error === "NoData"
        ? h("p", { class: "muted" }, `Waiting for ${view.tensor} ${view.stat} statistics…`)
        : errorBox(err, { title: "Heatmap unavailable" }));
    }
  }

  function draw() {
    const rows = data.rows;
    const cells = data.cells;
    const ncol = cells.first.length;
    const width = Math.max(480, frame.clientWidth - 18);
    const rowH = rows.length > 120 ? 4 : rows.length > 60 ? 8 : 14;
    const g0 = canvas.getContext("2d");
    g0.font = "11px ui-monospace, monospace";
    const left = Math.min(260, Math.max(40, ...rows.map((r) => g0.measureText(r.label).width))) + 10;
    const legend = 90;
    const top = 6;
    const plotW = width - left - legend;
    const plotH = rows.length * rowH;
    const height = plotH + top + 36;
    canvas.hidden = false;
    const g = sizedCanvas(canvas, width, height);
    const noData = cssVar("--no-data", "#e8eaed");
    const text = cssVar("--text", "#1d232b");
    const muted = cssVar("--muted", "#5d6773");
    const cw = plotW / Math.max(1, ncol);
    rows.forEach((row, r) => {
      const y = top + r * rowH;
      const values = cells.values[r];
      for (let c = 0; c < ncol; c += 1) {
        const v = values[c];
        g.fillStyle = v === null ? noData : colorAt(data.colormap, data.vmax, v);
        g.fillRect(left + c * cw, y, Math.ceil(cw + 0.5), rowH);
      }
      if (rowH >= 12 || r % Math.ceil(12 / rowH) === 0) {
        g.fillStyle = text;
        g.font = `${Math.min(11, Math.max(8, rowH - 2))}px ui-monospace, monospace`;
        g.textAlign = "right";
        g.textBaseline = "middle";
        g.fillText(row.label, left - 6, y + rowH / 2, left - 8);
      }
    });
    g.fillStyle = muted;
    g.font = "11px system-ui, sans-serif";
    g.textBaseline = "top";
    g.textAlign = "left";
    g.fillText(fmtInt(cells.first[0]), left, top + plotH + 4);
    g.textAlign = "right";
    g.fillText(fmtInt(cells.last[ncol - 1]), left + plotW, top + plotH + 4);
    g.textAlign = "center";
    g.fillText("iteration", left + plotW / 2, top + plotH + 18);
    const barH = Math.max(40, Math.min(160, plotH));
    for (let k = 0; k < barH; k += 1) {
      g.fillStyle = colorAt(data.colormap, data.vmax, data.vmax * (1 - k / barH));
      g.fillRect(left + plotW + 14, top + k, 12, 1);
    }
    g.fillStyle = muted;
    g.textAlign = "left";
    g.textBaseline = "middle";
    const unit = data.stat.includes("%") ? "%" : "";
    g.fillText(`${fmtNum(data.vmax)}${unit}`, left + plotW + 30, top + 5);
    g.fillText(`0${unit}`, left + plotW + 30, top + barH - 5);
    Object.assign(canvas.dataset, { rows: String(rows.length), columns: String(ncol),
      iterations: String(data.iterations.count), lastIteration: String(data.iterations.last) });
    const s = data.summary;
    note.textContent = `${plural(rows.length, "row")} × ${fmtInt(data.iterations.count)} logged iterations ` +
      `(${fmtInt(data.iterations.first)}–${fmtInt(data.iterations.last)}), ranks ${data.ranks.join(", ")}; ` +
      `max ${fmtNum(s.max)}${unit}` + (s.critical !== null ? `, ${plural(s.critical, "row")} at or above critical` : "") + ".";
  }

  return { card: el, load, iterations: () => (data ? data.iterations : null) };
}

/* Scale factors per layer over the iterations: scale_inv_min (or _max) of one tensor, one line per layer. */
function scalePanel(ctx, run, state) {
  const view = {
    tensor: fromHash(state, "scale_tensor", TENSORS, "activation"),
    stat: fromHash(state, "scale_stat", SCALE_STATS, "scale_inv_min"),
  };
  const body = h("div", { id: "live-scale" });
  const controls = [
    selectField("Tensor", "live-scale-tensor", TENSORS.map((t) => [t, t]), view.tensor, (v) => {
      view.tensor = v;
      toHash(state, "scale_tensor", v, "activation");
      load();
    }),
    selectField("Stat", "live-scale-stat", SCALE_STATS.map((x) => [x, x]), view.stat, (v) => {
      view.stat = v;
      toHash(state, "scale_stat", v, "scale_inv_min");
      load();
    }),
  ];
  const el = card("Scale factors", { id: "live-scale-card", actions: controls,
    subtitle: "Per layer over the iterations (log scale): a sudden drop warns of an overflow, a sudden rise of underflow." }, body);

  async function load() {
    try {
      const query = new URLSearchParams({ tensor: view.tensor, stat: view.stat, cells: String(SCALE_CELLS) });
      const data = await api(`/live/runs/${run.id}/heatmap.json?${query}`, { signal: ctx.signal });
      const series = data.rows.map((row, r) => ({ row, r })).filter(({ row }) => row.kind !== "bf16").map(({ row, r }, k) => ({
        label: row.layer,
        color: LINE_COLORS[k % LINE_COLORS.length],
        points: data.cells.first.map((it, c) => [it, data.cells.values[r][c] ?? NaN]),
      }));
      replace(body, lineChart({ series, width: Math.max(480, body.clientWidth || 900), height: 260, xLabel: "iteration",
        yLabel: `${view.tensor} ${view.stat}`, title: `${view.tensor} ${view.stat} per layer`, log: true }));
      body.dataset.series = String(series.length);
    } catch (err) {
      if (err.name === "AbortError") throw err;
      replace(body, err instanceof ApiError && err.error === "NoData"
        ? h("p", { class: "muted" }, `No ${view.tensor} ${view.stat} statistics yet.`)
        : errorBox(err, { title: "Scale factors unavailable" }));
    }
  }
  return { card: el, load };
}

/* Events (early warnings) and the alert deliveries for this run, newest first, a page at a time (story.js). */
function timelinePanel(ctx, run) {
  const timeline = eventTimeline(ctx, run, { id: "live-timeline" });
  const el = card("Events and alerts", { id: "live-timeline-card",
    subtitle: "Early warnings raised by the received lines (one per layer and kind of each received piece), and the webhook alerts sent for them." },
  timeline.el);
  return { ...timeline, card: el };
}

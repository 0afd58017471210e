// Run page: the interactive heatmap card, drawn on a canvas from heatmap.json?cells=N (rows × iteration columns,
// the image's colour map and boxed rows); hover reads a cell, a click on a row opens that layer's chart. The
// server-rendered PNG / SVG stay one click away for export. Tensor / stat / rank / sublayer are in the URL.
// Belongs here: the card (controls, loading, the notes under it, tip, keyboard and mouse); the picture itself is
// heatmap_draw.js.

import { TENSORS } from "./constants.js";
import { onThemeChange } from "./colors.js";
import { h, replace } from "./dom.js";
import { API, api, qs, errorBox } from "./api.js";
import { fmtInt, fmtNum, plural } from "./format.js";
import { card, selectField, loading } from "./widgets.js";
import { RUNG, SKIP, drawHeatmap, rungMark } from "./heatmap_draw.js";
import { precisionWord } from "./precision.js";

/* The series the run page opens the heatmap on: the worst finding's tensor and stat (the analysis's `focus`, or
 * the first evidence of the worst finding that names a tensor; findings come worst first), so the map shows the
 * problem the badge announces. null: nothing found (the heatmap then opens on gradient underflows%). */
export function focusOf(analysis) {
  if (!analysis) return null;
  if (analysis.focus && analysis.focus.tensor && analysis.focus.stat) return { tensor: analysis.focus.tensor, stat: analysis.focus.stat };
  for (const f of analysis.findings || []) {
    if (f.severity === "ok") continue;
    const e = (f.evidence || []).find((x) => TENSORS.includes(x.tensor) && x.stat);
    if (e) return { tensor: e.tensor, stat: e.recipe ? `${e.recipe}_${e.stat}` : e.stat, plainStat: e.stat };
  }
  return null;
}

/* onLayer(layer): a row was picked; onSeries({tensor, stat, rank, sublayer}): the series each load shows (the
 * training curves' read-out follows it). */
export function heatmapCard(ctx, run, analysis, layersInfo, state, onLayer, onSeries = null) {
  const statsByTensor = new Map();
  for (const layer of layersInfo || []) {
    for (const st of layer.stats || []) {
      if (!statsByTensor.has(st.tensor)) statsByTensor.set(st.tensor, new Set());
      statsByTensor.get(st.tensor).add(st.stat);
    }
  }
  const tensors = statsByTensor.size ? TENSORS.filter((t) => statsByTensor.has(t)) : TENSORS;
  const sublayers = [...new Set((analysis ? analysis.layers : layersInfo || []).map((l) => l.sublayer).filter(Boolean))];
  const thresholds = analysis ? analysis.thresholds : null;
  const focus = focusOf(analysis);
  const defaultTensor = focus && tensors.includes(focus.tensor) ? focus.tensor : tensors.includes("gradient") ? "gradient" : tensors[0];
  const focusStats = statsByTensor.get(defaultTensor);
  const defaultStat = !focus || focus.tensor !== defaultTensor ? "underflows%"
    : !focusStats || focusStats.has(focus.stat) ? focus.stat : focusStats.has(focus.plainStat) ? focus.plainStat : "underflows%";
  const view = {
    tensor: tensors.includes(state.get("tensor")) ? state.get("tensor") : defaultTensor,
    stat: state.get("stat", defaultStat),
    rank: state.get("rank"),
    sublayer: sublayers.includes(state.get("sublayer")) ? state.get("sublayer") : "",
  };
  if (view.rank !== "" && !(Number(view.rank) >= 0 && Number(view.rank) < run.ranks)) view.rank = "";

  const canvas = h("canvas", {
    id: "heatmap-canvas", class: "heatmap-canvas", role: "img", tabindex: "0",
    "aria-label": "Heatmap: hover a cell for its value, click a row to plot it; with the keyboard, ArrowUp/ArrowDown pick a row, Enter plots it",
  });
  const tip = h("div", { class: "heatmap-tip", hidden: true });
  const status = h("div", { class: "heatmap-status" });
  const frame = h("div", { class: "heatmap-frame heatmap-live", "aria-busy": "true" }, canvas, tip, status);
  const aggregation = h("p", { class: "muted small heatmap-aggregation", id: "heatmap-aggregation" });
  const boxesNote = h("p", { class: "muted small heatmap-boxes", id: "heatmap-boxes" });
  // The green marks right of the rows (drawn in draw()) are explained here, next to the boxes.
  const marksNote = h("p", { class: "muted small heatmap-marks", id: "heatmap-marks", hidden: true },
    h("span", { class: "mark-swatch mark-skip", style: { background: SKIP, borderColor: SKIP }, "aria-hidden": "true" }),
    " right of a row: the recommendation keeps that layer in BF16 (its label is green too); ",
    h("span", { class: "mark-swatch", style: { borderColor: SKIP }, "aria-hidden": "true" }),
    " outlined: single GEMMs of that layer in BF16 (a GEMM override); ",
    h("span", { class: "mark-swatch", style: { background: RUNG.nvfp4, borderColor: RUNG.nvfp4 }, "aria-hidden": "true" }), " / ",
    h("span", { class: "mark-swatch", style: { background: RUNG.mxfp8, borderColor: RUNG.mxfp8 }, "aria-hidden": "true" }),
    " further right: the layer runs at another precision than the recipe, FP4 / FP8 (the precision ladder; hover the row).");
  const openPng = h("a", { class: "btn btn-small btn-ghost", id: "heatmap-png", target: "_blank", rel: "noopener" }, "PNG");
  const openSvg = h("a", { class: "btn btn-small btn-ghost", id: "heatmap-svg", target: "_blank", rel: "noopener" }, "SVG");

  const thresholdParams = () => (thresholds ? { warning: state.get("warning"), critical: state.get("critical"), severe: state.get("severe") } : {});
  const params = () => ({ tensor: view.tensor, stat: view.stat, rank: view.rank, sublayer: view.sublayer, ...thresholdParams() });

  const statSelectWrap = h("span");
  function statOptions() {
    const available = statsByTensor.get(view.tensor);
    const list = available ? [...available].sort((a, b) => (b.includes("underflows%") - a.includes("underflows%")) || a.localeCompare(b)) : ["underflows%", "overflows%", "scale_inv_min", "scale_inv_max", "mse"];
    if (!list.includes(view.stat)) view.stat = list[0];
    replace(statSelectWrap, selectField("Stat", "heatmap-stat", list.map((x) => [x, x]), view.stat, (v) => {
      view.stat = v;
      load();
    }));
  }

  let data = null;
  let geom = null;
  let kbRow = -1; // keyboard: ArrowUp/ArrowDown move between rows, Enter plots the row
  let token = 0;

  async function load() {
    // the URL keeps what differs from what this run opens on (its worst finding's series)
    state.set({ tensor: view.tensor === defaultTensor ? "" : view.tensor, stat: view.stat === defaultStat ? "" : view.stat, rank: view.rank, sublayer: view.sublayer });
    if (onSeries) onSeries({ tensor: view.tensor, stat: view.stat, rank: view.rank, sublayer: view.sublayer });
    openPng.href = `${API}/runs/${run.id}/heatmap.png${qs(params())}`;
    openSvg.href = `${API}/runs/${run.id}/heatmap.svg${qs(params())}`;
    const mine = ++token;
    frame.classList.add("is-loading");
    frame.classList.remove("is-error");
    frame.setAttribute("aria-busy", "true");
    replace(status, loading("Loading heatmap…"));
    const columns = Math.max(50, Math.min(1200, Math.floor((frame.clientWidth || 1000) - 260)));
    try {
      const body = await api(`/runs/${run.id}/heatmap.json${qs({ ...params(), cells: columns })}`, { signal: ctx.signal });
      if (mine !== token) return;
      data = body;
      frame.classList.remove("is-loading");
      frame.setAttribute("aria-busy", "false");
      status.replaceChildren();
      describe();
      draw();
    } catch (err) {
      if (err.name === "AbortError" || mine !== token) return;
      data = null;
      frame.classList.remove("is-loading");
      frame.classList.add("is-error");
      frame.setAttribute("aria-busy", "false");
      replace(status, errorBox(err, { title: "Heatmap unavailable", retry: load }));
    }
  }

  function describe() {
    const ranks = data.rank !== null ? `rank ${data.rank} only` : run.ranks > 1 ? `the maximum over ${run.ranks} ranks at each iteration` : "rank 0";
    const sub = data.sublayer ? `, ${data.sublayer} of each block` : "";
    const cells = data.cells;
    const merged = cells && cells.first.length < data.iterations.count
      ? ` Each column averages ${fmtInt(Math.round(data.iterations.count / cells.first.length))} logged iterations.` : "";
    aggregation.textContent = `Colour: ${data.tensor} ${data.stat} of each layer${sub} at each iteration, ${ranks}.${merged}`;
    marksNote.hidden = !(data.skip_layers && data.rows.some((r) => r.skip || r.gemm_override || rungMark(data, r)));
    const s = data.summary;
    const verdicts = s.boxed_by ? s.boxed_by === "analysis verdict" : data.rows.some((r) => r.severity !== null && r.severity !== undefined);
    if (verdicts) {
      boxesNote.textContent = `Boxed: ${s.boxed.length ? `the worst ${fmtInt(s.boxed.length)} of ${plural(s.critical, "row")}` : "no row"} whose ` +
        `${data.tensor} ${data.stat} is critical or worse in the analysis — the same verdict as the findings and the layer ` +
        "table (p95 of the trailing window after warm-up, worst rank). The colours are every logged point.";
    } else if (s.critical_threshold !== null && s.critical_threshold !== undefined) {
      boxesNote.textContent = `Boxed: the worst ${fmtInt(s.boxed.length)} of ${plural(s.critical, "row")} whose level ` +
        `(p95 of every logged point of the row, ${data.rank !== null ? `rank ${data.rank}` : run.ranks > 1 ? "max over ranks" : "rank 0"}) is at or above ` +
        `${fmtNum(s.critical_threshold)}%. Findings and the layer table use the same bands on a different level: p95 of the ` +
        "trailing window after warm-up, worst rank, outlier ranks reported apart — so a row boxed here can be ok there.";
    } else {
      boxesNote.textContent = "No severity bands for this stat (they are defined for underflows% and overflows%).";
    }
  }

  function draw() {
    const drawn = drawHeatmap(canvas, frame, data, thresholds, kbRow);
    if (drawn) geom = drawn;
  }

  function cellAt(event) {
    if (!geom || !data) return null;
    const rect = canvas.getBoundingClientRect();
    const x = event.clientX - rect.left;
    const y = event.clientY - rect.top;
    const r = Math.floor((y - geom.top) / geom.rowH);
    if (r < 0 || r >= data.rows.length || x < 0 || x > geom.left + geom.plotW) return null;
    const c = x < geom.left ? null : Math.min(geom.ncol - 1, Math.floor((x - geom.left) / geom.cw));
    return { r, c, x, y };
  }

  canvas.addEventListener("keydown", (event) => {
    if (!data || !geom) return;
    const moves = { ArrowDown: 1, ArrowUp: -1, Home: -Infinity, End: Infinity };
    if (event.key in moves) {
      event.preventDefault();
      kbRow = Math.max(0, Math.min(data.rows.length - 1, (kbRow < 0 ? -1 : kbRow) + moves[event.key]));
      if (!Number.isFinite(moves[event.key])) kbRow = moves[event.key] > 0 ? data.rows.length - 1 : 0;
      draw();
      showTip({ r: kbRow, c: null, x: geom.left + geom.plotW / 2, y: geom.top + (kbRow + 1) * geom.rowH });
    } else if (event.key === "Enter" && kbRow >= 0 && onLayer) {
      event.preventDefault();
      onLayer(data.rows[kbRow].layer);
    }
  });
  canvas.addEventListener("blur", () => {
    tip.hidden = true;
  });

  canvas.addEventListener("mousemove", (event) => {
    const hit = cellAt(event);
    if (!hit) {
      tip.hidden = true;
      canvas.style.cursor = "";
      return;
    }
    showTip(hit);
    canvas.style.cursor = "pointer";
  });

  function showTip(hit) {
    const row = data.rows[hit.r];
    const lines = [h("div", { class: "tip-head mono" }, row.layer)];
    if (hit.c !== null) {
      const first = data.cells.first[hit.c];
      const last = data.cells.last[hit.c];
      const v = row.kind === "bf16" ? null : data.cells.values[hit.r][hit.c];
      lines.push(h("div", null, `iteration ${fmtInt(first)}${last !== first ? `–${fmtInt(last)}` : ""}: `,
        h("strong", { class: "tip-value" }, row.kind === "bf16" ? "not in FP8 (BF16)" : v === null ? "not logged" : `${fmtNum(v, 4)}${data.stat.includes("%") ? "%" : ""}`)));
    }
    if (row.level !== null) lines.push(h("div", null, `row level (p95): ${fmtNum(row.level, 4)}${data.stat.includes("%") ? "%" : ""}${row.boxed ? " · boxed" : ""}`));
    if (row.skip) lines.push(h("div", null, "recommended: whole layer in BF16"));
    else if (row.gemm_override) lines.push(h("div", null, `recommended: ${row.gemm_override.join(", ")} in BF16`));
    else if (row.recommended) lines.push(h("div", null, `recommended: ${precisionWord(row.recommended)}${rungMark(data, row) ? ` (the recipe is ${precisionWord(data.recommended_recipe)})` : ""}`));
    lines.push(h("div", { class: "muted small" }, hit.c === null ? "Enter: plot this layer" : "click: plot this layer"));
    replace(tip, lines);
    tip.hidden = false;
    const frameRect = frame.getBoundingClientRect();
    const canvasRect = canvas.getBoundingClientRect();
    const left = canvasRect.left - frameRect.left + hit.x + 14;
    tip.style.left = `${Math.min(left, frame.clientWidth - 260)}px`;
    tip.style.top = `${canvasRect.top - frameRect.top + hit.y + 12}px`;
  }
  canvas.addEventListener("mouseleave", () => {
    tip.hidden = true;
  });
  canvas.addEventListener("click", (event) => {
    const hit = cellAt(event);
    if (hit && onLayer) onLayer(data.rows[hit.r].layer);
  });

  let lastWidth = 0;
  const observer = new ResizeObserver(() => {
    if (Math.abs(frame.clientWidth - lastWidth) > 24) {
      lastWidth = frame.clientWidth;
      draw();
    }
  });
  observer.observe(frame);
  ctx.onLeave(() => observer.disconnect());
  ctx.onLeave(onThemeChange(draw));

  const controls = h("div", { class: "controls" },
    selectField("Tensor", "heatmap-tensor", tensors.map((t) => [t, t]), view.tensor, (v) => {
      view.tensor = v;
      statOptions();
      load();
    }),
    statSelectWrap,
    sublayers.length > 1 ? selectField("Sublayer", "heatmap-sublayer", [["", "All"], ...sublayers.map((x) => [x, x])], view.sublayer, (v) => {
      view.sublayer = v;
      load();
    }) : null,
    run.ranks > 1 ? selectField("Rank", "heatmap-rank", [["", `All ranks (max per iteration)`], ...Array.from({ length: run.ranks }, (_, i) => [String(i), `rank ${i}`])], view.rank, (v) => {
      view.rank = v;
      load();
    }) : null,
    h("span", { class: "control-links" }, h("span", { class: "muted small" }, "Export:"), openPng, openSvg));
  statOptions();
  ctx.later(load, 0); // after the card is in the page, so the frame has its width
  return card("Heatmap", {
    id: "heatmap",
    subtitle: "Layers (rows, model order) × iterations (columns). Hover a cell for its value, click a row to plot the layer.",
  }, controls, aggregation, frame, boxesNote, marksNote);
}

// Run page: the interactive heatmap card, drawn on a canvas from heatmap.json?cells=N (rows × iteration columns,
// the image's colour map and boxed rows); hover reads a cell, a click on a row opens that layer's chart. The
// server-rendered PNG / SVG stay one click away for export. Tensor / stat / rank / sublayer are in the URL.

import { TENSORS } from "./constants.js";
import { sevColors, onThemeChange } from "./colors.js";
import { h, replace } from "./dom.js";
import { API, api, qs, errorBox } from "./api.js";
import { fmtInt, fmtNum, plural } from "./format.js";
import { card, selectField, loading } from "./widgets.js";

const BOX = "#0a6cff"; // the images' box colour (service/visual/style.py)
const SKIP = "#1b9e77";

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function hexToRgb(hex) {
  const n = parseInt(hex.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

/* The colour of value v on the image's colour map (linear between the evenly spaced stops, capped at vmax). */
export function colorAt(stops, vmax, v) {
  const t = Math.min(1, Math.max(0, v / vmax)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(t));
  const a = hexToRgb(stops[i]);
  const b = hexToRgb(stops[i + 1]);
  const f = t - i;
  return `rgb(${a.map((x, k) => Math.round(x + (b[k] - x) * f)).join(",")})`;
}

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

export function heatmapCard(ctx, run, analysis, layersInfo, state, onLayer) {
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
    " outlined: single GEMMs of that layer in BF16 (a GEMM override).");
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
    marksNote.hidden = !(data.skip_layers && data.rows.some((r) => r.skip || r.gemm_override));
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
    if (!data || !data.cells) return;
    const rows = data.rows;
    const cells = data.cells;
    const dpr = window.devicePixelRatio || 1;
    const width = Math.max(480, frame.clientWidth - 18);
    const rowH = rows.length > 120 ? 4 : rows.length > 60 ? 8 : 16;
    const labelStride = rowH >= 12 ? 1 : Math.ceil(12 / rowH);
    const ctx2 = canvas.getContext("2d");
    ctx2.font = "11px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace";
    const labelW = Math.min(300, Math.max(...rows.map((r) => ctx2.measureText(r.label).width), 40)) + 10;
    const legendW = 150;
    const strip = data.skip_layers ? 18 : 0;
    const left = labelW;
    const top = 8;
    const plotW = width - left - legendW - strip - 12;
    const plotH = rows.length * rowH;
    const height = Math.max(plotH + top + 34, 200);
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    const text = cssVar("--text") || "#1d232b";
    const muted = cssVar("--muted") || "#5d6773";
    const noData = cssVar("--no-data") || "#e8eaed";
    g.fillStyle = cssVar("--surface") || "#fff";
    g.fillRect(0, 0, width, height);
    const ncol = cells.first.length;
    const cw = plotW / Math.max(1, ncol);
    rows.forEach((row, r) => {
      const y = top + r * rowH;
      if (row.kind === "bf16") {
        g.fillStyle = noData;
        g.fillRect(left, y, plotW, rowH);
        g.strokeStyle = muted;
        g.lineWidth = 0.6;
        g.beginPath();
        for (let x = left - rowH; x < left + plotW; x += 8) {
          g.moveTo(Math.max(left, x), y + rowH - Math.max(0, left - x));
          g.lineTo(Math.min(left + plotW, x + rowH), y + Math.max(0, x + rowH - left - plotW));
        }
        g.stroke();
      } else {
        const values = cells.values[r];
        for (let c = 0; c < ncol; c += 1) {
          const v = values[c];
          g.fillStyle = v === null ? noData : colorAt(data.colormap, data.vmax, v);
          g.fillRect(left + c * cw, y, Math.ceil(cw + 0.5), rowH);
        }
      }
      if (r % labelStride === 0) {
        g.fillStyle = row.skip || row.gemm_override ? SKIP : row.kind === "bf16" ? muted : text;
        g.font = `${row.skip ? "600 " : ""}${Math.min(11, Math.max(8, rowH - 2))}px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace`;
        g.textAlign = "right";
        g.textBaseline = "middle";
        g.fillText(row.label, left - 6, y + rowH / 2, labelW - 8);
      }
      if (strip && (row.skip || row.gemm_override)) {
        g.fillStyle = row.skip ? SKIP : "transparent";
        g.strokeStyle = SKIP;
        const sx = left + plotW + 5;
        if (row.skip) g.fillRect(sx, y + 1, 10, Math.max(2, rowH - 2));
        else g.strokeRect(sx + 1, y + 1.5, 8, Math.max(1, rowH - 3));
      }
    });
    // group separators
    g.strokeStyle = text;
    g.lineWidth = 1;
    rows.forEach((row, r) => {
      if (r && row.group !== rows[r - 1].group) {
        g.beginPath();
        g.moveTo(left, top + r * rowH);
        g.lineTo(left + plotW, top + r * rowH);
        g.stroke();
      }
    });
    // boxes around the worst rows
    g.strokeStyle = BOX;
    g.lineWidth = 2;
    for (const r of data.summary.boxed) g.strokeRect(left + 1, top + r * rowH + 1, plotW - 2, rowH - 2);
    // x axis: first / middle / last iteration
    g.fillStyle = muted;
    g.font = "11px system-ui, sans-serif";
    g.textBaseline = "top";
    const ticksAt = [0, Math.floor((ncol - 1) / 2), ncol - 1];
    ticksAt.forEach((c, i) => {
      g.textAlign = i === 0 ? "left" : i === 2 ? "right" : "center";
      g.fillText(fmtInt(cells.first[c]), left + (i === 2 ? plotW : c * cw + (i === 1 ? cw / 2 : 0)), top + plotH + 4);
    });
    g.textAlign = "center";
    g.fillText("iteration", left + plotW / 2, top + plotH + 18);
    drawColorBar(g, left + plotW + strip + 24, top, Math.min(220, Math.max(120, plotH)));
    if (kbRow >= 0 && kbRow < rows.length) { // the row the keyboard is on
      g.strokeStyle = cssVar("--focus") || "#0b62c4";
      g.lineWidth = 2;
      g.setLineDash([4, 3]);
      g.strokeRect(1, top + kbRow * rowH, left + plotW - 2, rowH);
      g.setLineDash([]);
    }
    geom = { left, top, rowH, cw, plotW, plotH, ncol, width };
    canvas.dataset.top = String(top); // for tests and tools that point at a row
    canvas.dataset.rowHeight = String(rowH);
    Object.assign(canvas.dataset, { tensor: data.tensor, stat: data.stat,
      boxedLayers: data.summary.boxed.map((r) => rows[r].layer).join(" ") });
  }

  function drawColorBar(g, x, y, barH) {
    const w = 14;
    for (let k = 0; k < barH; k += 1) {
      g.fillStyle = colorAt(data.colormap, data.vmax, data.vmax * (1 - k / barH));
      g.fillRect(x, y + k, w, 1);
    }
    g.strokeStyle = cssVar("--border") || "#999";
    g.strokeRect(x, y, w, barH);
    const percent = data.stat.includes("%");
    const unit = percent ? "%" : "";
    g.font = "10.5px system-ui, sans-serif";
    g.textAlign = "left";
    g.textBaseline = "middle";
    g.fillStyle = cssVar("--muted") || "#5d6773";
    g.fillText(`${fmtNum(data.vmax)}${unit}${data.summary.max > data.vmax ? "+" : ""}`, x + w + 4, y + 4);
    g.fillText(`0${unit}`, x + w + 4, y + barH - 4);
    if (percent && thresholds) {
      for (const band of ["warning", "critical", "severe"]) {
        const v = thresholds[band];
        if (!(v < data.vmax)) continue;
        const yy = y + barH * (1 - v / data.vmax);
        g.fillStyle = sevColors(band).text;
        g.fillRect(x - 3, yy, w + 6, 1.5);
        g.fillText(`${band} ${fmtNum(v)}${unit}`, x + w + 4, yy);
      }
    }
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

// The run page's heatmap, drawn: the canvas picture of one heatmap.json answer (cells coloured on the image's
// colour map, BF16 rows hatched, layer labels, group separators, boxed rows, the recommendation's marks, the x
// axis and the colour bar with its severity bands). Belongs here: pixels from data, nothing that fetches or
// listens; the card around it (controls, loading, the tip, keyboard and mouse) is heatmap.js.

import { sevColors } from "./colors.js";
import { fmtInt, fmtNum } from "./format.js";

const BOX = "#0a6cff"; // the images' box colour (service/visual/style.py)
export const SKIP = "#1b9e77";
// A row the recommendation runs at another precision than its recipe: FP4 / FP8 (precision.js's colours).
export const RUNG = { nvfp4: "#7b3fb5", mxfp8: "#1f6fb2", block: "#1f6fb2", current: "#1f6fb2", delayed: "#1f6fb2" };

/* The precision a row is marked with right of it (none: runs at the recipe, or no recommendation). */
export function rungMark(data, row) {
  if (!data.recommended_recipe || !row.recommended || row.recommended === "bf16") return null;
  return row.recommended !== data.recommended_recipe ? row.recommended : null;
}

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

/* Size `canvas` to width x height CSS pixels at the screen's pixel ratio, cleared to the page's surface colour;
 * returns its 2D context, scaled so that it draws in CSS pixels (the heatmap here and the live page's). */
export function sizedCanvas(canvas, width, height) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.fillStyle = cssVar("--surface") || "#fff";
  g.fillRect(0, 0, width, height);
  return g;
}

/* Draw `data` (heatmap.json) on `canvas`, sized to `frame`; `kbRow` outlines the keyboard's row (-1: none).
 * Returns the geometry a pointer position is read with (heatmapCard's cellAt), or null when there is nothing to draw. */
export function drawHeatmap(canvas, frame, data, thresholds, kbRow) {
  if (!data || !data.cells) return null;
  const rows = data.rows;
  const cells = data.cells;
  const width = Math.max(480, frame.clientWidth - 18);
  const rowH = rows.length > 120 ? 4 : rows.length > 60 ? 8 : 16;
  const labelStride = rowH >= 12 ? 1 : Math.ceil(12 / rowH);
  const ctx2 = canvas.getContext("2d");
  ctx2.font = "11px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace";
  const labelW = Math.min(300, Math.max(...rows.map((r) => ctx2.measureText(r.label).width), 40)) + 10;
  const legendW = 150;
  const strip = data.skip_layers ? 30 : 0;
  const left = labelW;
  const top = 8;
  const plotW = width - left - legendW - strip - 12;
  const plotH = rows.length * rowH;
  const height = Math.max(plotH + top + 34, 200);
  const g = sizedCanvas(canvas, width, height);
  const text = cssVar("--text") || "#1d232b";
  const muted = cssVar("--muted") || "#5d6773";
  const noData = cssVar("--no-data") || "#e8eaed";
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
    const rung = strip ? rungMark(data, row) : null;
    if (rung) { // the precision ladder: this row runs at another precision than the recipe
      g.fillStyle = RUNG[rung] || BOX;
      g.fillRect(left + plotW + 18, y + 1, 8, Math.max(2, rowH - 2));
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
  drawColorBar(g, left + plotW + strip + 24, top, Math.min(220, Math.max(120, plotH)), data, thresholds);
  if (kbRow >= 0 && kbRow < rows.length) { // the row the keyboard is on
    g.strokeStyle = cssVar("--focus") || "#0b62c4";
    g.lineWidth = 2;
    g.setLineDash([4, 3]);
    g.strokeRect(1, top + kbRow * rowH, left + plotW - 2, rowH);
    g.setLineDash([]);
  }
  const geom = { left, top, rowH, cw, plotW, plotH, ncol, width };
  canvas.dataset.top = String(top); // for tests and tools that point at a row
  canvas.dataset.rowHeight = String(rowH);
  Object.assign(canvas.dataset, { tensor: data.tensor, stat: data.stat,
    boxedLayers: data.summary.boxed.map((r) => rows[r].layer).join(" ") });
  return geom;
}

function drawColorBar(g, x, y, barH, data, thresholds) {
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

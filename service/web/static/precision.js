// The recommended precision of a layer and the answer's precision mix, as every view shows them (one look).
//
// They come from the recommendation's `headline` (policy/recommend/headline.py): `precision_by_layer` is what the
// answer runs each GEMM layer at, `precision_mix` how many layers run at each precision. Nothing here decides a
// precision; the layer table, the heatmap marks, the cards and the runs list only draw these.

import { h } from "./dom.js";

export const PRECISION_ORDER = ["nvfp4", "mxfp8", "block", "current", "delayed", "bf16"];
const WORDS = { nvfp4: "NVFP4", mxfp8: "MXFP8", block: "FP8 block", current: "FP8 current", delayed: "FP8 delayed", bf16: "BF16" };
const SHORT = { nvfp4: "FP4", mxfp8: "MX", block: "BLK", current: "CUR", delayed: "DEL", bf16: "BF16" };

export function precisionWord(p) {
  return WORDS[p] || p;
}

/* The one-letter-ish tag the heatmap draws right of a row. */
export function precisionShort(p) {
  return SHORT[p] || p;
}

/* The CSS class of a precision's colour (app.css: .prec-fp4, .prec-fp8, .prec-bf16). */
export function precisionClass(p) {
  if (p === "nvfp4") return "prec-fp4";
  if (p === "bf16") return "prec-bf16";
  return "prec-fp8";
}

export function precisionChip(p, title) {
  return h("span", { class: ["chip", "chip-small", "prec-chip", precisionClass(p)], title: title || null, "data-precision": p }, precisionWord(p));
}

/* "5 NVFP4 · 4 MXFP8 · 2 BF16" with a stacked bar; null when there is no mix. */
export function precisionMix(mix, { id } = {}) {
  const entries = PRECISION_ORDER.filter((p) => mix && mix[p]).map((p) => [p, mix[p]]);
  if (!entries.length) return null;
  const total = entries.reduce((sum, [, n]) => sum + n, 0);
  return h("span", { class: "prec-mix", id: id || null },
    h("span", { class: "prec-bar", "aria-hidden": "true" },
      entries.map(([p, n]) => h("span", { class: ["prec-seg", precisionClass(p)], style: { width: `${(100 * n) / total}%` }, title: `${n} ${precisionWord(p)}` }))),
    h("span", { class: "prec-text" }, entries.map(([p, n]) => `${n} ${precisionWord(p)}`).join(" · ")));
}

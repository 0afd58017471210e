// One colour (and, past the fourth run, one dash pattern) per compared run, by its position in the comparison:
// the same run has the same colour in the legend, the charts and the tables. Readable on light and dark pages.

import { h, s } from "./dom.js";

export const RUN_COLORS = ["#2f6fdf", "#e8710a", "#1e9e5a", "#c2185b", "#7b52c7", "#0097a7", "#8d6e3f", "#6b7280"];
const DASHES = [null, null, null, null, "7 3", "2 2", "9 3 2 3", "4 4"];

export function runStyle(index) {
  return { color: RUN_COLORS[index % RUN_COLORS.length], dash: DASHES[index % DASHES.length] };
}

/* A short line in the run's colour and dash: the legend's key. */
export function runSwatch(index) {
  const { color, dash } = runStyle(index);
  return s("svg", { class: "run-swatch", width: 22, height: 10, viewBox: "0 0 22 10", "aria-hidden": "true" },
    s("line", { x1: 1, x2: 21, y1: 5, y2: 5, stroke: color, "stroke-width": 3, "stroke-dasharray": dash, "stroke-linecap": "round" }));
}

/* "#12 name" with the run's swatch, linking to its page. */
export function runKey(run, index, { link = true } = {}) {
  const label = `#${run.id}${run.name ? ` ${run.name}` : ""}`;
  return h("span", { class: "run-key", "data-run": String(run.id), title: label },
    runSwatch(index), link ? h("a", { href: `#/runs/${run.id}` }, label) : h("span", null, label));
}

// Run page: the findings card (severity, summary, layer chips, evidence table per finding, and a parallel job's
// layout: its sizes, source, naming and the ranks of each pipeline stage).

import { h, replace } from "./dom.js";
import { fmtNum, plural, patternLabel } from "./format.js";
import { sevBadge, card } from "./widgets.js";

const EVIDENCE_COLUMNS = [
  ["layer", "Layer"], ["metric", "Metric"], ["rank", "Rank"], ["window", "Window"], ["level", "Level"],
  ["max", "Max"], ["mean", "Mean"], ["last", "Last"], ["slope_per_1k", "Slope / 1k it"],
  ["start_level", "Start"], ["end_level", "End"], ["projected_value", "Projected"], ["projected_iteration", "Projected at"],
  ["ratio", "Ratio"], ["reference", "Reference"], ["onset", "Onset"], ["crossing_iteration", "Crosses at"], ["count", "Count"],
];

function evidenceValue(key, v) {
  if (v === null || v === undefined) return "—";
  if (Array.isArray(v)) return v.map((x) => fmtNum(x)).join("–");
  if (["onset", "projected_iteration", "crossing_iteration", "rank", "count"].includes(key)) return fmtNum(v);
  if (["level", "max", "mean", "last", "start_level", "end_level", "projected_value", "reference"].includes(key)) return fmtNum(v, 4);
  if (typeof v === "number") return fmtNum(v, 4);
  return String(v);
}

// "0-3, 8-11": ascending ranks as ranges.
function rankRanges(ranks) {
  const out = [];
  for (const r of ranks) {
    const last = out[out.length - 1];
    if (last && r === last[1] + 1) last[1] = r; else out.push([r, r]);
  }
  return out.map(([a, b]) => (a === b ? `${a}` : `${a}-${b}`)).join(", ");
}

// A parallel job's layout (analysis.parallel): sizes, where they came from, how the logs named the blocks, and the
// ranks of each pipeline stage (a global layer's ranks are its stage's).
function parallelBlock(p) {
  if (!p) return null;
  const naming = { layer_number: "blocks named by their global layer_number", global: "blocks named globally",
    local: "blocks named per stage, renamed to global" }[p.naming] || "block names as logged";
  const head = p.source === "unknown" ? "unknown (several ranks, no layout told)"
    : `${p.describe || `TP${p.tp} x PP${p.pp} x DP${p.dp}`} · ${p.source === "metadata" ? "from the metadata" : "inferred from the logs"} · ${naming}`;
  const byStage = new Map();
  for (const [rank, c] of Object.entries(p.ranks || {})) {
    const stage = c.pp ?? 0;
    if (!byStage.has(stage)) byStage.set(stage, []);
    byStage.get(stage).push(Number(rank));
  }
  const stored = (r) => !(String(r) in (p.replicas || {}));
  const rows = [...byStage.entries()].sort((a, b) => a[0] - b[0]).map(([stage, ranks]) => {
    ranks.sort((a, b) => a - b);
    return h("tr", null, h("td", { class: "num" }, String(stage)), h("td", { class: "mono left" }, rankRanges(ranks)),
      h("td", { class: "mono left" }, rankRanges(ranks.filter(stored))));
  });
  return h("div", { class: "notes", id: "parallel-layout" }, h("h3", null, "Parallel layout"),
    h("p", null, head, p.exact ? "" : " · layer names not known to be global blocks"),
    rows.length > 1 ? h("div", { class: "table-scroll" }, h("table", { class: "table table-compact", "aria-label": "Ranks per pipeline stage" },
      h("thead", null, h("tr", null, h("th", { scope: "col", class: "num" }, "Stage"), h("th", { scope: "col" }, "Ranks"),
        h("th", { scope: "col" }, "Stored (replicas once)"))), h("tbody", null, rows))) : null,
    (p.notes || []).length ? h("ul", null, p.notes.map((n) => h("li", null, n))) : null);
}

export function findingsCard(analysis, onLayer) {
  const findings = analysis.findings || [];
  // A healthy run may still have layers in the warning band: said next to the (ok) healthy finding.
  const warningBand = (analysis.layers || []).filter((l) => l.status === "fp8" && l.severity === "warning").length;
  const list = h("ol", { class: "findings", id: "findings-list" }, findings.map((f, i) => {
    const ev = f.evidence || [];
    const cols = EVIDENCE_COLUMNS.filter(([k]) => ev.some((e) => e[k] !== null && e[k] !== undefined));
    const limit = 6;
    const evRows = (all) => (all ? ev : ev.slice(0, limit)).map((e) => h("tr", null, cols.map(([k]) =>
      h("td", { class: [k === "layer" ? "mono" : "num", k === "layer" || k === "metric" ? "left" : null] },
        k === "layer" && e.layer ? h("button", { type: "button", class: "link-button mono", onclick: () => onLayer(e.layer) }, e.layer) : evidenceValue(k, e[k])))));
    const tbody = h("tbody", null, evRows(false));
    const more = ev.length > limit ? h("button", {
      type: "button", class: "btn btn-small btn-ghost", onclick: (e) => {
        replace(tbody, evRows(true));
        e.target.remove();
      },
    }, `Show all ${ev.length} evidence rows`) : null;
    const layerChips = (f.layers || []).slice(0, 12).map((l) => h("button", { type: "button", class: "chip chip-button mono", onclick: () => onLayer(l), title: `Plot ${l}` }, l));
    return h("li", { class: ["finding", `finding-${f.severity}`], "data-pattern": f.pattern },
      h("div", { class: "finding-head" }, sevBadge(f.severity), h("span", { class: "finding-pattern" }, patternLabel(f.pattern, f.label)),
        f.layers && f.layers.length ? h("span", { class: "muted small" }, plural(f.layers.length, "layer")) : null,
        f.pattern === "healthy" && warningBand ? h("span", { class: "chip chip-small warning-band" }, `${plural(warningBand, "layer")} in the warning band`) : null),
      h("p", { class: "finding-summary" }, f.summary),
      layerChips.length ? h("div", { class: "chips" }, layerChips, f.layers.length > 12 ? h("span", { class: "muted small" }, `+${f.layers.length - 12} more`) : null) : null,
      ev.length ? h("div", { class: "table-scroll" }, h("table", { class: "table table-compact evidence", "aria-label": `Evidence for finding ${i + 1}` },
        h("thead", null, h("tr", null, cols.map(([k, label]) => h("th", { scope: "col", class: k === "layer" || k === "metric" ? null : "num" }, label)))),
        tbody)) : null,
      more);
  }));
  const notes = (analysis.notes || []).length
    ? h("div", { class: "notes" }, h("h3", null, "Notes"), h("ul", null, analysis.notes.map((n) => h("li", null, n))))
    : null;
  const t = analysis.thresholds || {};
  return card(`Findings (${findings.length})`, {
    id: "findings",
    subtitle: `Underflow bands: warning ≥ ${fmtNum(t.warning)}%, critical ≥ ${fmtNum(t.critical)}%, severe ≥ ${fmtNum(t.severe)}%; ` +
      `a layer's level is the ${analysis.stats && analysis.stats.level_rule ? analysis.stats.level_rule : "p95 of the trailing window after warm-up, worst rank"}` +
      `${analysis.stats && analysis.stats.rank_outlier_series_excluded ? " (ranks reported as outliers left out)" : ""}.`,
  }, list, notes, parallelBlock(analysis.parallel));
}

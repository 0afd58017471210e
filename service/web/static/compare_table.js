// The compare page's tables (GET /compare/runs): each run's verdict and recommendation side by side, one column
// per run, rows where the runs differ marked (and the cells that differ from the first run, the reference); and
// every layer's precision as logged and as each run's recommendation gives it (the precision ladder per layer).

import { h, replace } from "./dom.js";
import { isNum, fmtInt, fmtShare, plural, patternLabel } from "./format.js";
import { sevBadge, layerName, card, selectField } from "./widgets.js";
import { runKey } from "./compare_colors.js";

const muted = (text) => h("span", { class: "muted" }, text);

function layerList(names) {
  if (!names) return muted("—");
  if (!names.length) return muted("none");
  const list = h("ul", { class: "plain-list compare-layer-list" }, names.map((n) => h("li", null, layerName(n))));
  return names.length <= 3 ? h("div", null, h("strong", null, fmtInt(names.length)), list)
    : h("details", null, h("summary", null, plural(names.length, "layer")), list);
}

const PRECISION_TEXT = { bf16: "BF16", "bf16 gemms": "BF16 GEMMs" };

function ladderText(counts) {
  if (!counts) return muted("—");
  const parts = Object.entries(counts).sort((a, b) => b[1] - a[1]);
  return h("ul", { class: "plain-list" }, parts.map(([p, n]) => h("li", null, h("strong", null, fmtInt(n)), ` ${PRECISION_TEXT[p] || p}`)));
}

/* How one table value is shown, by row key. */
const CELLS = {
  severity: (v) => sevBadge(v),
  findings: (v) => (v.length ? h("ul", { class: "plain-list" }, v.map((f) => h("li", { "data-pattern": f.pattern },
    h("span", { class: ["sev-dot", `sev-dot-${f.severity}`], title: f.severity }), patternLabel(f.pattern, f.label)))) : muted("healthy")),
  trained_recipe: (v) => (v ? h("span", { class: "mono" }, v) : muted("not in the logs")),
  ran_bf16: layerList,
  recipe: (v) => (v ? h("span", { "data-recipe": v.name }, v.label) : muted("—")),
  to_bf16: layerList,
  gemm_overrides: (v) => (v ? layerList(v.map((o) => o.layer)) : muted("—")),
  ladder: ladderText,
  bf16_gemm_share: (v) => (isNum(v) ? `${(v * 100).toFixed(1)}%` : muted("—")),
  gemm_slowdown_vs_all_fp8_pct: (v) => (isNum(v) ? `${v.toFixed(1)}%` : muted("—")),
  gemm_speedup_vs_all_bf16: (v) => (isNum(v) ? `${v.toFixed(2)}×` : muted("—")),
  confidence: (v) => fmtShare(v),
};

/* Rows about the runs themselves (from `runs`), before the verdict rows. */
function identityRows(runs) {
  const row = (key, label, fn) => ({ key, label, values: runs.map(fn), differs: false, identity: true });
  return [
    row("project", "Project", (r) => r.project),
    row("iterations", "Iterations", (r) => (r.iteration_min === null ? "—" : `${fmtInt(r.iteration_min)}–${fmtInt(r.iteration_max)}`)),
    row("layers", "Layers · ranks", (r) => `${fmtInt(r.layer_count)} · ${fmtInt(r.ranks)}`),
  ];
}

function headRow(runs, first) {
  return h("thead", null, h("tr", null, h("th", { scope: "col", class: "col-what" }, first),
    runs.map((r, i) => h("th", { scope: "col", "data-run": String(r.id) }, runKey(r, i), i === 0 ? h("div", { class: "muted small" }, "reference") : null))));
}

/* Card #compare-verdicts: verdicts and recommendations side by side. */
export function verdictTable(cmp) {
  const rows = [...identityRows(cmp.runs), ...cmp.table];
  const differing = cmp.table.filter((r) => r.differs).length;
  const tbody = h("tbody");
  const only = h("input", { type: "checkbox", id: "verdicts-differ", onchange: () => render() });
  function render() {
    replace(tbody, rows.filter((r) => !only.checked || r.differs).map((r) => h("tr", {
      "data-row": r.key, class: [r.differs ? "row-differs" : null, r.identity ? "row-identity" : null],
    },
    h("th", { scope: "row" }, r.label, r.differs ? h("span", { class: "differs-tag" }, "differs") : null),
    r.values.map((v, i) => h("td", {
      "data-run": String(cmp.runs[i].id),
      class: r.differs && r.matches_first && !r.matches_first[i] ? "cell-differs" : null,
      title: r.differs && r.matches_first && !r.matches_first[i] ? "differs from the reference (first run)" : null,
    }, r.identity ? v : (CELLS[r.key] || String)(v))))));
  }
  render();
  return card("Verdicts and recommendations", {
    id: "compare-verdicts",
    subtitle: differing ? `The runs differ in ${plural(differing, "row")} (marked); cells that differ from the reference are highlighted.`
      : "The runs agree on every verdict and recommendation row.",
  },
  h("div", { class: "controls" }, h("div", { class: "field field-check" }, only, h("label", { for: "verdicts-differ" }, "Only rows where the runs differ"))),
  h("div", { class: "table-scroll" }, h("table", { class: "table table-compact compare-table", id: "compare-verdict-table" },
    h("caption", { class: "visually-hidden" }, "Verdict and recommendation of each run, one column per run"),
    headRow(cmp.runs, "Run"), tbody)));
}

function precisionCell(cell, reference) {
  if (!cell) return h("td", { class: "muted small", "data-missing": "true" }, "not in run");
  const text = cell.recommended === "bf16 gemms" ? `BF16 ${(cell.gemms || []).join("+")}` : PRECISION_TEXT[cell.recommended] || cell.recommended || "—";
  const key = (c) => `${c.logged === "bf16"}|${c.recommended}|${(c.gemms || []).join(",")}`;
  const differs = reference && key(reference) !== key(cell);
  return h("td", { class: differs ? "cell-differs" : null, "data-precision": cell.recommended || "" },
    h("span", { class: ["chip", "chip-small", "prec", `prec-${String(cell.recommended || "none").replace(/\s+/g, "-")}`] }, text),
    cell.logged === "bf16" ? h("div", { class: "muted small" }, "ran in BF16") : null,
    cell.severity && cell.severity !== "ok" ? h("div", null, sevBadge(cell.severity)) : null);
}

/* Card #compare-precisions: each layer's recommended precision per run. */
export function precisionTable(cmp) {
  const rows = cmp.layers;
  const differing = rows.filter((r) => r.differs).length;
  const notable = rows.filter((r) => r.differs || r.notable).length;
  const state = { filter: differing ? "differs" : notable ? "notable" : "all" };
  const tbody = h("tbody");
  const shown = h("span", { class: "muted small", id: "precision-count" });
  function render() {
    const list = rows.filter((r) => state.filter === "all" || r.differs || (state.filter === "notable" && r.notable));
    shown.textContent = `${list.length} of ${plural(rows.length, "layer")}`;
    replace(tbody, list.length ? list.map((r) => h("tr", { "data-layer": r.name, class: r.differs ? "row-differs" : null },
      h("th", { scope: "row" }, layerName(r.name), h("div", { class: "muted small" }, [r.group, r.sublayer].filter(Boolean).join(" · "))),
      r.cells.map((c) => precisionCell(c, r.cells.find(Boolean)))))
      : h("tr", null, h("td", { colspan: cmp.runs.length + 1, class: "muted" }, "No layer in this view.")));
  }
  render();
  return card("Precision per layer", {
    id: "compare-precisions",
    subtitle: "The precision each run's recommendation gives a layer: BF16, its GEMMs in BF16, or a recipe of the precision ladder.",
  },
  h("div", { class: "controls" },
    selectField("Show", "precision-filter", [["differs", `Layers where the runs differ (${differing})`],
      ["notable", `Layers not at the plain recipe in some run (${notable})`], ["all", `All layers (${rows.length})`]], state.filter, (v) => {
      state.filter = v;
      render();
    }), shown),
  h("div", { class: "table-scroll table-tall" }, h("table", { class: "table table-compact compare-table", id: "compare-precision-table" },
    h("caption", { class: "visually-hidden" }, "Recommended precision of each layer, one column per run"),
    headRow(cmp.runs, "Layer"), tbody)));
}

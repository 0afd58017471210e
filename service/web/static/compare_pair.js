// Two runs in detail (the compare page with exactly two runs, or #/compare?base=&head=): GET /compare's per-layer
// and per-group deltas head − base, findings that appeared or disappeared, problems that followed a moved BF16
// boundary, the two recommendations side by side and both heatmaps on one colour scale.

import { TENSORS } from "./constants.js";
import { h, replace } from "./dom.js";
import { isNum, fmtNum, fmtPct, fmtSigned, fmtInt, fmtShare, plural, runLabel, patternLabel } from "./format.js";
import { API, api, qs, errorBox, sevRank } from "./api.js";
import { sevBadge, layerName, card, loading, selectField, sortableTable, imageLoader } from "./widgets.js";

/* The detail of base → head (run objects of GET /compare/runs) into `el` (#compare-pair). */
export async function pairDetail(ctx, el, baseRun, headRun) {
  const side = (label, run) => h("div", { class: "side card", "data-side": label.toLowerCase() },
    h("div", { class: "side-label" }, label),
    h("div", null,
      h("a", { class: "side-name", href: `#/runs/${run.id}` }, runLabel(run)), " ", h("span", { class: "muted" }, `#${run.id}`),
      h("div", { class: "muted small" }, `${run.project} · ${fmtInt(run.layer_count)} layers · ${fmtInt(run.ranks)} rank(s) · iterations ${fmtInt(run.iteration_min)}–${fmtInt(run.iteration_max)}`),
      h("div", { class: "side-sev" }, sevBadge(run.severity), h("span", { class: "muted small" },
        ` ${(run.findings || []).filter((f) => f.pattern !== "healthy").map((f) => patternLabel(f.pattern, f.label)).join(", ") || "Healthy"}`))));
  const sides = h("div", { class: "sides" }, side("Base", baseRun), h("div", { class: "sides-arrow", "aria-hidden": "true" }, "→"), side("Head", headRun));
  replace(el, sides, loading("Comparing…"));
  let cmp;
  try {
    cmp = await api(`/compare${qs({ base: baseRun.id, head: headRun.id })}`, { signal: ctx.signal });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    replace(el, sides, errorBox(err, { title: "Comparison failed" }));
    return;
  }
  if (cmp.comparable === false) {
    // No layer in common: say so first; per-layer deltas and the side-by-side image would compare nothing.
    replace(el, sides, incomparableBanner(cmp), compareSummary(cmp), h("div", { class: "grid-2" }, compareFindings(cmp), compareGroups(cmp)));
    return;
  }
  replace(el, sides, compareSummary(cmp), movedProblems(cmp), compareRecommendations(cmp), compareImageCard(ctx, baseRun.id, headRun.id),
    h("div", { class: "grid-2" }, compareFindings(cmp), compareGroups(cmp)), compareLayers(cmp));
}

function incomparableBanner(cmp) {
  const note = [...(cmp.notes || []), ...(cmp.summary || [])].find((n) => n.startsWith("incomparable")) || "the runs have no layer in common";
  return h("div", { class: "alert alert-warning", role: "alert", id: "compare-incomparable" },
    h("div", { class: "alert-body" },
      h("strong", { class: "alert-title" }, "These runs cannot be compared layer by layer"),
      h("div", null, note.replace(/^incomparable:\s*/, "")),
      h("div", { class: "muted small" }, "Group means below are over each run's own layers; no recommendation comparison is made.")));
}

/* Findings that disappeared in base and reappeared at the same place relative to a moved BF16 edge (issue: moving
   the edge moved the problem instead of fixing it). One entry per moved problem, with the API's sentence. */
function movedProblems(cmp) {
  const moved = cmp.moved_problems || [];
  if (!moved.length) return null;
  const blocks = (list) => (list || []).join(", ") || "—";
  return h("div", { class: "alert alert-warning", role: "note", id: "compare-moved" },
    h("div", { class: "alert-body" },
      h("strong", { class: "alert-title" }, moved.length === 1 ? "The problem followed the boundary" : `${moved.length} problems followed the boundary`),
      h("ul", { class: "sentences" }, moved.map((m) => h("li", { "data-pattern": m.pattern, "data-side": m.side },
        h("div", { class: "finding-head" },
          h("strong", { class: "finding-pattern" }, patternLabel(m.pattern, m.label)),
          h("span", { class: "pair" }, h("span", null, `block ${blocks(m.base_blocks)}`), h("span", { class: "arrow", "aria-label": "to" }, " → "),
            h("span", null, `block ${blocks(m.head_blocks)}`)),
          h("span", { class: "muted small" },
            `${m.side === "end" ? "last" : "first"} FP8 block${m.distance_from_edge ? ` + ${m.distance_from_edge}` : ""}; BF16 ${m.side} blocks ${m.base_bf16_edge_blocks} → ${m.head_bf16_edge_blocks}`),
          m.tensor && (isNum(m.base_level) || isNum(m.head_level))
            ? h("span", { class: "muted small" }, `${m.tensor} underflows% ${fmtPct(m.base_level)} → ${fmtPct(m.head_level)}`) : null),
        h("div", { class: "small" }, m.summary))))));
}

const COST_ROWS = [
  ["bf16_gemm_share", "BF16 share of GEMM FLOPs", (v) => (isNum(v) ? `${(v * 100).toFixed(1)}%` : "—")],
  ["gemm_slowdown_vs_all_fp8_pct", "GEMM time above all-FP8", (v) => (isNum(v) ? `${v.toFixed(1)}%` : "—")],
  ["gemm_speedup_vs_all_bf16", "GEMM speed-up over all-BF16", (v) => (isNum(v) ? `${v.toFixed(2)}×` : "—")],
];

/* Both runs' recommendations side by side (the head's takes the base run as history): BF16 layers, GEMM
   overrides, recipe, predicted cost; items only in one side are marked added / removed. */
function compareRecommendations(cmp) {
  const recs = cmp.recommendations;
  if (!recs) return null;
  const skips = recs.skip_layers || {};
  const overrides = recs.gemm_overrides || {};
  const recipe = recs.recipe || {};
  const cost = recs.expected_cost || {};
  const mark = (which, inOther) => (inOther ? null : h("span", { class: "chip chip-small", "data-change": which }, which));
  const skipList = (side) => {
    const mine = skips[side] || [];
    const other = new Set(skips[side === "base" ? "head" : "base"] || []);
    return mine.length ? h("ul", { class: "plain-list", "data-list": "bf16" }, mine.map((n) => h("li", null, layerName(n), " ",
      mark(side === "base" ? "removed" : "added", other.has(n))))) : h("p", { class: "muted small" }, "none");
  };
  const overrideList = (side) => {
    const mine = overrides[side] || [];
    const other = new Map((overrides[side === "base" ? "head" : "base"] || []).map((o) => [o.layer, (o.gemms || []).join(",")]));
    return mine.length ? h("ul", { class: "plain-list", "data-list": "overrides" }, mine.map((o) => h("li", null, layerName(o.layer),
      h("span", { class: "mono small" }, ` ${(o.gemms || []).join(", ")} in BF16`), " ",
      other.has(o.layer) ? (other.get(o.layer) !== (o.gemms || []).join(",") ? h("span", { class: "chip chip-small", "data-change": "changed" }, "changed") : null)
        : mark(side === "base" ? "removed" : "added", false)))) : h("p", { class: "muted small" }, "none");
  };
  const column = (side, title) => h("div", { class: "rec-side", "data-side": side },
    h("h3", null, title),
    h("dl", { class: "kv" },
      h("dt", null, "Recipe"), h("dd", { "data-field": "recipe" }, recipe[`${side}_label`] || recipe[side] || "—"),
      h("dt", null, `Layers to BF16 (${(skips[side] || []).length})`), h("dd", null, skipList(side)),
      h("dt", null, `GEMM overrides (${(overrides[side] || []).length})`), h("dd", null, overrideList(side)),
      ...COST_ROWS.flatMap(([key, label, fmt]) => [h("dt", null, label), h("dd", { "data-cost": key }, fmt((cost[key] || {})[side]))]),
      h("dt", null, "Confidence"), h("dd", null, fmtShare((recs.confidence || {})[side]))));
  const history = recs.head_history;
  return card("Recommendations", {
    id: "compare-recs",
    subtitle: recs.same ? "Both runs get the same recommendation." : "What each run's recommendation says; the head's takes the base run as its history.",
  },
  (recs.summary || []).length ? h("ul", { class: "sentences", id: "compare-recs-summary" }, recs.summary.map((x) => h("li", null, x))) : null,
  h("div", { class: "grid-2" }, column("base", "Base"), column("head", "Head")),
  history && (history.advice || []).length ? h("div", { class: "rationale", id: "compare-recs-history" },
    h("strong", null, "With the base run as history"),
    h("ul", { class: "sentences small" }, history.advice.map((x) => h("li", null, x)))) : null);
}

function compareImageCard(ctx, base, headId) {
  const img = h("img", { id: "compare-img", class: "compare-img", alt: "" });
  const status = h("div", { class: "heatmap-status" });
  const frame = h("div", { class: "heatmap-frame" }, img, status);
  const open = h("a", { class: "btn btn-small btn-ghost", target: "_blank", rel: "noopener" }, "PNG");
  const openSvg = h("a", { class: "btn btn-small btn-ghost", target: "_blank", rel: "noopener" }, "SVG");
  let tensor = "gradient";
  const show = imageLoader(ctx, { img, frame, status, busyText: "Rendering comparison…",
    errorTitle: "Comparison image unavailable", undecodable: "the comparison image could not be decoded" });
  function load() {
    const src = `${API}/compare.png${qs({ base, head: headId, tensor })}`;
    open.href = src;
    openSvg.href = `${API}/compare.svg${qs({ base, head: headId, tensor })}`;
    img.alt = `${tensor} underflows% heatmaps of run ${base} (base) and run ${headId} (head) side by side, one colour scale`;
    show(src, load);
  }
  load();
  return card("Side by side", {
    id: "compare-image",
    subtitle: "Both heatmaps on one colour scale: base on the left, head on the right.",
  },
  h("div", { class: "controls" },
    selectField("Tensor", "compare-tensor", TENSORS.map((t) => [t, t]), tensor, (v) => {
      tensor = v;
      load();
    }),
    h("span", { class: "control-links" }, open, openSvg)),
  frame);
}

function compareSummary(cmp) {
  const sentences = Array.isArray(cmp.summary) ? cmp.summary : cmp.summary ? [String(cmp.summary)] : [];
  const notes = (cmp.notes || []).filter((n) => !sentences.includes(n));
  const unmatched = cmp.unmatched || {};
  const onlyBase = (unmatched.only_in_base || []).length;
  const onlyHead = (unmatched.only_in_head || []).length;
  return card("Summary", { id: "compare-summary" },
    sentences.length
      ? h("ul", { class: "sentences", id: "compare-sentences" }, sentences.map((x) => h("li", null, x)))
      : h("p", { class: "muted", id: "compare-sentences" }, "No difference worth a sentence."),
    notes.length ? h("ul", { class: "sentences muted small" }, notes.map((n) => h("li", null, n))) : null,
    onlyBase || onlyHead ? h("p", { class: "muted small" },
      `Layers match by exact name: ${plural(onlyBase, "layer")} only in base, ${plural(onlyHead, "layer")} only in head.`) : null);
}

function findingItem(f) {
  return h("li", { "data-pattern": f.pattern },
    h("div", { class: "finding-head" }, sevBadge(f.severity), h("strong", { class: "finding-pattern" }, patternLabel(f.pattern, f.label)),
      (f.layers || []).length ? h("span", { class: "muted small" }, plural(f.layers.length, "layer")) : null),
    f.summary ? h("div", { class: "small muted" }, f.summary) : null);
}

function compareFindings(cmp) {
  const block = (title, list, cls) => h("div", { class: ["delta-findings", cls] },
    h("h3", null, title, h("span", { class: "count" }, String(list.length))),
    list.length ? h("ul", null, list.map(findingItem)) : h("p", { class: "muted small" }, "none"));
  const changes = cmp.precision_changes || [];
  return card("Findings and precision", { id: "compare-findings" },
    block("Appeared in head", cmp.findings_appeared || [], "appeared"),
    block("Gone in head", cmp.findings_disappeared || [], "disappeared"),
    h("div", { class: "delta-findings" },
      h("h3", null, "Precision changes", h("span", { class: "count" }, String(changes.length))),
      changes.length ? h("ul", null, changes.map((c) => h("li", null, h("span", { class: "mono" }, c.layer), " ",
        h("span", { class: "muted" }, `${c.base ?? "—"} → ${c.head ?? "—"}`))))
        : h("p", { class: "muted small" }, "none")));
}

/* A change in percentage points. Below the noise floor (a base under 0.05 points) a relative change would be noise
   ("+25512 %"), so the API gives none and the cell says the change is in points only. */
function deltaCell(d, { pp = true } = {}) {
  if (!d || !isNum(d.change)) return h("span", { class: "muted" }, "—");
  const cls = d.change >= 0.005 ? "delta-up" : d.change <= -0.005 ? "delta-down" : "delta-zero";
  const rel = isNum(d.relative) ? ` (${fmtSigned(d.relative * 100, 0, "%")})` : "";
  const floor = d.below_noise_floor ? "; base below the noise floor: change in points, no percentage" : "";
  return h("span", { class: ["delta", cls], title: `${fmtNum(d.base)}% → ${fmtNum(d.head)}%${rel}${floor}`,
    "data-noise-floor": d.below_noise_floor ? "true" : null },
  fmtSigned(d.change, 2, pp || d.below_noise_floor ? " pp" : ""));
}

function pair(a, b, fmt = (v) => fmtPct(v)) {
  return h("span", { class: "pair" }, h("span", null, fmt(a)), h("span", { class: "arrow", "aria-label": "to" }, " → "), h("span", null, fmt(b)));
}

function compareGroups(cmp) {
  const groups = cmp.groups || [];
  const rows = groups.map((g) => h("tr", { "data-group": g.group },
    h("th", { scope: "row" }, g.group, h("div", { class: "muted small" }, plural(g.layers, "layer"))),
    TENSORS.map((t) => {
      const st = (g.stats || {})[t] || {};
      return h("td", { class: "num" }, pair(st.base, st.head), h("div", null, deltaCell(st)));
    }),
    h("td", { class: "num" }, pair((g.bf16 || {}).base, (g.bf16 || {}).head, (v) => fmtInt(v)),
      (g.moved_to_bf16 || []).length ? h("div", { class: "small muted" }, `+${g.moved_to_bf16.length} to BF16`) : null,
      (g.moved_to_fp8 || []).length ? h("div", { class: "small muted" }, `+${g.moved_to_fp8.length} to FP8`) : null)));
  return card("Per group", {
    id: "compare-groups-card",
    subtitle: "Mean underflow level (%) of the group's layers, base → head; change in percentage points.",
  }, groups.length ? h("div", { class: "table-scroll" }, h("table", { class: "table table-compact", id: "compare-groups" },
    h("thead", null, h("tr", null, h("th", { scope: "col" }, "Group"), TENSORS.map((t) => h("th", { scope: "col", class: "num" }, t)),
      h("th", { scope: "col", class: "num" }, "BF16 layers"))),
    h("tbody", null, rows))) : h("p", { class: "muted" }, "No groups."));
}

function compareLayers(cmp) {
  const state = { stat: "level", onlyChanged: false, query: "" };
  const stat = (row, tensor) => ((row.stats || {})[tensor] || {})[state.stat] || {};
  const rows = (cmp.layers || []).map((l, i) => ({ ...l, order: i }));
  const sevCell = (r) => {
    const sv = r.severity || {};
    return h("span", { class: "pair" }, sv.base ? sevBadge(sv.base) : h("span", { class: "muted" }, "—"),
      h("span", { class: "arrow", "aria-label": "to" }, " → "), sv.head ? sevBadge(sv.head) : h("span", { class: "muted" }, "—"));
  };
  const columns = [
    { key: "order", label: "#", num: true, render: (r) => h("span", { class: "muted" }, r.order + 1) },
    { key: "name", label: "Layer", cls: "col-layer", render: (r) => layerName(r.name) },
    { key: "group", label: "Group" },
    { key: "index", label: "Block", num: true, render: (r) => fmtNum(r.index) },
    { key: "sublayer", label: "Sublayer", render: (r) => r.sublayer || "—" },
    rows.some((r) => r.in !== "both") ? {
      key: "in", label: "In", render: (r) => (r.in === "both" ? h("span", { class: "muted" }, "both")
        : h("span", { class: "chip chip-small" }, `only ${r.in}`)),
    } : null,
    {
      key: "severity", label: "Severity", num: true,
      get: (r) => sevRank((r.severity || {}).head || "ok") - sevRank((r.severity || {}).base || "ok"),
      render: sevCell, title: "Base → head; sorts by the change",
    },
    ...TENSORS.flatMap((t) => [
      {
        key: `${t}-pair`, label: `${t[0].toUpperCase()}${t.slice(1)}`, num: true, sortable: true,
        get: (r) => stat(r, t).head, render: (r) => pair(stat(r, t).base, stat(r, t).head, (v) => fmtPct(v)),
        title: `${t} underflows% (${state.stat}), base → head`,
      },
      { key: `${t}-delta`, label: "Δ pp", num: true, get: (r) => stat(r, t).change, render: (r) => deltaCell(stat(r, t), { pp: false }), title: `${t} change, percentage points` },
    ]),
    {
      key: "status_changed", label: "Precision", get: (r) => (r.status_changed ? 1 : 0),
      render: (r) => (r.status_changed ? h("span", { class: "chip chip-small" }, `${(r.status || {}).base} → ${(r.status || {}).head}`) : h("span", { class: "muted" }, (r.status || {}).head || (r.status || {}).base || "—")),
    },
  ].filter(Boolean);
  const tableApi = sortableTable({
    id: "compare-layers", caption: "Per-layer changes, head − base", columns, rows: [],
    initial: { key: "gradient-delta", dir: -1 }, empty: "No layer matches.",
    rowAttrs: (r) => ({ "data-layer": r.name }),
  });
  const shown = h("span", { class: "muted small" });
  const changed = (r) => r.status_changed || (r.severity || {}).base !== (r.severity || {}).head || r.in !== "both";
  function apply() {
    const q = state.query.toLowerCase();
    const list = rows.filter((r) => (!state.onlyChanged || changed(r)) && (!q || r.name.toLowerCase().includes(q)));
    shown.textContent = `${list.length} of ${rows.length} layers`;
    tableApi.setRows(list);
  }
  apply();
  return card("Per layer", {
    id: "compare-layers-card",
    subtitle: "Underflows% per tensor, base → head, and the change in percentage points (red: more underflow, green: less). Click a header to sort.",
  },
  h("div", { class: "controls" },
    selectField("Statistic", "compare-stat", [["level", "level (p95, trailing window)"], ["max", "max"], ["mean", "mean"], ["last", "last"]], state.stat, (v) => {
      state.stat = v;
      apply();
    }),
    h("div", { class: "field field-inline" }, h("label", { for: "compare-filter" }, "Filter"),
      h("input", { type: "search", id: "compare-filter", placeholder: "layer name", oninput: (e) => { state.query = e.target.value.trim(); apply(); } })),
    h("div", { class: "field field-check" },
      h("input", { type: "checkbox", id: "compare-changed", onchange: (e) => { state.onlyChanged = e.target.checked; apply(); } }),
      h("label", { for: "compare-changed" }, "Only layers whose severity, precision or presence changed")),
    shown),
  h("div", { class: "table-scroll table-tall" }, tableApi.table));
}

// Run page: the layers card (filterable sortable per-layer table, the per-rank spread, the selected layer's chart).
//
// What each number is (said in the card): severity and levels are the analysis's (p95 of the trailing window
// after warm-up, worst rank, ranks reported as outliers left out); ranks the rank-outlier finding set aside are
// shown next to them, so the table tells the same story as the badge and the findings. Layers without FP8 data
// (BF16, FP8 without stats, not quantized) are n/a, never ok. The spread column is each rank's p95 over the run.

import { TENSORS } from "./constants.js";
import { sevColors, tensorColor, onThemeChange } from "./colors.js";
import { h, replace } from "./dom.js";
import { isNum, toNum, fmtNum, fmtPct, plural } from "./format.js";
import { api, qs, errorBox, sevRank } from "./api.js";
import { sevBadge, layerName, card, loading, selectField, sortableTable } from "./widgets.js";
import { lineChart } from "./chart.js";
import { PRECISION_ORDER, precisionChip } from "./precision.js";

const NA_REASON = {
  bf16: "ran in BF16: no FP8 statistics to assess",
  fp8_unobserved: "planned in FP8 but no FP8 statistics were logged: not assessed",
  ignored: "not a quantized GEMM layer: not assessed",
};

/* Ranks the rank-outlier finding set aside, per layer: [{rank, tensor, level, band}] worst first. */
export function outlierRanks(analysis, thresholds) {
  const byLayer = new Map();
  for (const f of analysis.findings || []) {
    if (f.pattern !== "rank_outlier") continue;
    for (const e of f.evidence || []) {
      if (!e.layer || e.rank === null || e.rank === undefined || !isNum(e.level)) continue;
      const list = byLayer.get(e.layer) || [];
      list.push({ rank: e.rank, tensor: e.tensor, level: e.level, band: bandOf(e.level, thresholds) });
      byLayer.set(e.layer, list);
    }
  }
  for (const list of byLayer.values()) list.sort((a, b) => b.level - a.level);
  return byLayer;
}

export function bandOf(v, th) {
  if (!isNum(v)) return null;
  if (v >= th.severe) return "severe";
  if (v >= th.critical) return "critical";
  if (v >= th.warning) return "warning";
  return "ok";
}

/* Per layer, per rank: the largest underflows% p95 over the three tensors (GET /layers?rank=r), for runs with a
 * few ranks. Returns Map(layer -> {min, max, worstRank, byRank}) or null. */
export async function rankSpread(run, signal) {
  if (!(run.ranks > 1 && run.ranks <= 16)) return null;
  const perRank = await Promise.all(Array.from({ length: run.ranks }, (_, r) =>
    api(`/runs/${run.id}/layers${qs({ rank: r })}`, { signal }).then((layers) => [r, layers], () => [r, null])));
  const spread = new Map();
  for (const [rank, layers] of perRank) {
    for (const layer of layers || []) {
      const p95s = (layer.stats || []).filter((st) => st.stat === "underflows%" && TENSORS.includes(st.tensor) && isNum(st.p95)).map((st) => st.p95);
      if (!p95s.length) continue;
      const entry = spread.get(layer.name) || { byRank: [] };
      entry.byRank.push([rank, Math.max(...p95s)]);
      spread.set(layer.name, entry);
    }
  }
  for (const entry of spread.values()) {
    const values = entry.byRank.map(([, v]) => v);
    entry.min = Math.min(...values);
    entry.max = Math.max(...values);
    entry.worstRank = entry.byRank.find(([, v]) => v === entry.max)[0];
  }
  return spread;
}

/* onPick(name | ""): after a layer is selected (a row clicked, select()) or closed, once the URL's `layer` says so. */
export function layersCard(ctx, run, analysis, layersInfo, state, spread, onPick = () => {}, recPromise = null) {
  const th = analysis.thresholds || {};
  const outliers = outlierRanks(analysis, th);
  // the analysis's verdict per layer when it gives one ("n/a": nothing of the layer was assessed), else its status
  const assessed = (r) => (r.verdict !== undefined && r.verdict !== null ? r.verdict !== "n/a" : r.status === "fp8");
  const verdict = (r) => (r.verdict && r.verdict !== "n/a" ? r.verdict : r.severity);
  const pctCell = (key) => (row) => {
    const v = row[key];
    if (!assessed(row)) return h("span", { class: "muted" }, "—");
    const band = bandOf(v, th);
    const tensor = key.split("_")[0];
    const detail = key.endsWith("_max") && row[`${tensor}_underflow_mean`] !== undefined
      ? `${tensor} underflows%: max ${fmtPct(row[`${tensor}_underflow_max`])}, mean ${fmtPct(row[`${tensor}_underflow_mean`])}, last ${fmtPct(row[`${tensor}_underflow_last`])} (worst rank after warm-up${outliers.has(row.name) ? ", outlier ranks left out" : ""})`
      : null;
    return h("span", { class: ["pct", band && band !== "ok" ? `tint-${band}` : null], title: detail }, isNum(v) ? fmtPct(v) : fmtNum(v));
  };
  // Severity over every rank: the analysis's (outlier ranks left out) or the worst outlier rank's band.
  const rows = (analysis.layers || []).map((l, i) => {
    const out = outliers.get(l.name) || [];
    const worstOut = out.length ? out[0] : null;
    const allRanks = worstOut && sevRank(worstOut.band) > sevRank(verdict(l)) ? worstOut.band : verdict(l);
    return { ...l, order: i, outliers: out, severity_all: assessed(l) ? allRanks : null };
  });
  const warningBand = rows.filter((r) => assessed(r) && verdict(r) === "warning").length;

  const multiRank = run.ranks > 1;
  const columns = [
    { key: "name", label: "Layer", cls: "col-layer", render: (r) => layerName(r.name) },
    { key: "group", label: "Group" },
    { key: "index", label: "Block", num: true, render: (r) => fmtNum(r.index) },
    { key: "sublayer", label: "Sublayer", render: (r) => r.sublayer || "—" },
    new Set(rows.map((l) => l.status)).size > 1
      ? { key: "status", label: "Status", render: (r) => h("span", { class: r.status === "fp8" ? "muted" : "chip chip-small" }, (r.status || r.precision || "").replace(/_/g, " ")) }
      : null,
    {
      key: "severity", label: "Severity", num: true, title: "Worst band over every rank (the analysis's, or an outlier rank's)",
      get: (r) => (r.severity_all ? sevRank(r.severity_all) : -1),
      render: (r) => {
        if (!assessed(r)) return h("span", { class: "badge badge-neutral sev-na", title: NA_REASON[r.status] || "no FP8 data" }, "n/a");
        const out = r.outliers[0];
        if (r.severity_all !== verdict(r) && out) {
          return h("span", { class: "sev-split" }, sevBadge(r.severity_all, `rank ${out.rank}: ${out.tensor} ${fmtPct(out.level)}; other ranks ${verdict(r)}`),
            h("span", { class: "muted small" }, ` rank ${out.rank} only`));
        }
        return sevBadge(verdict(r));
      },
    },
    {
      key: "worst_signal", label: "Worst signal",
      render: (r) => {
        if (!r.worst_signal) return h("span", { class: "muted" }, "—");
        const [tensor, ...rest] = r.worst_signal.split(" ");
        const stat = rest.join(" ").replace("underflows%", "UF%").replace("overflows%", "OF%");
        return h("span", { class: "nowrap", title: r.worst_signal }, tensor, " ", h("span", { class: "muted small" }, stat));
      },
    },
    { key: "worst_level", label: "Level", num: true, render: pctCell("worst_level"), title: "p95 of the trailing window after warm-up, worst rank (outlier ranks left out)" },
    { key: "gradient_underflow_max", label: "Grad max", num: true, render: pctCell("gradient_underflow_max"), title: "Gradient underflows%, max after warm-up, worst rank (outlier ranks left out)" },
    { key: "activation_underflow_max", label: "Act max", num: true, render: pctCell("activation_underflow_max"), title: "Activation underflows%, max after warm-up, worst rank (outlier ranks left out)" },
    { key: "weight_underflow_max", label: "Wt max", num: true, render: pctCell("weight_underflow_max"), title: "Weight underflows%, max after warm-up, worst rank (outlier ranks left out)" },
    multiRank ? {
      key: "outlier", label: "Outlier ranks", num: true, title: "Ranks the rank-outlier finding set aside: their level (p95 of the trailing window)",
      get: (r) => (r.outliers.length ? r.outliers[0].level : null),
      render: (r) => (r.outliers.length
        ? h("span", { class: "nowrap outlier-ranks" }, r.outliers.slice(0, 2).map((o) => h("span", { class: ["pct", o.band !== "ok" ? `tint-${o.band}` : null], title: `rank ${o.rank}, ${o.tensor} underflows%` }, `r${o.rank} ${fmtPct(o.level)}`)))
        : h("span", { class: "muted" }, "—")),
    } : null,
    spread ? {
      key: "spread", label: "Rank spread", num: true, title: "Per rank: p95 over the whole run of the worst tensor's underflows%; min–max over ranks and the worst rank",
      get: (r) => (spread.get(r.name) ? spread.get(r.name).max - spread.get(r.name).min : null),
      render: (r) => {
        const sp = spread.get(r.name);
        if (!sp) return h("span", { class: "muted" }, "—");
        return h("span", { class: "nowrap rank-spread", title: sp.byRank.map(([k, v]) => `rank ${k}: ${fmtPct(v)}`).join("\n") },
          `${fmtPct(sp.min)}–${fmtPct(sp.max)}`, h("span", { class: "muted small" }, ` r${sp.worstRank}`));
      },
    } : null,
    { key: "patterns", label: "Patterns", get: (r) => (r.patterns || []).join(","), render: (r) => (r.patterns || []).map((p) => h("span", { class: "chip chip-small" }, patternName(analysis, p))) },
    recPromise ? {
      key: "recommended", label: "Recommended", title: "The precision the recommendation runs this layer at (its headline: the ladder's rung, BF16 for the BF16 set, the recipe for a layer without stats)",
      get: (r) => (r.recommended ? PRECISION_ORDER.indexOf(r.recommended) : 99),
      render: (r) => (r.recommended === undefined ? h("span", { class: "muted" }, "…")
        : r.recommended ? h("span", { class: "nowrap" }, precisionChip(r.recommended), r.gemms ? h("span", { class: "muted small", title: "these GEMMs in BF16 (a GEMM override)" }, ` ${r.gemms.join("+")} BF16`) : null)
          : h("span", { class: "muted", title: "not a quantized GEMM layer" }, "—")),
    } : null,
  ].filter(Boolean);
  const statsOf = new Map((layersInfo || []).map((l) => [l.name, l.stats || []]));
  let selected = null;

  const chartSlot = h("div", { class: "chart-panel", id: "layer-chart" },
    h("p", { class: "muted chart-hint" }, "Select a layer (click a row, or press Enter on it) to plot its gradient / activation / weight underflow series."));
  const chart = {
    stat: state.get("stat_chart", "underflows%"),
    rank: state.get("chart_rank", ""),
    log: state.get("log") === "1",
    smoothing: Math.min(0.99, Math.max(0, Number(state.get("smooth", "0")) || 0)),
  };
  let tableApi;
  const filterInput = h("input", {
    type: "search", id: "layer-filter", placeholder: "e.g. lm_head, fc2, layers.3.", autocomplete: "off",
    oninput: () => applyFilter(),
  });
  const onlyFlagged = h("input", { type: "checkbox", id: "layer-flagged", onchange: () => applyFilter() });
  const shown = h("span", { class: "muted small", "aria-live": "polite" });
  function applyFilter() {
    const q = filterInput.value.trim().toLowerCase();
    const list = rows.filter((r) => (!q || r.name.toLowerCase().includes(q)) && (!onlyFlagged.checked || (r.severity_all && r.severity_all !== "ok")));
    shown.textContent = `${list.length} of ${rows.length} layers`;
    tableApi.setRows(list);
    markSelected();
  }
  function markSelected() {
    tableApi.table.querySelectorAll("tbody tr").forEach((tr) => {
      const on = tr.dataset.layer === selected;
      tr.classList.toggle("selected", on);
      tr.setAttribute("aria-selected", on ? "true" : "false");
    });
  }

  tableApi = sortableTable({
    id: "layers-table",
    caption: "Per-layer assessment; click a header to sort, a row to plot its series",
    columns,
    rows,
    initial: { key: "severity", dir: -1 }, // severe first (model order within a band), n/a last
    rowAttrs: (r) => ({ "data-layer": r.name, "data-severity": r.severity_all || "n/a" }),
    onRow: (r) => select(r.name),
    empty: "No layer matches.",
  });
  applyFilter();
  if (recPromise) {
    recPromise.then((rec) => {
      const byLayer = (rec.headline || {}).precision_by_layer || {};
      const gemms = new Map((rec.gemm_overrides || []).map((o) => [o.layer, o.gemms || []]));
      for (const r of rows) {
        r.recommended = byLayer[r.name] || null;
        r.gemms = gemms.get(r.name) || null;
      }
      if (ctx.alive()) applyFilter();
    }).catch(() => {
      for (const r of rows) r.recommended = null;
      if (ctx.alive()) applyFilter();
    });
  }

  let token = 0;
  let redraw = null;
  async function select(name) {
    selected = name;
    state.set({ layer: name });
    markSelected();
    onPick(name);
    const mine = ++token;
    const statNames = [...new Set((statsOf.get(name) || []).map((x) => x.stat))].sort((a, b) => (b.includes("underflows%") - a.includes("underflows%")) || a.localeCompare(b));
    if (statNames.length && !statNames.includes(chart.stat)) chart.stat = statNames[0];
    const rerun = () => select(name);
    const statPicker = statNames.length > 1 ? selectField("Stat", "chart-stat", statNames.map((x) => [x, x]), chart.stat, (v) => {
      chart.stat = v;
      state.set({ stat_chart: v === "underflows%" ? "" : v });
      rerun();
    }) : null;
    const rankPicker = multiRank ? selectField("Rank", "chart-rank", [["", `All ${run.ranks} ranks`], ...Array.from({ length: run.ranks }, (_, i) => [String(i), `rank ${i}`])], chart.rank, (v) => {
      chart.rank = v;
      state.set({ chart_rank: v });
      rerun();
    }) : null;
    const logBox = h("input", { type: "checkbox", id: "chart-log", checked: chart.log, onchange: (e) => {
      chart.log = e.target.checked;
      state.set({ log: chart.log });
      if (redraw) redraw();
    } });
    const smoothValue = h("output", { for: "chart-smooth", class: "muted small smooth-value" }, chart.smoothing.toFixed(2));
    const smoothRange = h("input", { type: "range", id: "chart-smooth", min: "0", max: "0.95", step: "0.05", value: String(chart.smoothing), oninput: (e) => {
      chart.smoothing = Number(e.target.value);
      smoothValue.textContent = chart.smoothing.toFixed(2);
      state.set({ smooth: chart.smoothing ? chart.smoothing : "" });
      if (redraw) redraw();
    } });
    const header = h("div", { class: "chart-head" },
      h("h3", null, h("span", { class: "mono" }, name)),
      h("div", { class: "controls" }, statPicker, rankPicker,
        h("div", { class: "field field-check" }, logBox, h("label", { for: "chart-log" }, "Log scale")),
        h("div", { class: "field field-inline" }, h("label", { for: "chart-smooth" }, "Smoothing"), smoothRange, smoothValue),
        h("button", { type: "button", class: "btn btn-small btn-ghost", onclick: () => {
          selected = null;
          redraw = null;
          state.set({ layer: "" });
          markSelected();
          onPick("");
          replace(chartSlot, h("p", { class: "muted chart-hint" }, "Select a layer to plot its series."));
        } }, "Close")));
    if (statsOf.has(name) && !statNames.length) {
      const row = rows.find((r) => r.name === name);
      replace(chartSlot, header, h("div", { class: "alert alert-info" },
        `No statistics were logged for this layer${row && row.status ? ` (status: ${row.status.replace(/_/g, " ")})` : ""}, so there is no series to plot.`));
      return;
    }
    replace(chartSlot, header, loading(`Loading ${chart.stat} series…`));
    if (!chartSlot.isConnected) return;
    if (chartSlot.getBoundingClientRect().top < 0) chartSlot.scrollIntoView({ block: "start", behavior: "smooth" });
    const results = await Promise.all(TENSORS.map((tensor) =>
      api(`/runs/${run.id}/series${qs({ layer: name, tensor, stat: chart.stat, rank: chart.rank })}`, { signal: ctx.signal })
        .then((body) => ({ tensor, body }), (err) => ({ tensor, err }))));
    if (mine !== token || !ctx.alive()) return;
    const got = results.filter((r) => r.body);
    if (!got.length) {
      replace(chartSlot, header, errorBox(results[0].err, { title: "No series for this layer" }));
      return;
    }
    const seriesOf = () => {
      const series = [];
      for (const { tensor, body } of got) {
        const ranks = body.series.length;
        for (const sr of body.series) {
          series.push({
            label: ranks > 1 || chart.rank !== "" ? `${tensor} r${sr.rank}` : tensor,
            color: tensorColor(tensor),
            opacity: ranks > 1 ? 0.75 : null,
            points: sr.iterations.map((it, k) => [it, toNum(sr.values[k])]),
          });
        }
      }
      return series;
    };
    const isUnderflow = chart.stat.endsWith("underflows%");
    const guides = () => (isUnderflow ? ["warning", "critical", "severe"].map((band) => ({ value: th[band], label: band, color: sevColors(band).line }))
      .filter((g) => isNum(g.value)) : []);
    const missing = results.filter((r) => r.err).map((r) => r.tensor);
    const aggregation = chart.rank !== "" ? `rank ${chart.rank} only` : multiRank ? `one line per rank (${run.ranks} ranks)` : "rank 0";
    const legend = h("div", { class: "legend" }, got.map(({ tensor, body }) => h("span", { class: "legend-item" },
      h("span", { class: "swatch", "data-tensor": tensor }), tensor,
      body.series.length > 1 ? h("span", { class: "muted small" }, ` (${body.series.length} ranks)`) : null)),
    h("span", { class: "muted small chart-aggregation" }, `Raw logged values, ${aggregation}${chart.smoothing ? `; smoothed (EMA ${chart.smoothing.toFixed(2)}), raw values faint` : ""}`),
    missing.length ? h("span", { class: "muted small" }, `no ${missing.join(" / ")} series`) : null);
    const paintSwatches = () => legend.querySelectorAll(".swatch").forEach((sw) => { sw.style.background = tensorColor(sw.dataset.tensor); });
    const draw = () => lineChart({
      series: seriesOf(), guides: guides(), width: chartSlot.clientWidth - 2, height: 300, xLabel: "iteration", yLabel: chart.stat,
      unit: chart.stat.endsWith("%") ? "%" : "", title: `${name}: ${chart.stat} by iteration`, log: chart.log, smoothing: chart.smoothing,
    });
    const holder = h("div", { class: "chart-holder" }, draw());
    paintSwatches();
    replace(chartSlot, header, legend, holder);
    redraw = () => {
      if (mine !== token) return;
      replace(holder, draw());
      paintSwatches();
      const note = legend.querySelector(".chart-aggregation");
      note.textContent = `Raw logged values, ${aggregation}${chart.smoothing ? `; smoothed (EMA ${chart.smoothing.toFixed(2)}), raw values faint` : ""}`;
    };
    let lastWidth = chartSlot.clientWidth;
    const observer = new ResizeObserver(() => {
      if (Math.abs(chartSlot.clientWidth - lastWidth) > 8 && mine === token) {
        lastWidth = chartSlot.clientWidth;
        redraw();
      }
    });
    observer.observe(chartSlot);
    ctx.onLeave(() => observer.disconnect());
    ctx.onLeave(onThemeChange(() => redraw && redraw()));
  }

  const excluded = [...outliers.values()].reduce((n, list) => n + list.length, 0);
  const el = card("Layers", {
    id: "layers",
    subtitle: "Levels are the analysis's: p95 of the trailing window after warm-up, worst rank" +
      (excluded ? `, with the ${plural(excluded, "series", "series")} of ranks reported as outliers shown in their own column.` : ".") +
      " Layers without FP8 data are n/a.",
  },
  h("div", { class: "controls layer-controls" },
    h("div", { class: "field field-inline" }, h("label", { for: "layer-filter" }, "Filter"), filterInput),
    h("div", { class: "field field-check" }, onlyFlagged, h("label", { for: "layer-flagged" }, "Only flagged layers")),
    shown,
    warningBand ? h("span", { class: "muted small" }, `${plural(warningBand, "layer")} in the warning band`) : null),
  chartSlot,
  h("div", { class: "table-scroll table-tall" }, tableApi.table));

  const api_ = {
    el,
    select(name, { scroll = true } = {}) {
      if (!rows.some((r) => r.name === name)) return;
      filterInput.value = "";
      onlyFlagged.checked = false;
      applyFilter();
      select(name);
      const tr = tableApi.table.querySelector(`tr[data-layer="${CSS.escape(name)}"]`);
      if (tr) tr.scrollIntoView({ block: "nearest" });
      if (scroll) chartSlot.scrollIntoView({ block: "start", behavior: "smooth" });
    },
  };
  const initial = state.get("layer");
  if (initial) ctx.later(() => api_.select(initial, { scroll: false }), 0);
  return api_;
}

function patternName(analysis, pattern) {
  const f = (analysis.findings || []).find((x) => x.pattern === pattern);
  return f && f.label ? f.label : pattern.replace(/_/g, " ");
}


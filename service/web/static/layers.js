// Run page: the layers card (filterable sortable per-layer table and the selected layer's series chart).

import { TENSORS, SEV_COLORS, TENSOR_COLORS } from "./constants.js";
import { h, replace } from "./dom.js";
import { isNum, toNum, fmtNum } from "./format.js";
import { api, qs, errorBox, sevRank } from "./api.js";
import { sevBadge, layerName, card, loading, selectField, sortableTable } from "./widgets.js";
import { lineChart } from "./chart.js";

export function layersCard(ctx, run, analysis, layersInfo) {
  const th = analysis.thresholds || {};
  const bands = (v) => {
    if (!isNum(v)) return null;
    if (v >= th.severe) return "severe";
    if (v >= th.critical) return "critical";
    if (v >= th.warning) return "warning";
    return null;
  };
  const pctCell = (key) => (row) => {
    const v = row[key];
    const band = bands(v);
    const tensor = key.split("_")[0];
    const detail = key.endsWith("_max") && row[`${tensor}_underflow_mean`] !== undefined
      ? `${tensor} underflows%: max ${fmtNum(v)}, mean ${fmtNum(row[`${tensor}_underflow_mean`])}, last ${fmtNum(row[`${tensor}_underflow_last`])}`
      : null;
    return h("span", { class: ["pct", band ? `tint-${band}` : null], title: detail }, isNum(v) ? v.toFixed(3) : fmtNum(v));
  };
  const columns = [
    { key: "order", label: "#", num: true, get: (r) => r.order, render: (r) => h("span", { class: "muted" }, r.order + 1), title: "Model order" },
    {
      key: "name", label: "Layer", cls: "col-layer",
      render: (r) => layerName(r.name),
    },
    { key: "group", label: "Group" },
    { key: "index", label: "Block", num: true, render: (r) => fmtNum(r.index) },
    { key: "sublayer", label: "Sublayer", render: (r) => r.sublayer || "—" },
    new Set((analysis.layers || []).map((l) => l.status)).size > 1
      ? { key: "status", label: "Status", render: (r) => h("span", { class: r.status === "fp8" ? "muted" : "chip chip-small" }, (r.status || r.precision || "").replace(/_/g, " ")) }
      : null,
    { key: "severity", label: "Severity", get: (r) => sevRank(r.severity), render: (r) => sevBadge(r.severity), num: true },
    {
      key: "worst_signal", label: "Worst signal",
      render: (r) => {
        if (!r.worst_signal) return h("span", { class: "muted" }, "—");
        const [tensor, ...rest] = r.worst_signal.split(" ");
        const stat = rest.join(" ").replace("underflows%", "UF%").replace("overflows%", "OF%");
        return h("span", { class: "nowrap", title: r.worst_signal }, tensor, " ", h("span", { class: "muted small" }, stat));
      },
    },
    { key: "worst_level", label: "Level", num: true, render: pctCell("worst_level"), title: "Level of the worst signal (%)" },
    { key: "gradient_underflow_max", label: "Grad max", num: true, render: pctCell("gradient_underflow_max"), title: "Gradient underflows%, max" },
    { key: "activation_underflow_max", label: "Act max", num: true, render: pctCell("activation_underflow_max"), title: "Activation underflows%, max" },
    { key: "weight_underflow_max", label: "Wt max", num: true, render: pctCell("weight_underflow_max"), title: "Weight underflows%, max" },
    { key: "patterns", label: "Patterns", get: (r) => (r.patterns || []).join(","), render: (r) => (r.patterns || []).map((p) => h("span", { class: "chip chip-small" }, p)) },
  ].filter(Boolean);
  const rows = (analysis.layers || []).map((l, i) => ({ ...l, order: i }));
  const statsOf = new Map((layersInfo || []).map((l) => [l.name, l.stats || []]));
  let selected = null;

  const chartSlot = h("div", { class: "chart-panel", id: "layer-chart" },
    h("p", { class: "muted chart-hint" }, "Select a layer (click a row, or press Enter on it) to plot its gradient / activation / weight underflow series."));
  const stat = { value: "underflows%" };
  let tableApi;
  const filterInput = h("input", {
    type: "search", id: "layer-filter", placeholder: "e.g. lm_head, fc2, layers.3.", autocomplete: "off",
    oninput: () => applyFilter(),
  });
  const onlyFlagged = h("input", { type: "checkbox", id: "layer-flagged", onchange: () => applyFilter() });
  const shown = h("span", { class: "muted small", "aria-live": "polite" });
  function applyFilter() {
    const q = filterInput.value.trim().toLowerCase();
    const list = rows.filter((r) => (!q || r.name.toLowerCase().includes(q)) && (!onlyFlagged.checked || r.severity !== "ok"));
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
    rowAttrs: (r) => ({ "data-layer": r.name, "data-severity": r.severity }),
    onRow: (r) => select(r.name),
    empty: "No layer matches.",
  });
  applyFilter();

  let token = 0;
  async function select(name) {
    selected = name;
    markSelected();
    const mine = ++token;
    const statNames = [...new Set((statsOf.get(name) || []).map((x) => x.stat))].sort((a, b) => (b.includes("underflows%") - a.includes("underflows%")) || a.localeCompare(b));
    if (statNames.length && !statNames.includes(stat.value)) stat.value = statNames[0];
    const statPicker = statNames.length > 1 ? selectField("Stat", "chart-stat", statNames.map((x) => [x, x]), stat.value, (v) => {
      stat.value = v;
      select(name);
    }) : null;
    const header = h("div", { class: "chart-head" },
      h("h3", null, h("span", { class: "mono" }, name)),
      h("div", { class: "controls" }, statPicker,
        h("button", { type: "button", class: "btn btn-small btn-ghost", onclick: () => {
          selected = null;
          markSelected();
          replace(chartSlot, h("p", { class: "muted chart-hint" }, "Select a layer to plot its series."));
        } }, "Close")));
    if (statsOf.has(name) && !statNames.length) {
      const row = rows.find((r) => r.name === name);
      replace(chartSlot, header, h("div", { class: "alert alert-info" },
        `No statistics were logged for this layer${row && row.status ? ` (status: ${row.status.replace(/_/g, " ")})` : ""}, so there is no series to plot.`));
      return;
    }
    replace(chartSlot, header, loading(`Loading ${stat.value} series…`));
    if (!chartSlot.isConnected) return;
    if (chartSlot.getBoundingClientRect().top < 0) chartSlot.scrollIntoView({ block: "start", behavior: "smooth" });
    const results = await Promise.all(TENSORS.map((tensor) =>
      api(`/runs/${run.id}/series${qs({ layer: name, tensor, stat: stat.value })}`, { signal: ctx.signal })
        .then((body) => ({ tensor, body }), (err) => ({ tensor, err }))));
    if (mine !== token || !ctx.alive()) return;
    const got = results.filter((r) => r.body);
    if (!got.length) {
      replace(chartSlot, header, errorBox(results[0].err, { title: "No series for this layer" }));
      return;
    }
    const series = [];
    for (const { tensor, body } of got) {
      const ranks = body.series.length;
      for (const sr of body.series) {
        series.push({
          label: ranks > 1 ? `${tensor} r${sr.rank}` : tensor,
          color: TENSOR_COLORS[tensor],
          opacity: ranks > 1 ? 0.75 : null,
          points: sr.iterations.map((it, k) => [it, toNum(sr.values[k])]),
        });
      }
    }
    const isUnderflow = stat.value.endsWith("underflows%");
    const guides = isUnderflow ? [
      { value: th.warning, label: "warning", color: SEV_COLORS.warning },
      { value: th.critical, label: "critical", color: SEV_COLORS.critical },
      { value: th.severe, label: "severe", color: SEV_COLORS.severe },
    ].filter((g) => isNum(g.value)) : [];
    const missing = results.filter((r) => r.err).map((r) => r.tensor);
    const legend = h("div", { class: "legend" }, got.map(({ tensor, body }) => h("span", { class: "legend-item" },
      h("span", { class: "swatch", style: { background: TENSOR_COLORS[tensor] } }), tensor,
      body.series.length > 1 ? h("span", { class: "muted small" }, ` (${body.series.length} ranks)`) : null)),
    missing.length ? h("span", { class: "muted small" }, `no ${missing.join(" / ")} series`) : null);
    const draw = () => lineChart({
      series, guides, width: chartSlot.clientWidth - 2, height: 300, xLabel: "iteration", yLabel: stat.value,
      unit: stat.value.endsWith("%") ? "%" : "", title: `${name}: ${stat.value} by iteration`,
    });
    const holder = h("div", { class: "chart-holder" }, draw());
    replace(chartSlot, header, legend, holder);
    let lastWidth = chartSlot.clientWidth;
    const observer = new ResizeObserver(() => {
      if (Math.abs(chartSlot.clientWidth - lastWidth) > 8 && mine === token) {
        lastWidth = chartSlot.clientWidth;
        replace(holder, draw());
      }
    });
    observer.observe(chartSlot);
    ctx.onLeave(() => observer.disconnect());
  }

  const el = card("Layers", {
    id: "layers",
    subtitle: "Per-layer assessment from the analysis. Underflow cells are tinted by band; click a header to sort.",
  },
  h("div", { class: "controls layer-controls" },
    h("div", { class: "field field-inline" }, h("label", { for: "layer-filter" }, "Filter"), filterInput),
    h("div", { class: "field field-check" }, onlyFlagged, h("label", { for: "layer-flagged" }, "Only flagged layers")),
    shown),
  chartSlot,
  h("div", { class: "table-scroll table-tall" }, tableApi.table));

  return {
    el,
    select(name) {
      if (!rows.some((r) => r.name === name)) return;
      filterInput.value = "";
      onlyFlagged.checked = false;
      applyFilter();
      select(name);
      const tr = tableApi.table.querySelector(`tr[data-layer="${CSS.escape(name)}"]`);
      if (tr) tr.scrollIntoView({ block: "nearest" });
      chartSlot.scrollIntoView({ block: "start", behavior: "smooth" });
    },
  };
}

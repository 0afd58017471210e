// Run page view (#/runs/<id>?...): header, figures, ingest warnings and report, the settings the policy is
// computed with (thresholds, GPU, TE version), and the heatmap / findings / recommendation / layers cards.
//
// The hash is a deep link to what is shown: tensor, stat, rank, sublayer (heatmap); layer, stat_chart, chart_rank,
// log, smooth (layer chart); rec (recommendation tab); warning, critical, severe, gpu, te (settings: changing
// them re-renders the page with a recomputed analysis and recommendation). A live run's page (live.js) keeps its
// selects here too: tensor, stat, scale_tensor, scale_stat.

import { TERMINAL } from "./constants.js";
import { h, replace, $ } from "./dom.js";
import { fmtInt, fmtNum, fmtBytes, fmtDate, fmtAgo, fmtDuration, fmtPct, plural, runLabel, patternLabel } from "./format.js";
import { API, api, qs, errorBox, analysisOf, overallSeverity } from "./api.js";
import { sevBadge, statusBadge, chip, figure, card, loading } from "./widgets.js";
import { route, go, setTitle } from "./router.js";
import { hashState } from "./hashstate.js";
import { heatmapCard } from "./heatmap.js";
import { findingsCard } from "./findings.js";
import { recommendationCard, recommendationJson } from "./recommendation.js";
import { frontierCard } from "./frontier.js";
import { layersCard, rankSpread } from "./layers.js";
import { liveView } from "./live.js";
import { storyCard } from "./story.js";
import { paramsCard } from "./params.js";
import { runActions } from "./run_actions.js";
import { notesCard } from "./notes.js";
import { curvesCard } from "./run_curves.js";

const THRESHOLD_KEYS = ["warning", "critical", "severe"];
// Lines skipped or duplicated above this share of the lines read are shown as a warning above the figures.
const LARGE_SHARE = 0.01;

export async function runView(ctx, runId, query) {
  const view = $("#view");
  const state = hashState(ctx, `/runs/${runId}`, query);
  setTitle(`Run ${runId}`);
  replace(view, loading("Loading run…"));
  const run = await api(`/runs/${runId}`, { signal: ctx.signal });
  setTitle(runLabel(run));
  if (run.status === "live") return liveView(ctx, run, state); // a training job streaming its logs (live.js)

  const sevSlot = h("span", { class: "head-sev" });
  const actions = runActions(ctx, run); // Retry / Delete for a token that may
  const head = h("div", { class: "page-head" },
    h("div", null,
      h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/runs" }, "Runs"), " / ",
        h("a", { href: `#/runs${qs({ project: run.project })}` }, run.project)),
      h("h1", null, h("bdi", { class: "run-label" }, runLabel(run)), " ", h("span", { class: "muted run-id" }, `#${run.id}`)),
      h("div", { class: "run-meta" },
        statusBadge(run.status), sevSlot,
        h("span", { class: "run-tags", id: "run-head-tags" }, run.tags.map((t) => chip(t, `#/runs${qs({ tag: t })}`))),
        h("span", { class: "muted small", title: run.created_at }, `created ${fmtDate(run.created_at)} (${fmtAgo(run.created_at)})`))),
    h("div", { class: "page-actions" },
      run.status === "ready" ? h("a", { class: "btn", href: `#/compare${qs({ base: run.id })}` }, "Compare…") : null,
      run.status === "ready" ? h("a", { class: "btn", href: `${API}/runs/${run.id}/metrics.csv`, download: "" }, "Metrics CSV") : null,
      h("a", { class: "btn btn-ghost", href: `${API}/runs/${run.id}`, target: "_blank", rel: "noopener" }, "API"),
      actions.slot),
    actions.problem);

  if (run.status !== "ready") {
    const busy = !TERMINAL.has(run.status);
    replace(view, head,
      run.status === "failed"
        ? h("div", { class: "alert alert-error", role: "alert" }, h("div", { class: "alert-body" },
          h("strong", { class: "alert-title" }, "Ingest failed"), h("div", { class: "error-detail" }, run.error || "no reason recorded")))
        : h("div", { class: "alert alert-info", role: "status" }, h("span", { class: "spinner", "aria-hidden": "true" }),
          ` This run is ${run.status}; the page updates when it is ready.`),
      notesCard(ctx, run), ingestCard(run));
    if (busy) ctx.later(() => route(), 1000);
    return;
  }

  const thresholds = Object.fromEntries(THRESHOLD_KEYS.map((k) => [k, state.get(k)]).filter(([, v]) => v !== ""));
  const options = { gpu: state.get("gpu"), te_version: state.get("te") };
  const custom = Object.keys(thresholds).length > 0 || Boolean(options.gpu || options.te_version);
  const overrides = custom ? {
    ...(Object.keys(thresholds).length ? { thresholds: Object.fromEntries(Object.entries(thresholds).map(([k, v]) => [k, Number(v)])) } : {}),
    ...(options.gpu ? { gpu: options.gpu } : {}),
    ...(options.te_version ? { te_version: options.te_version } : {}),
  } : null;

  const figures = h("div", { class: "figures", id: "run-figures" },
    figure("Ranks", fmtInt(run.ranks)),
    figure("Layers", fmtInt(run.layer_count)),
    figure("Series", fmtInt(run.series_count)),
    figure("Points", fmtInt(run.points)),
    figure("Iterations", run.iteration_min === null ? "—" : `${fmtInt(run.iteration_min)}–${fmtInt(run.iteration_max)}`),
    figure("Lines read", fmtInt(run.lines_read), run.lines_skipped ? `${fmtInt(run.lines_skipped)} skipped` : null),
    figure("Upload", fmtBytes(run.upload_bytes), `ingest ${fmtDuration(run.started_at, run.finished_at)}`));

  const heatmapSlot = h("div");
  const findingsSlot = card("Findings", { id: "findings" }, loading("Analysing…"));
  const recSlot = card("Recommendation", { id: "recommendation" }, loading("Computing the recommendation…"));
  const frontierSlot = card("Speed and risk", { id: "frontier" }, loading("Placing the recommendation on its frontier…"));
  const layersSlot = card("Layers", { id: "layers" }, loading("Loading layers…"));
  const ingest = ingestCard(run);
  const storySlot = h("div", { id: "live-story-slot" }); // a run streamed live: its events (story.js)
  const analysisPromise = analysisOf(run.id, ctx.signal, Object.keys(thresholds).length ? thresholds : null);
  const recPromise = recommendationJson(ctx, run, overrides); // one answer for the cards and the layer table
  const curves = curvesCard(ctx, run, state, { analysisPromise }); // its read-out follows the heatmap (curves.follow)
  replace(view, head, ingestWarning(run, ingest), figures, paramsCard(run), notesCard(ctx, run), settingsForm(run, state, thresholds, options), heatmapSlot,
    curves.el, findingsSlot, recSlot, frontierSlot, layersSlot, storySlot, ingest);
  curves.refresh();
  storyCard(ctx, run).then((el) => {
    if (el && ctx.alive()) replace(storySlot, el);
  }).catch((err) => {
    if (err.name === "AbortError" || !ctx.alive()) return;
    replace(storySlot, card("While it trained", { id: "live-story" }, errorBox(err, { title: "Live history unavailable" })));
  });

  let layersApi = null;
  const layersPromise = api(`/runs/${run.id}/layers`, { signal: ctx.signal }).catch(() => null);
  const spreadPromise = rankSpread(run, ctx.signal).catch(() => null);
  const openLayer = (layer) => {
    if (layersApi) layersApi.select(layer); // puts it in the URL's `layer`, which the curves' read-out names
  };

  analysisPromise.then(async (analysis) => {
    if (!ctx.alive()) return;
    const sev = overallSeverity(analysis);
    const lead = (analysis.findings || [])[0];
    replace(sevSlot, sevBadge(sev, "overall severity: the worst finding"),
      lead ? h("span", { class: "muted small head-pattern" }, ` ${patternLabel(lead.pattern, lead.label)}`) : null);
    findingsSlot.replaceWith(findingsCard(analysis, openLayer));
    const [layersInfo, spread] = await Promise.all([layersPromise, spreadPromise]);
    if (!ctx.alive()) return;
    replace(heatmapSlot, heatmapCard(ctx, run, analysis, layersInfo, state, openLayer, curves.follow));
    layersApi = layersCard(ctx, run, analysis, layersInfo, state, spread, () => curves.reread(), recPromise); // a row clicked too
    layersSlot.replaceWith(layersApi.el);
  }).catch((err) => {
    if (err.name === "AbortError" || !ctx.alive()) return;
    replace(findingsSlot.querySelector(".card-body"), errorBox(err, { title: "Analysis failed" }));
    replace(layersSlot.querySelector(".card-body"), errorBox(err));
    layersPromise.then((layersInfo) => replace(heatmapSlot, heatmapCard(ctx, run, null, layersInfo, state, null, curves.follow)));
  });

  frontierCard(ctx, run, overrides, recPromise).then((el) => {
    if (ctx.alive()) frontierSlot.replaceWith(el);
  }).catch((err) => {
    if (err.name === "AbortError" || !ctx.alive()) return;
    replace(frontierSlot.querySelector(".card-body"), errorBox(err, { title: "No frontier" }));
  });
  recommendationCard(ctx, run, state, overrides, recPromise).then((el) => {
    if (ctx.alive()) recSlot.replaceWith(el);
  }).catch((err) => {
    if (err.name === "AbortError" || !ctx.alive()) return;
    replace(recSlot.querySelector(".card-body"), errorBox(err, { title: "No recommendation" }));
  });
}

/* Thresholds, GPU and TE version the analysis and recommendation are computed with; Apply puts them in the URL
 * (so the page is a link to that what-if) and recomputes. */
function settingsForm(run, state, thresholds, options) {
  const input = (id, label, value, attrs) => h("div", { class: "field" },
    h("label", { for: id }, label), h("input", { id, value: value || "", autocomplete: "off", ...attrs }));
  const number = { type: "number", min: "0", step: "any", inputmode: "decimal" };
  const custom = Object.keys(thresholds).length || options.gpu || options.te_version;
  const form = h("form", {
    class: "settings-form", id: "run-settings", "aria-label": "Settings the policy is computed with",
    onsubmit: (e) => {
      e.preventDefault();
      const values = Object.fromEntries(THRESHOLD_KEYS.map((k) => [k, $(`#set-${k}`).value.trim()]));
      go(`/runs/${run.id}`, { ...state.all(), ...values, gpu: $("#set-gpu").value.trim(), te: $("#set-te").value.trim() });
    },
  },
  input("set-warning", "Warning ≥ %", thresholds.warning, { ...number, placeholder: "0.5" }),
  input("set-critical", "Critical ≥ %", thresholds.critical, { ...number, placeholder: "2" }),
  input("set-severe", "Severe ≥ %", thresholds.severe, { ...number, placeholder: "4" }),
  input("set-gpu", "GPU", options.gpu, { type: "text", placeholder: run.metadata.gpu || run.metadata.gpu_arch || "from metadata (e.g. H100, B200)" }),
  input("set-te", "TE version", options.te_version, { type: "text", placeholder: run.metadata.te_version || "from metadata (e.g. 2.8)" }),
  h("div", { class: "settings-actions" },
    h("button", { type: "submit", class: "btn btn-primary", id: "settings-apply" }, "Recompute"),
    custom ? h("button", {
      type: "button", class: "btn btn-ghost", id: "settings-reset",
      onclick: () => go(`/runs/${run.id}`, { ...state.all(), warning: "", critical: "", severe: "", gpu: "", te: "" }),
    }, "Defaults") : null));
  return h("details", { class: "card details-card settings-card", id: "settings", open: custom ? true : null },
    h("summary", null, h("span", { class: "summary-title" }, "Settings"),
      h("span", { class: "muted small", id: "settings-summary" }, custom
        ? ` custom: ${[...Object.entries(thresholds).map(([k, v]) => `${k} ${fmtNum(Number(v))}%`), options.gpu ? `GPU ${options.gpu}` : null,
          options.te_version ? `TE ${options.te_version}` : null].filter(Boolean).join(", ")}`
        : " default thresholds (0.5 / 2 / 4 %), GPU and TE version from the run's metadata")),
    h("div", { class: "card-body" }, form));
}

/* Lines the ingest skipped or de-duplicated, in a warning above the figures when they are a large share. */
function ingestWarning(run, ingest) {
  const read = Math.max(1, run.lines_read + run.lines_skipped);
  const parts = [];
  if (run.lines_skipped && run.lines_skipped / read >= LARGE_SHARE) {
    parts.push(`${fmtInt(run.lines_skipped)} lines (${fmtPct((100 * run.lines_skipped) / read, 1)}) were not statistics lines and were skipped`);
  }
  if (run.lines_duplicated && run.lines_duplicated / read >= LARGE_SHARE) {
    parts.push(`${fmtInt(run.lines_duplicated)} points (${fmtPct((100 * run.lines_duplicated) / read, 1)}) were logged twice for the same iteration; the last value was kept`);
  }
  if (!parts.length) return null;
  return h("div", { class: "alert alert-warning", role: "status", id: "ingest-warning" },
    h("div", { class: "alert-body" }, h("strong", { class: "alert-title" }, "Check the ingest"), parts.join("; "), ". ",
      h("button", { type: "button", class: "link-button", onclick: () => {
        ingest.open = true;
        ingest.scrollIntoView({ block: "start", behavior: "smooth" });
      } }, "Open the ingest report")));
}

function ingestCard(run) {
  const report = run.ingest_report || {};
  const files = report.files || [];
  const rows = files.map((f) => h("tr", null,
    h("td", { class: "mono" }, f.path), h("td", null, f.kind), h("td", { class: "num" }, fmtInt(f.rank)),
    h("td", { class: "num" }, fmtInt(f.lines_read)), h("td", { class: "num" }, fmtInt(f.skipped_lines ?? f.lines_unrecognised))));
  const samples = files.flatMap((f) => (f.skipped_samples || []).map((smp) => `${f.path}: ${typeof smp === "string" ? smp : JSON.stringify(smp)}`));
  return h("details", { class: "card details-card", id: "ingest" },
    h("summary", null, h("span", { class: "summary-title" }, "Ingest report"),
      h("span", { class: "muted small" }, ` ${plural(files.length, "file")} · sha256 ${run.sha256.slice(0, 12)}… · ${run.upload_filename || "upload"}`)),
    h("div", { class: "card-body" },
      h("dl", { class: "kv" },
        h("dt", null, "Lines read"), h("dd", null, fmtInt(run.lines_read)),
        h("dt", null, "Skipped"), h("dd", { id: "ingest-skipped" }, fmtInt(run.lines_skipped)),
        h("dt", null, "Blank"), h("dd", null, fmtInt(run.lines_blank)),
        h("dt", null, "Duplicated"), h("dd", { id: "ingest-duplicated" }, fmtInt(run.lines_duplicated)),
        h("dt", null, "Started"), h("dd", null, fmtDate(run.started_at)),
        h("dt", null, "Finished"), h("dd", null, fmtDate(run.finished_at)),
        h("dt", null, "Metadata"), h("dd", { class: "mono" }, Object.keys(run.metadata || {}).length ? JSON.stringify(run.metadata) : "none")),
      rows.length ? h("div", { class: "table-scroll" }, h("table", { class: "table table-compact" },
        h("thead", null, h("tr", null, ["File", "Kind", "Rank", "Lines", "Skipped"].map((x, i) =>
          h("th", { scope: "col", class: i >= 2 ? "num" : null }, x)))),
        h("tbody", null, rows))) : null,
      samples.length ? h("pre", { class: "code code-small" }, samples.slice(0, 20).join("\n")) : null));
}

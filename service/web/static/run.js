// Run page view (#/runs/<id>): header, figures, ingest report; lays out the heatmap/findings/recommendation/layers cards.

import { TERMINAL } from "./constants.js";
import { h, replace, $ } from "./dom.js";
import { fmtInt, fmtBytes, fmtDate, fmtAgo, fmtDuration, plural, runLabel } from "./format.js";
import { API, api, qs, errorBox, analysisOf, overallSeverity } from "./api.js";
import { sevBadge, statusBadge, chip, figure, card, loading } from "./widgets.js";
import { route, setTitle } from "./router.js";
import { heatmapCard } from "./heatmap.js";
import { findingsCard } from "./findings.js";
import { recommendationCard } from "./recommendation.js";
import { layersCard } from "./layers.js";

export async function runView(ctx, runId) {
  const view = $("#view");
  setTitle(`Run ${runId}`);
  replace(view, loading("Loading run…"));
  const run = await api(`/runs/${runId}`, { signal: ctx.signal });
  setTitle(runLabel(run));

  const sevSlot = h("span", { class: "head-sev" });
  const head = h("div", { class: "page-head" },
    h("div", null,
      h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/runs" }, "Runs"), " / ",
        h("a", { href: `#/runs${qs({ project: run.project })}` }, run.project)),
      h("h1", null, runLabel(run), " ", h("span", { class: "muted run-id" }, `#${run.id}`)),
      h("div", { class: "run-meta" },
        statusBadge(run.status), sevSlot,
        run.tags.map((t) => chip(t, `#/runs${qs({ tag: t })}`)),
        h("span", { class: "muted small", title: run.created_at }, `created ${fmtDate(run.created_at)} (${fmtAgo(run.created_at)})`))),
    h("div", { class: "page-actions" },
      run.status === "ready" ? h("a", { class: "btn", href: `#/compare${qs({ base: run.id })}` }, "Compare…") : null,
      run.status === "ready" ? h("a", { class: "btn", href: `${API}/runs/${run.id}/metrics.csv`, download: "" }, "Metrics CSV") : null,
      h("a", { class: "btn btn-ghost", href: `${API}/runs/${run.id}`, target: "_blank", rel: "noopener" }, "API")));

  if (run.status !== "ready") {
    const busy = !TERMINAL.has(run.status);
    replace(view, head,
      run.status === "failed"
        ? h("div", { class: "alert alert-error", role: "alert" }, h("div", { class: "alert-body" },
          h("strong", { class: "alert-title" }, "Ingest failed"), h("div", { class: "error-detail" }, run.error || "no reason recorded")))
        : h("div", { class: "alert alert-info", role: "status" }, h("span", { class: "spinner", "aria-hidden": "true" }),
          ` This run is ${run.status}; the page updates when it is ready.`),
      ingestCard(run));
    if (busy) ctx.later(() => route(), 1000);
    return;
  }

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
  const layersSlot = card("Layers", { id: "layers" }, loading("Loading layers…"));
  replace(view, head, figures, heatmapSlot, findingsSlot, recSlot, layersSlot,
    ingestCard(run));

  let layersApi = null;
  const layersPromise = api(`/runs/${run.id}/layers`, { signal: ctx.signal }).catch(() => null);
  const analysisPromise = analysisOf(run.id, ctx.signal);

  analysisPromise.then(async (analysis) => {
    if (!ctx.alive()) return;
    const sev = overallSeverity(analysis);
    replace(sevSlot, sevBadge(sev, "overall severity (worst finding)"));
    findingsSlot.replaceWith(findingsCard(analysis, (layer) => layersApi && layersApi.select(layer)));
    const layersInfo = await layersPromise;
    replace(heatmapSlot, heatmapCard(ctx, run, analysis, layersInfo));
    layersApi = layersCard(ctx, run, analysis, layersInfo);
    layersSlot.replaceWith(layersApi.el);
  }).catch((err) => {
    if (err.name === "AbortError" || !ctx.alive()) return;
    replace(findingsSlot.querySelector(".card-body"), errorBox(err, { title: "Analysis failed" }));
    replace(layersSlot.querySelector(".card-body"), errorBox(err));
    layersPromise.then((layersInfo) => replace(heatmapSlot, heatmapCard(ctx, run, null, layersInfo)));
  });

  recommendationCard(ctx, run).then((el) => {
    if (ctx.alive()) recSlot.replaceWith(el);
  }).catch((err) => {
    if (err.name === "AbortError" || !ctx.alive()) return;
    replace(recSlot.querySelector(".card-body"), errorBox(err, { title: "No recommendation" }));
  });
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
        h("dt", null, "Skipped"), h("dd", null, fmtInt(run.lines_skipped)),
        h("dt", null, "Blank"), h("dd", null, fmtInt(run.lines_blank)),
        h("dt", null, "Duplicated"), h("dd", null, fmtInt(run.lines_duplicated)),
        h("dt", null, "Started"), h("dd", null, fmtDate(run.started_at)),
        h("dt", null, "Finished"), h("dd", null, fmtDate(run.finished_at)),
        h("dt", null, "Metadata"), h("dd", { class: "mono" }, Object.keys(run.metadata || {}).length ? JSON.stringify(run.metadata) : "none")),
      rows.length ? h("div", { class: "table-scroll" }, h("table", { class: "table table-compact" },
        h("thead", null, h("tr", null, ["File", "Kind", "Rank", "Lines", "Skipped"].map((x, i) =>
          h("th", { scope: "col", class: i >= 2 ? "num" : null }, x)))),
        h("tbody", null, rows))) : null,
      samples.length ? h("pre", { class: "code code-small" }, samples.slice(0, 20).join("\n")) : null));
}

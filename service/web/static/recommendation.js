// Run page: the recommendation card (summary figures, per-format tabs with copy and download).

import { h, replace } from "./dom.js";
import { isNum, fmtSigned, fmtInt, fmtRatio, fmtShare, plural } from "./format.js";
import { API, apiFetch, errorBox } from "./api.js";
import { figure, card, loading, toast, copyText, tabs } from "./widgets.js";
import { precisionChip, precisionMix } from "./precision.js";

const FORMATS = [
  { id: "json", label: "JSON", ext: "json" },
  { id: "te-yaml", label: "TE YAML", ext: "yaml" },
  { id: "megatron", label: "Megatron", ext: "sh" },
  { id: "hydra", label: "Hydra", ext: "txt" },
  { id: "torchao", label: "torchao", ext: "py" },
  { id: "te-recipe", label: "TE recipe", ext: "py" },
  { id: "torchtitan", label: "torchtitan", ext: "py" },
  { id: "te-monitor", label: "TE monitor", ext: "yaml" },
];

/* The recommendation as JSON or rendered: GET with no overrides, else POST {thresholds, gpu, te_version}
 * (a recompute from stored data). */
function fetchRecommendation(run, overrides, format, signal) {
  const query = format === "json" ? "" : `?format=${encodeURIComponent(format)}`;
  const url = `${API}/runs/${run.id}/recommendation${query}`;
  const as = format === "json" ? "json" : "response";
  if (!overrides) return apiFetch(url, { signal, as });
  return apiFetch(url, { signal, as, method: "POST", body: overrides });
}

/* The recommendation JSON the run page's views share (the cards, the layer table's recommended column). */
export function recommendationJson(ctx, run, settings) {
  return fetchRecommendation(run, settings, "json", ctx.signal);
}

/* state: the page's hashState (`rec` is the selected format); settings: null or the POST body (overrides);
 * recPromise: the JSON (recommendationJson), fetched once for every view of the page. */
export async function recommendationCard(ctx, run, state, settings, recPromise = null) {
  const rec = await (recPromise || recommendationJson(ctx, run, settings));
  const cache = new Map([["json", { text: JSON.stringify(rec, null, 2), filename: `run_${run.id}_recommendation.json` }]]);
  const code = h("code", { id: "rec-code" });
  const pre = h("pre", { class: "code code-block" }, code);
  const fileLabel = h("span", { class: "muted small mono rec-filename" });
  const copyBtn = h("button", { type: "button", class: "btn btn-small", id: "copy-rec" }, "Copy");
  const downloadBtn = h("a", { class: "btn btn-small btn-ghost", id: "download-rec" }, "Download");
  let currentText = "";
  copyBtn.addEventListener("click", async () => {
    const ok = await copyText(currentText);
    copyBtn.textContent = ok ? "Copied ✓" : "Copy failed";
    toast(ok ? "Copied to the clipboard" : "Could not copy: select the text and copy it by hand");
    setTimeout(() => {
      copyBtn.textContent = "Copy";
    }, 1800);
  });

  const t = tabs({
    label: "Recommendation formats",
    items: FORMATS,
    onSelect: async (item, panel) => {
      panel.dataset.format = item.id;
      state.set({ rec: item.id === "json" ? "" : item.id });
      const show = (entry) => {
        if (panel.dataset.format !== item.id) return;
        currentText = entry.text;
        code.textContent = entry.text;
        fileLabel.textContent = entry.filename;
        copyBtn.disabled = false;
        const blob = URL.createObjectURL(new Blob([entry.text], { type: "text/plain" }));
        if (downloadBtn.href) URL.revokeObjectURL(downloadBtn.href);
        downloadBtn.href = blob;
        downloadBtn.download = entry.filename;
        replace(panel, h("div", { class: "code-toolbar" }, fileLabel, h("span", { class: "spacer" }), copyBtn, downloadBtn), pre);
      };
      if (cache.has(item.id)) return show(cache.get(item.id));
      copyBtn.disabled = true;
      replace(panel, loading(`Rendering ${item.label}…`));
      try {
        const response = await fetchRecommendation(run, settings, item.id, ctx.signal);
        const disposition = response.headers.get("Content-Disposition") || "";
        const m = disposition.match(/filename="?([^";]+)"?/);
        const entry = { text: await response.text(), filename: m ? m[1] : `run_${run.id}.${item.ext}` };
        cache.set(item.id, entry);
        show(entry);
      } catch (err) {
        if (err.name === "AbortError") return;
        if (panel.dataset.format === item.id) replace(panel, errorBox(err, { retry: () => t.select(FORMATS.indexOf(item)) }));
      }
    },
  });

  const skip = rec.fp8_skip_layers || [];
  const kept = rec.kept_bf16 || [];
  const overrides = rec.gemm_overrides || [];
  const cost = rec.expected_cost || {};
  const head = rec.headline || {};
  const conf = typeof rec.confidence === "number" ? rec.confidence : null;
  const byLayer = head.precision_by_layer || {};
  const moved = Object.entries(byLayer).filter(([, p]) => p !== head.recipe && p !== "bf16");
  // The headline cards: the same record (`headline`) the layer table, the heatmap marks and the runs list read.
  const summary = h("div", { class: "rec-summary" },
    h("p", { class: "rec-headline", id: "rec-headline" }, head.text || ""),
    h("div", { class: "rec-figures" },
      figure("Recipe", h("span", { class: "recipe-label" }, rec.recipe ? rec.recipe.label || rec.recipe.name : "—"), rec.recipe && rec.recipe.class ? h("span", { class: "mono recipe-class", title: rec.recipe.class }, rec.recipe.class.split(".").pop()) : null),
      figure("Precision per layer", precisionMix(head.precision_mix, { id: "rec-mix" }) || "—",
        head.lifted ? `${plural(head.lifted, "layer")} lifted from NVFP4` : null),
      figure("Layers to BF16", fmtInt(skip.length), [kept.length ? `+${kept.length} kept (ran in BF16)` : null, overrides.length ? `+${plural(overrides.length, "GEMM override")}` : null].filter(Boolean).join(", ") || null),
      figure("GEMM speed-up", isNum(cost.gemm_speedup_vs_all_bf16) ? `${fmtRatio(cost.gemm_speedup_vs_all_bf16)} vs BF16` : "—",
        isNum(cost.gemm_slowdown_vs_all_fp8_pct) ? `GEMM time ${fmtSigned(cost.gemm_slowdown_vs_all_fp8_pct, 1, "%")} vs all ${cost.fp8_recipe || "FP8"}` : null),
      figure("Confidence", conf === null ? "—" : fmtShare(conf),
        conf === null ? null : h("span", { class: "meter", role: "meter", "aria-valuemin": "0", "aria-valuemax": "1", "aria-valuenow": conf, "aria-label": "confidence" },
          h("span", { style: { width: `${Math.round(conf * 100)}%` } })))),
    skip.length || kept.length
      ? h("div", { class: "chips", "aria-label": "Layers to keep in BF16" }, h("span", { class: "muted small" }, "Keep in BF16:"),
        skip.map((l) => h("span", { class: "chip mono" }, l)), kept.map((l) => h("span", { class: "chip mono", title: "ran in BF16 in this run" }, l)))
      : null,
    moved.length ? h("div", { class: "chips", id: "rec-rungs", "aria-label": "Layers at another precision than the recipe" },
      h("span", { class: "muted small" }, `At another precision than ${rec.recipe ? rec.recipe.name : "the recipe"}:`),
      moved.slice(0, 12).map(([l, p]) => h("span", { class: "chip-pair" }, h("span", { class: "chip mono" }, l), precisionChip(p))),
      moved.length > 12 ? h("span", { class: "muted small" }, `+${moved.length - 12} more (layer table)`) : null) : null,
    overrides.length ? h("div", { class: "chips", "aria-label": "GEMMs to run in BF16" }, h("span", { class: "muted small" }, "GEMMs in BF16:"),
      overrides.slice(0, 8).map((o) => h("span", { class: "chip mono", title: o.reason || "" }, `${o.layer}: ${(o.gemms || []).join(", ")}`)),
      overrides.length > 8 ? h("span", { class: "muted small" }, `+${overrides.length - 8} more`) : null) : null,
    scheduleBlock(rec.schedule),
    (rec.rationale || []).length ? h("details", { class: "rationale" }, h("summary", null, "Rationale"),
      h("ul", null, rec.rationale.map((r) => h("li", null, r)))) : null);

  const el = card("Recommendation", {
    id: "recommendation",
    subtitle: `Policy ${rec.policy_version || ""} — the same decision rendered for each tool${settings ? " (recomputed with the settings above)" : ""}.`,
  }, h("div", { class: "rec-layout" }, summary, h("div", { class: "rec-code" }, t.list, t.panel)));
  const initial = FORMATS.findIndex((f) => f.id === state.get("rec"));
  t.select(initial > 0 ? initial : 0);
  return el;
}

/* The recommendation's `schedule` (policy/recommend/schedule.py): precision that changes over the run, each phase a
 * whole policy from a step on (a restart from that checkpoint), rendered alone with ?phase=K / --phase K. */
function scheduleBlock(schedule) {
  if (!schedule || !schedule.length) return null;
  const phase = (p, k) => {
    const policy = p.policy || {};
    const moved = (policy.fp8_skip_layers || []).length;
    const gemms = (policy.gemm_overrides || []).length;
    const rungs = Object.keys(policy.layer_precisions || {}).length;
    const what = [`${plural(moved, "layer")} in BF16`, gemms ? plural(gemms, "GEMM override") : null,
      rungs ? `${plural(rungs, "layer")} at another precision` : null].filter(Boolean).join(", ");
    return h("li", { "data-phase": String(k) },
      h("strong", null, k === 0 ? "From the start" : `From step ${fmtInt(p.from_step)} (restart)`), `: ${p.reason}. ${what}. `,
      h("span", { class: "muted small mono" }, `?phase=${k} · fp8-policy recommend RUN --format te-yaml --phase ${k}`));
  };
  return h("div", { class: "rec-schedule", id: "rec-schedule" },
    h("p", { class: "small" }, h("strong", null, `Schedule: ${schedule.length} phases.`),
      " The policy changes over the run; each phase is a configuration of its own, applied by restarting from its step's checkpoint."),
    h("ol", null, schedule.map(phase)));
}

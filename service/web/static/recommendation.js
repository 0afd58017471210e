// Run page: the recommendation card (summary figures, per-format tabs with copy and download).

import { h, replace } from "./dom.js";
import { isNum, fmtSigned, fmtInt, fmtRatio, fmtShare, plural } from "./format.js";
import { API, apiFetch, errorBox } from "./api.js";
import { figure, card, loading, toast, copyText, tabs } from "./widgets.js";

const FORMATS = [
  { id: "json", label: "JSON", ext: "json" },
  { id: "te-yaml", label: "TE YAML", ext: "yaml" },
  { id: "megatron", label: "Megatron", ext: "sh" },
  { id: "hydra", label: "Hydra", ext: "txt" },
  { id: "torchao", label: "torchao", ext: "py" },
  { id: "te-recipe", label: "TE recipe", ext: "py" },
  { id: "torchtitan", label: "torchtitan", ext: "py" },
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

/* state: the page's hashState (`rec` is the selected format); settings: null or the POST body (overrides). */
export async function recommendationCard(ctx, run, state, settings) {
  const rec = await fetchRecommendation(run, settings, "json", ctx.signal);
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
  const overrides = rec.gemm_overrides || [];
  const cost = rec.expected_cost || {};
  const conf = typeof rec.confidence === "number" ? rec.confidence : null;
  const summary = h("div", { class: "rec-summary" },
    h("div", { class: "rec-figures" },
      figure("Layers to BF16", fmtInt(skip.length), overrides.length ? `+${plural(overrides.length, "GEMM override")}` : null),
      figure("Recipe", h("span", { class: "recipe-label" }, rec.recipe ? rec.recipe.label || rec.recipe.name : "—"), rec.recipe && rec.recipe.class ? h("span", { class: "mono recipe-class", title: rec.recipe.class }, rec.recipe.class.split(".").pop()) : null),
      figure("GEMM time vs all-FP8", isNum(cost.gemm_slowdown_vs_all_fp8_pct) ? fmtSigned(cost.gemm_slowdown_vs_all_fp8_pct, 1, "%") : "—",
        isNum(cost.gemm_speedup_vs_all_bf16) ? `${fmtRatio(cost.gemm_speedup_vs_all_bf16)} faster than BF16` : null),
      figure("Confidence", conf === null ? "—" : fmtShare(conf),
        conf === null ? null : h("span", { class: "meter", role: "meter", "aria-valuemin": "0", "aria-valuemax": "1", "aria-valuenow": conf, "aria-label": "confidence" },
          h("span", { style: { width: `${Math.round(conf * 100)}%` } })))),
    skip.length
      ? h("div", { class: "chips", "aria-label": "Layers to keep in BF16" }, h("span", { class: "muted small" }, "Keep in BF16:"), skip.map((l) => h("span", { class: "chip mono" }, l)))
      : h("p", { class: "muted" }, overrides.length ? "No whole layer needs BF16; single GEMMs do:" : "No layer needs to leave FP8."),
    overrides.length ? h("div", { class: "chips", "aria-label": "GEMMs to run in BF16" }, skip.length ? h("span", { class: "muted small" }, "GEMMs in BF16:") : null,
      overrides.slice(0, 8).map((o) => h("span", { class: "chip mono", title: o.reason || "" }, `${o.layer}: ${(o.gemms || []).join(", ")}`)),
      overrides.length > 8 ? h("span", { class: "muted small" }, `+${overrides.length - 8} more`) : null) : null,
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

// The run page's Parameters card: what the run was (its metadata as uploaded: recipe, GPU, TE version, model
// dimensions, git commit, anything else), who uploaded it (the access token's name) and how long its ingest took,
// as an MLflow or Weights & Biases user expects to find them, instead of inside the collapsed ingest report.

import { h } from "./dom.js";
import { fmtDate, fmtDuration, fmtBytes } from "./format.js";
import { card } from "./widgets.js";

// Well-known metadata keys, shown first under a readable label, in this order; every other key follows as is.
const KNOWN = [
  [["recipe", "fp8_recipe"], "Recipe"],
  [["gpu", "gpu_arch", "device"], "GPU"],
  [["te_version", "transformer_engine"], "TE version"],
  [["model", "model_name"], "Model"],
  [["hidden_size", "hidden"], "Hidden size"],
  [["num_layers", "layers"], "Layers"],
  [["num_attention_heads", "heads"], "Attention heads"],
  [["seq_length", "sequence_length"], "Sequence length"],
  [["micro_batch_size", "global_batch_size", "batch_size"], "Batch size"],
  [["git_commit", "commit", "git_sha"], "Git commit"],
];

function text(value) {
  return value !== null && typeof value === "object" ? JSON.stringify(value) : String(value);
}

/* [label, value, key] rows of the run's metadata: the known keys first, then the rest sorted by key. */
export function metadataRows(metadata) {
  const meta = metadata || {};
  const used = new Set();
  const rows = [];
  for (const [keys, label] of KNOWN) {
    for (const key of keys) {
      if (key in meta && !used.has(key)) {
        rows.push([keys.length > 1 && key !== keys[0] ? `${label} (${key})` : label, text(meta[key]), key]);
        used.add(key);
      }
    }
  }
  for (const key of Object.keys(meta).sort()) if (!used.has(key)) rows.push([key, text(meta[key]), key]);
  return rows;
}

const TRACKERS = { mlflow: "MLflow", wandb: "W&B" };

/* The run's experiment-tracker run (`training_run`, set by `fp8-policy upload --mlflow-run-id / --wandb-run`): a
   link to its page (the service accepts only http(s) addresses), or its id when no page is known; null when none. */
export function trainingRunLink(run) {
  const link = run.training_run;
  if (!link) return null;
  const label = `${TRACKERS[link.kind] || link.kind} ${link.ref.length > 14 ? `${link.ref.slice(0, 12)}…` : link.ref}`;
  return link.url
    ? h("a", { href: link.url, target: "_blank", rel: "noopener noreferrer", class: "training-run-link", title: `${link.kind} run ${link.ref}` }, label)
    : h("span", { class: "mono training-run-link", title: `${link.kind} run ${link.ref}` }, label);
}

export function paramsCard(run) {
  const row = (label, value, attrs = {}) => h("tr", attrs, h("th", { scope: "row" }, label), h("td", null, value));
  const meta = metadataRows(run.metadata);
  const owner = run.uploaded_by ? h("span", { class: "mono" }, run.uploaded_by) : h("span", { class: "muted" }, "anonymous (an open service)");
  const ingest = run.started_at && run.finished_at ? fmtDuration(run.started_at, run.finished_at) : "—";
  return card("Parameters", { id: "params", subtitle: "The run's metadata as uploaded, its owner and its ingest." },
    h("div", { class: "params-grid" },
      h("table", { class: "table params-table", id: "params-metadata", "aria-label": "Run metadata" },
        h("tbody", null, meta.length
          ? meta.map(([label, value, key]) => row(label, h("span", { class: "mono" }, value), { "data-key": key }))
          : row("Metadata", h("span", { class: "muted" }, "none uploaded (fp8-policy upload --metadata '{\"gpu\": \"H100\"}')")))),
      h("table", { class: "table params-table", id: "params-run", "aria-label": "Run facts" },
        h("tbody", null,
          row("Owner", owner, { "data-key": "owner" }),
          row("Training run", trainingRunLink(run) || h("span", { class: "muted" }, "none linked (fp8-policy upload --mlflow-run-id ID / --wandb-run ENTITY/PROJECT/RUN_ID)"), { "data-key": "training-run" }),
          row("Created", fmtDate(run.created_at), { "data-key": "created" }),
          row("Ingest took", ingest, { "data-key": "duration" }),
          row("Upload", `${run.upload_filename || "raw body"} · ${fmtBytes(run.upload_bytes)}`, { "data-key": "upload" }),
          row("sha256", h("span", { class: "mono", title: run.sha256 }, `${run.sha256.slice(0, 16)}…`))))));
}

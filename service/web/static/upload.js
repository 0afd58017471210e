// Upload view (#/upload): drag & drop form, metadata validation, XHR progress and live ingest status.

import { TERMINAL } from "./constants.js";
import { h, replace, $ } from "./dom.js";
import { fmtInt, fmtBytes, plural } from "./format.js";
import { API, ApiError, detailText, api, errorBox } from "./api.js";
import { authHeaders } from "./auth.js";
import { statusBadge, card } from "./widgets.js";
import { setTitle } from "./router.js";

export function uploadView(ctx) {
  setTitle("Upload");
  const view = $("#view");
  const fileInput = h("input", {
    type: "file", id: "upload-file", name: "file", class: "visually-hidden",
    accept: ".tar,.tar.gz,.tgz,.zip,.log,.gz,application/gzip,application/x-tar,application/zip,text/plain",
    "aria-describedby": "upload-hint",
  });
  const fileInfo = h("div", { class: "file-info", id: "upload-file-info" }, h("span", { class: "muted" }, "No file chosen"));
  const drop = h("label", { class: "dropzone", for: "upload-file", id: "dropzone" },
    fileInput,
    h("span", { class: "drop-icon", "aria-hidden": "true" }, "⇪"),
    h("span", { class: "drop-title" }, "Drag a run archive here, or ", h("span", { class: "link" }, "choose a file")),
    h("span", { class: "muted small", id: "upload-hint" }, "fp8_log_dir as .tar.gz / .tgz / .tar / .zip, or one statistics .log / .log.gz"),
    fileInfo);
  const name = h("input", { type: "text", id: "upload-name", name: "name", placeholder: "defaults to the file name", autocomplete: "off" });
  const project = h("input", { type: "text", id: "upload-project", name: "project", placeholder: "default", autocomplete: "off" });
  const tags = h("input", { type: "text", id: "upload-tags", name: "tags", placeholder: "nightly, h100", autocomplete: "off" });
  const metadata = h("textarea", {
    id: "upload-metadata", name: "metadata", rows: 3, spellcheck: "false",
    placeholder: '{"hidden_size": 1280, "gpu": "h100", "recipe": "DelayedScaling"}',
  });
  const submit = h("button", { type: "submit", class: "btn btn-primary", id: "upload-submit", disabled: true }, "Upload");
  const cancel = h("button", { type: "button", class: "btn btn-ghost", id: "upload-cancel", hidden: true }, "Cancel");
  const formError = h("div", { id: "upload-error" });
  const progress = h("section", { class: "card upload-progress", id: "upload-progress", hidden: true, "aria-labelledby": "upload-progress-title" });
  let file = null;

  function choose(f) {
    file = f || null;
    submit.disabled = !file;
    formError.replaceChildren();
    replace(fileInfo, file
      ? [h("strong", { class: "mono" }, file.name), h("span", { class: "muted" }, ` · ${fmtBytes(file.size)}`)]
      : h("span", { class: "muted" }, "No file chosen"));
    drop.classList.toggle("has-file", Boolean(file));
  }
  fileInput.addEventListener("change", () => choose(fileInput.files[0]));
  let depth = 0;
  drop.addEventListener("dragenter", (e) => {
    e.preventDefault();
    depth += 1;
    drop.classList.add("dragging");
  });
  drop.addEventListener("dragover", (e) => {
    e.preventDefault();
    e.dataTransfer.dropEffect = "copy";
  });
  drop.addEventListener("dragleave", () => {
    depth = Math.max(0, depth - 1);
    if (!depth) drop.classList.remove("dragging");
  });
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    depth = 0;
    drop.classList.remove("dragging");
    const f = e.dataTransfer.files && e.dataTransfer.files[0];
    if (f) choose(f);
  });
  // A file dropped next to the zone must not make the browser navigate away to it.
  const swallow = (e) => {
    if (e.dataTransfer && [...e.dataTransfer.types].includes("Files")) e.preventDefault();
  };
  window.addEventListener("dragover", swallow);
  window.addEventListener("drop", swallow);
  ctx.onLeave(() => {
    window.removeEventListener("dragover", swallow);
    window.removeEventListener("drop", swallow);
  });

  const form = h("form", { class: "card upload-form", id: "upload-form", novalidate: true },
    h("div", { class: "card-body" },
      drop,
      h("div", { class: "form-grid" },
        h("div", { class: "field" }, h("label", { for: "upload-name" }, "Name"), name),
        h("div", { class: "field" }, h("label", { for: "upload-project" }, "Project"), project),
        h("div", { class: "field" }, h("label", { for: "upload-tags" }, "Tags ", h("span", { class: "muted small" }, "(comma-separated)")), tags),
        h("div", { class: "field field-wide" }, h("label", { for: "upload-metadata" }, "Metadata ", h("span", { class: "muted small", id: "upload-metadata-hint" }, "(optional JSON object: model dims, GPU as \"gpu\": \"H100\" / \"B200\" / \"sm_90\" / \"9.0\", recipe, TE version)")), metadata)),
      formError,
      h("div", { class: "form-actions" }, submit, cancel)));

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    formError.replaceChildren();
    if (!file) {
      replace(formError, errorBox(new ApiError(0, "NoFile", "choose an archive first")));
      return;
    }
    const meta = metadata.value.trim();
    if (meta) {
      let parsed;
      try {
        parsed = JSON.parse(meta);
      } catch (err) {
        replace(formError, errorBox(new ApiError(0, "InvalidMetadata", `metadata is not valid JSON: ${err.message}`)));
        metadata.focus();
        return;
      }
      if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) {
        replace(formError, errorBox(new ApiError(0, "InvalidMetadata", "metadata must be a JSON object")));
        metadata.focus();
        return;
      }
    }
    const data = new FormData();
    data.append("file", file, file.name);
    // Without a name the service names the run after the file (less .tar.gz, .zip, .log, ...), as for the CLI.
    if (name.value.trim()) data.append("name", name.value.trim());
    if (project.value.trim()) data.append("project", project.value.trim());
    if (tags.value.trim()) data.append("tags", tags.value.trim());
    if (meta) data.append("metadata", meta);
    startUpload(data);
  });

  function setBusy(busy) {
    submit.disabled = busy || !file;
    fileInput.disabled = busy;
    drop.classList.toggle("disabled", busy);
    cancel.hidden = !busy;
    [name, project, tags, metadata].forEach((el) => {
      el.disabled = busy;
    });
  }

  const STEPS = ["upload", "queued", "processing", "ready"];
  function stepper(active, failed) {
    const idx = STEPS.indexOf(active);
    return h("ol", { class: "steps", "aria-label": "Progress" }, STEPS.map((step, i) => h("li", {
      class: ["step", i < idx || (active === "ready" && i === idx) ? "done" : null, i === idx && active !== "ready" ? "current" : null,
        failed && i === idx ? "failed" : null],
      "aria-current": i === idx ? "step" : null,
    }, h("span", { class: "step-dot", "aria-hidden": "true" }), step === "upload" ? "uploaded" : step)));
  }

  function startUpload(data) {
    const xhr = new XMLHttpRequest();
    const bar = h("progress", { id: "upload-bar", max: 100, value: 0, "aria-label": "Upload progress" });
    const pct = h("span", { class: "progress-pct", id: "upload-pct" }, "0%");
    const detail = h("span", { class: "muted small", id: "upload-bytes" }, `0 of ${fmtBytes(file.size)}`);
    const statusLine = h("div", { class: "upload-status", id: "upload-status", role: "status", "aria-live": "polite" }, "Uploading…");
    const steps = h("div", null, stepper("upload"));
    const result = h("div", { id: "upload-result" });
    progress.hidden = false;
    replace(progress,
      h("div", { class: "card-head" }, h("h2", { id: "upload-progress-title" }, h("span", { class: "mono" }, file.name))),
      h("div", { class: "card-body" },
        h("div", { class: "progress-row" }, bar, pct), detail, steps, statusLine, result));
    setBusy(true);
    const started = performance.now();
    xhr.upload.addEventListener("progress", (e) => {
      if (!e.lengthComputable) return;
      const p = Math.round((e.loaded / e.total) * 100);
      bar.value = p;
      pct.textContent = `${p}%`;
      const secs = (performance.now() - started) / 1000;
      detail.textContent = `${fmtBytes(e.loaded)} of ${fmtBytes(e.total)}${secs > 0.5 ? ` · ${fmtBytes(e.loaded / secs)}/s` : ""}`;
    });
    xhr.upload.addEventListener("load", () => {
      bar.value = 100;
      pct.textContent = "100%";
      statusLine.textContent = "Upload complete; waiting for the server…";
    });
    cancel.onclick = () => xhr.abort();
    xhr.addEventListener("abort", () => {
      setBusy(false);
      statusLine.textContent = "Upload cancelled.";
      bar.value = 0;
    });
    xhr.addEventListener("error", () => {
      setBusy(false);
      replace(result, errorBox(new ApiError(0, "NetworkError", "the upload was interrupted; is the service running?")));
      statusLine.textContent = "Upload failed.";
    });
    xhr.addEventListener("load", () => {
      setBusy(false);
      let body = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch (_) {
        /* not JSON */
      }
      if (xhr.status !== 200 && xhr.status !== 202) {
        const err = new ApiError(xhr.status, (body && body.error) || `HTTP ${xhr.status}`, detailText(body) || xhr.statusText);
        replace(result, errorBox(err, { title: "The server refused the upload" }));
        statusLine.textContent = "Upload rejected.";
        replace(steps, stepper("upload", true));
        return;
      }
      bar.value = 100;
      pct.textContent = "100%";
      detail.textContent = `${fmtBytes(file.size)} uploaded`;
      const dup = body.duplicate_of;
      if (dup) {
        const asked = data.get("name");
        replace(result, h("div", { class: "alert alert-info", id: "upload-duplicate" },
          `These bytes were already uploaded to project “${body.project}” as run #${dup.id}${dup.name ? ` “${dup.name}”` : ""}; `
          + `this is that run${asked && asked !== dup.name ? ` (the name “${asked}” was not applied)` : ""}.`));
      }
      choose(null);
      fileInput.value = "";
      follow(body, statusLine, steps, result);
    });
    xhr.open("POST", `${API}/runs`);
    xhr.setRequestHeader("Accept", "application/json");
    for (const [name, value] of Object.entries(authHeaders())) xhr.setRequestHeader(name, value);
    xhr.send(data);
  }

  function follow(run, statusLine, steps, result) {
    const link = h("a", { class: "btn btn-primary", id: "upload-open", href: `#/runs/${run.id}` }, "Open run");
    const show = (r) => {
      replace(steps, stepper(r.status === "failed" ? "processing" : r.status, r.status === "failed"));
      statusLine.replaceChildren(statusBadge(r.status), " ",
        r.status === "ready" ? `Run #${r.id} is ready: ${plural(r.layer_count, "layer")}, ${fmtInt(r.points)} points, ${plural(r.ranks, "rank")}.`
          : r.status === "failed" ? `Run #${r.id} failed.` : `Run #${r.id} is ${r.status}…`);
      statusLine.dataset.status = r.status;
      if (r.status === "ready") {
        const notice = result.querySelector(".alert-info");
        replace(result, notice, h("div", { class: "form-actions" }, link,
          h("a", { class: "btn", href: "#/runs" }, "All runs"),
          h("button", {
            type: "button", class: "btn btn-ghost", onclick: () => {
              progress.hidden = true;
              name.value = "";
              fileInput.focus();
            },
          }, "Upload another")));
        link.focus();
      } else if (r.status === "failed") {
        replace(result, h("div", { class: "alert alert-error", role: "alert" }, h("div", { class: "alert-body" },
          h("strong", { class: "alert-title" }, "Ingest failed"), h("div", { class: "error-detail" }, r.error || "no reason recorded"))),
        h("a", { class: "btn", href: `#/runs/${r.id}` }, "See the run"));
      }
    };
    show(run);
    if (TERMINAL.has(run.status)) return;
    const poll = () => ctx.later(async () => {
      try {
        const fresh = await api(`/runs/${run.id}`, { signal: ctx.signal });
        show(fresh);
        if (!TERMINAL.has(fresh.status)) poll();
      } catch (err) {
        if (err.name === "AbortError") return;
        replace(result, errorBox(err, { retry: poll }));
      }
    }, 600);
    poll();
  }

  replace(view,
    h("div", { class: "page-head" }, h("div", null, h("h1", null, "Upload a run"),
      h("p", { class: "page-sub" }, "The archive is ingested in the background: per-layer statistics, findings and a BF16 recommendation appear on the run page."))),
    h("div", { class: "upload-layout" }, form, h("div", { class: "upload-side" }, progress, uploadHelp())));
}

function uploadHelp() {
  return card("What to upload", { id: "upload-help" },
    h("p", { class: "help-text" }, "The ", h("code", null, "log_dir"), " that Transformer Engine's debug API (nvdlfw_inspect) wrote, one folder per rank:"),
    h("pre", { class: "code code-small tree" }, "fp8_log_dir/\n  rank_0/\n    nvdlfw_inspect_logs/             plan lines\n    nvdlfw_inspect_statistics_logs/  LogFp8TensorStats\n  rank_1/ …"),
    h("ol", { class: "help-steps" },
      h("li", null, "The archive is checked (paths, links, size) and stored; identical bytes in the same project return the existing run."),
      h("li", null, "Statistics are parsed per rank, layer, tensor and stat in the background."),
      h("li", null, "The run page then shows the heatmap, findings and the BF16 recommendation.")),
    h("p", { class: "help-text muted small" }, "From a script:"),
    h("pre", { class: "code code-small" },
      `tar czf run.tgz -C fp8_log_dir .\ncurl -F file=@run.tgz -F project=esm2 \\\n  -F tags=nightly,h100 \\\n  ${location.origin}${API}/runs`));
}

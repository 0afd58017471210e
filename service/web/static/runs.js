// Runs list view (#/runs): filters, lazy overall severity, pick two to compare, load more, poll busy runs.

import { TERMINAL } from "./constants.js";
import { h, append, replace, $ } from "./dom.js";
import { fmtInt, fmtDate, fmtAgo, plural, runLabel } from "./format.js";
import { api, qs, errorBox, analysisOf, overallSeverity } from "./api.js";
import { sevBadge, statusBadge, chip, loading, selectField } from "./widgets.js";
import { go, setTitle } from "./router.js";

export async function runsView(ctx, query) {
  setTitle("Runs");
  const view = $("#view");
  const filters = { project: query.get("project") || "", tag: query.get("tag") || "", status: query.get("status") || "" };
  const filtered = Boolean(filters.project || filters.tag || filters.status);
  replace(view, h("div", { class: "page-head" }, h("h1", null, "Runs")), loading("Loading runs…"));

  const [page, all] = await Promise.all([
    api(`/runs${qs({ ...filters, limit: 50 })}`, { signal: ctx.signal }),
    filtered ? api(`/runs?limit=200`, { signal: ctx.signal }).catch(() => null) : null,
  ]);
  const facetRuns = (all || page).items;
  const projects = [...new Set(facetRuns.map((r) => r.project))].sort();
  const tags = [...new Set(facetRuns.flatMap((r) => r.tags))].sort();
  if (filters.project && !projects.includes(filters.project)) projects.push(filters.project);
  if (filters.tag && !tags.includes(filters.tag)) tags.push(filters.tag);

  const setFilter = (key, value) => go("/runs", { ...filters, [key]: value });
  const filterBar = h("form", { class: "filters", role: "search", "aria-label": "Filter runs", onsubmit: (e) => e.preventDefault() },
    selectField("Project", "filter-project", [["", "All projects"], ...projects.map((p) => [p, p])], filters.project,
      (v) => setFilter("project", v)),
    selectField("Tag", "filter-tag", [["", "Any tag"], ...tags.map((t) => [t, t])], filters.tag, (v) => setFilter("tag", v)),
    selectField("Status", "filter-status", [["", "Any status"], ...["ready", "processing", "queued", "failed"].map((x) => [x, x])],
      filters.status, (v) => setFilter("status", v)),
    filtered ? h("button", { type: "button", class: "btn btn-ghost", onclick: () => go("/runs") }, "Clear filters") : null);

  const selected = new Set();
  const compareBtn = h("button", {
    type: "button", class: "btn", disabled: true, id: "compare-selected",
    onclick: () => {
      const [a, b] = [...selected].sort((x, y) => x - y);
      go("/compare", { base: a, head: b });
    },
  }, "Compare selected");
  const updateCompare = () => {
    compareBtn.disabled = selected.size !== 2;
    compareBtn.textContent = selected.size === 2 ? "Compare selected (2)" : `Compare selected (${selected.size}/2)`;
  };
  updateCompare();

  const tbody = h("tbody");
  const table = h("table", { class: "table runs-table", id: "runs-table" },
    h("caption", { class: "visually-hidden" }, "Runs, newest first"),
    h("thead", null, h("tr", null,
      h("th", { scope: "col", class: "col-check" }, h("span", { class: "visually-hidden" }, "Select for comparison")),
      ["Run", "Project", "Tags", "Status", "Severity", "Layers", "Points", "Iterations", "Created"].map((label) =>
        h("th", { scope: "col", class: ["Layers", "Points"].includes(label) ? "num" : null }, label)))),
    tbody);

  const sevQueue = [];
  let sevActive = 0;
  function pumpSeverity() {
    while (sevActive < 3 && sevQueue.length && ctx.alive()) {
      const [runId, cell] = sevQueue.shift();
      sevActive += 1;
      analysisOf(runId, undefined).then((analysis) => {
        const sev = overallSeverity(analysis);
        const worst = (analysis.findings || [])[0];
        replace(cell, sevBadge(sev, worst ? worst.summary : null),
          worst && worst.pattern !== "healthy" ? h("span", { class: "muted small pattern" }, worst.pattern) : null);
      }).catch((err) => {
        replace(cell, h("span", { class: "muted", title: err.detail || err.message }, "n/a"));
      }).finally(() => {
        sevActive -= 1;
        pumpSeverity();
      });
    }
  }

  function severityCell(run) {
    const cell = h("td", { class: "col-sev" });
    if (run.status === "ready") {
      append(cell, [h("span", { class: "muted" }, h("span", { class: "spinner", "aria-hidden": "true" }), h("span", { class: "visually-hidden" }, "loading"))]);
      sevQueue.push([run.id, cell]);
    } else if (run.status === "failed") {
      append(cell, [h("span", { class: "muted", title: run.error || "" }, "—")]);
    } else {
      append(cell, [h("span", { class: "muted" }, "pending")]);
    }
    return cell;
  }

  function row(run) {
    const check = h("input", {
      type: "checkbox", class: "pick", "aria-label": `Select ${runLabel(run)} for comparison`, disabled: run.status !== "ready",
      checked: selected.has(run.id),
      onchange: (e) => {
        if (e.target.checked) {
          if (selected.size >= 2) {
            const oldest = [...selected][0];
            selected.delete(oldest);
            const other = tbody.querySelector(`tr[data-run-id="${oldest}"] input.pick`);
            if (other) other.checked = false;
          }
          selected.add(run.id);
        } else selected.delete(run.id);
        updateCompare();
      },
    });
    const iters = run.iteration_min === null ? "—" : `${fmtInt(run.iteration_min)}–${fmtInt(run.iteration_max)}`;
    return h("tr", { "data-run-id": run.id, "data-project": run.project },
      h("td", { class: "col-check" }, check),
      h("td", { class: "col-run" },
        h("a", { href: `#/runs/${run.id}`, class: "run-link" }, runLabel(run)),
        h("span", { class: "muted small run-id" }, `#${run.id}`)),
      h("td", null, h("a", { href: `#/runs${qs({ project: run.project })}`, class: "plain-link" }, run.project)),
      h("td", { class: "col-tags" }, run.tags.map((t) => chip(t, `#/runs${qs({ tag: t })}`, `Filter by tag ${t}`))),
      h("td", null, statusBadge(run.status), run.status === "failed" && run.error
        ? h("div", { class: "small error-text", title: run.error }, run.error.split(":")[0]) : null),
      severityCell(run),
      h("td", { class: "num" }, run.status === "ready" ? fmtInt(run.layer_count) : "—"),
      h("td", { class: "num" }, run.status === "ready" ? fmtInt(run.points) : "—"),
      h("td", { class: "nowrap" }, iters),
      h("td", { class: "nowrap", title: run.created_at }, fmtDate(run.created_at),
        h("div", { class: "muted small" }, fmtAgo(run.created_at))));
  }

  let items = page.items.slice();
  let cursor = page.next_cursor;
  function addRows(list) {
    for (const run of list) tbody.append(row(run));
    pumpSeverity();
  }
  addRows(items);

  const more = h("button", {
    type: "button", class: "btn", hidden: !cursor,
    onclick: async () => {
      more.disabled = true;
      try {
        const next = await api(`/runs${qs({ ...filters, limit: 50, cursor })}`, { signal: ctx.signal });
        items = items.concat(next.items);
        cursor = next.next_cursor;
        addRows(next.items);
        more.hidden = !cursor;
      } catch (err) {
        if (err.name !== "AbortError") more.after(errorBox(err));
      } finally {
        more.disabled = false;
      }
    },
  }, "Load more");

  // Runs still being ingested: poll them and swap in their row once they change.
  function pollBusy() {
    const busy = items.filter((r) => !TERMINAL.has(r.status));
    if (!busy.length) return;
    ctx.later(async () => {
      await Promise.all(busy.map(async (run) => {
        try {
          const fresh = await api(`/runs/${run.id}`, { signal: ctx.signal });
          if (fresh.status !== run.status) {
            const old = tbody.querySelector(`tr[data-run-id="${run.id}"]`);
            items[items.indexOf(run)] = fresh;
            if (old) old.replaceWith(row(fresh));
            pumpSeverity();
          }
        } catch (_) {
          /* keep the old row */
        }
      }));
      pollBusy();
    }, 1500);
  }
  pollBusy();

  const count = `${plural(items.length, "run")}${cursor ? "+" : ""}${filtered ? " matching" : ""}`;
  const body = items.length
    ? h("div", { class: "table-scroll" }, table)
    : h("div", { class: "empty-state" },
      h("h2", null, filtered ? "No runs match these filters" : "No runs yet"),
      h("p", { class: "muted" }, filtered
        ? "Try another project or tag, or clear the filters."
        : "Upload a Transformer Engine debug-log archive (fp8_log_dir as .tar.gz) to get per-layer FP8 statistics and a BF16 recommendation."),
      h("a", { class: "btn btn-primary", href: filtered ? "#/runs" : "#/upload" }, filtered ? "Clear filters" : "Upload a run"));
  replace(view,
    h("div", { class: "page-head" },
      h("div", null, h("h1", null, "Runs"), h("p", { class: "page-sub", id: "runs-count" }, count)),
      h("div", { class: "page-actions" }, compareBtn, h("a", { class: "btn btn-primary", href: "#/upload" }, "Upload run"))),
    filterBar,
    h("div", { class: "card card-flush" }, body),
    h("div", { class: "center" }, more));
}

// Runs list view (#/runs): server filters (project/tag/status), text search, sortable columns, the stored summary
// (severity, leading pattern, layers to BF16, precision mix) per row, tick 2-8 runs to compare, delete for admins, poll busy runs.
//
// Hash parameters: project, tag, status (sent to the API); q (search over name, project, tags and notes), sort, dir.

import { TERMINAL, SEVERITIES } from "./constants.js";
import { h, replace, $ } from "./dom.js";
import { fmtInt, fmtDate, fmtAgo, plural, runLabel, patternLabel } from "./format.js";
import { api, API, qs, errorBox } from "./api.js";
import { sevBadge, statusBadge, chip, loading, selectField } from "./widgets.js";
import { go, replaceHash, setTitle } from "./router.js";
import { whoAmI } from "./session.js";
import { armDelete } from "./run_actions.js";
import { precisionMix } from "./precision.js";
import { trainingRunLink } from "./params.js";

const PAGE = 200;
const COMPARE_MAX = 8; // the compare page shows 2-8 runs
const COLUMNS = [ // key, label, value for sorting (higher = "more"), numeric
  ["name", "Run", (r) => runLabel(r).toLowerCase(), false],
  ["project", "Project", (r) => r.project.toLowerCase(), false],
  ["tags", "Tags", (r) => r.tags.join(","), false],
  ["status", "Status", (r) => r.status, false],
  ["severity", "Severity", (r) => (r.summary ? SEVERITIES.indexOf(r.summary.severity) : null), true],
  ["to_bf16", "To BF16", (r) => (r.summary ? r.summary.to_bf16 * 1000 + r.summary.gemm_overrides : null), true],
  ["precision", "Precision", (r) => (r.summary && typeof r.summary.gemm_speedup === "number" ? r.summary.gemm_speedup : null), true],
  ["gpu", "GPU", (r) => meta(r, "gpu"), false],
  ["recipe", "Recipe", (r) => meta(r, "recipe"), false],
  ["te", "TE", (r) => meta(r, "te"), false],
  ["commit", "Commit", (r) => meta(r, "commit"), false],
  ["training", "Training run", (r) => (r.training_run ? `${r.training_run.kind} ${r.training_run.ref}` : null), false],
  ["layers", "Layers", (r) => (r.status === "ready" ? r.layer_count : null), true],
  ["points", "Points", (r) => (r.status === "ready" ? r.points : null), true],
  ["iterations", "Iterations", (r) => r.iteration_max, true],
  ["created", "Created", (r) => r.id, true],
];

// Metadata columns (what the uploader sent, advisory): the first key present of each, as the service reads them.
const META_KEYS = {
  gpu: ["gpu", "gpu_name", "gpu_model", "gpu_arch", "compute_capability"],
  recipe: ["recipe", "fp8_recipe"],
  te: ["te_version"],
  commit: ["git_commit", "commit", "git_sha"],
};
// query key, label, META_KEYS column: the runs list's server-side metadata filters
const SERVER_FACETS = [["gpu", "GPU", "gpu", "Any GPU"], ["recipe", "Recipe", "recipe", "Any recipe"], ["te_version", "TE", "te", "Any TE version"], ["git_commit", "Commit", "commit", "Any commit"]];
const GROUPS = [["", "No grouping"], ["project", "Project"], ["gpu", "GPU"], ["recipe", "Recipe"], ["te", "TE version"], ["commit", "Commit"]];

export function meta(run, column) {
  const data = run.metadata || {};
  const key = META_KEYS[column].find((k) => data[k] !== undefined && data[k] !== null && data[k] !== "");
  if (key === undefined) return null;
  const text = String(data[key]);
  return column === "commit" ? text.slice(0, 10) : text;
}

export function matchesSearch(run, text) {
  if (!text) return true;
  const metaText = Object.keys(META_KEYS).map((c) => meta(run, c) || "");
  const hay = [runLabel(run), run.project, ...run.tags, run.notes || "", `#${run.id}`, ...metaText].join(" ").toLowerCase();
  return text.toLowerCase().split(/\s+/).filter(Boolean).every((word) => hay.includes(word));
}

export async function runsView(ctx, query) {
  setTitle("Runs");
  const view = $("#view");
  const filters = Object.fromEntries(["project", "tag", "status", ...SERVER_FACETS.map(([key]) => key)].map((k) => [k, query.get(k) || ""]));
  const state = { q: query.get("q") || "", sort: query.get("sort") || "created", dir: query.get("dir") === "asc" ? 1 : -1, group: query.get("group") || "" };
  if (!GROUPS.some(([key]) => key === state.group)) state.group = "";
  if (!COLUMNS.some(([key]) => key === state.sort)) state.sort = "created";
  const filtered = Object.values(filters).some(Boolean);
  replace(view, h("div", { class: "page-head" }, h("h1", null, "Runs")), loading("Loading runs…"));

  const [page, all, me] = await Promise.all([
    api(`/runs${qs({ ...filters, limit: PAGE })}`, { signal: ctx.signal }),
    filtered ? api(`/runs?limit=${PAGE}`, { signal: ctx.signal }).catch(() => null) : null,
    whoAmI(ctx.signal),
  ]);
  const canDelete = Boolean(me && me.scope === "admin");
  const facetRuns = (all || page).items;
  const projects = [...new Set(facetRuns.map((r) => r.project))].sort();
  const tags = [...new Set(facetRuns.flatMap((r) => r.tags))].sort();
  if (filters.project && !projects.includes(filters.project)) projects.push(filters.project);
  if (filters.tag && !tags.includes(filters.tag)) tags.push(filters.tag);
  // the metadata filters run on the server (GET /runs?gpu=...: any spelling of the same GPU or recipe matches);
  // the choices offered are the values on the unfiltered first page, plus the one chosen
  const facetField = ([key, label, column, any]) => {
    const usable = key === "te_version" ? (v) => /^v?\d[^\s]*$/.test(v) : key === "git_commit" ? (v) => !/\s/.test(v) : Boolean;
    const values = [...new Set(facetRuns.map((r) => meta(r, column)).filter((v) => v && usable(v)))].sort();
    if (filters[key] && !values.includes(filters[key])) values.push(filters[key]);
    return selectField(label, `filter-${key}`, [["", any], ...values.map((v) => [v, v])], filters[key], (v) => setFilter(key, v));
  };

  // The hash mirrors the view's state; replaceState, so typing in the search box does not re-render the view.
  const syncHash = () => {
    const params = { ...filters, q: state.q, sort: state.sort === "created" ? "" : state.sort, dir: state.dir === 1 ? "asc" : "", group: state.group };
    replaceHash(ctx, `#/runs${qs(params)}`);
  };
  const setFilter = (key, value) => go("/runs", { ...filters, [key]: value, q: state.q });
  const search = h("input", {
    type: "search", id: "runs-search", placeholder: "name, project, tag, notes, GPU, recipe, commit", autocomplete: "off", value: state.q,
    "aria-label": "Search runs by name, project or tag",
    oninput: () => {
      state.q = search.value.trim();
      syncHash();
      render();
    },
  });
  const filterBar = h("form", { class: "filters", role: "search", "aria-label": "Filter runs", onsubmit: (e) => e.preventDefault() },
    h("div", { class: "field field-inline" }, h("label", { for: "runs-search" }, "Search"), search),
    selectField("Project", "filter-project", [["", "All projects"], ...projects.map((p) => [p, p])], filters.project,
      (v) => setFilter("project", v)),
    selectField("Tag", "filter-tag", [["", "Any tag"], ...tags.map((t) => [t, t])], filters.tag, (v) => setFilter("tag", v)),
    selectField("Status", "filter-status", [["", "Any status"], ...["live", "ready", "processing", "queued", "failed"].map((x) => [x, x])],
      filters.status, (v) => setFilter("status", v)),
    SERVER_FACETS.map(facetField),
    selectField("Group by", "runs-group", GROUPS, state.group, (v) => {
      state.group = v;
      syncHash();
      render();
    }),
    filtered || state.q ? h("button", { type: "button", class: "btn btn-ghost", onclick: () => go("/runs") }, "Clear filters") : null);

  const selected = new Set(); // compare 2..COMPARE_MAX of them: #/compare?runs=a,b,... oldest first (the reference)
  const compareNote = h("span", { class: "small muted", id: "compare-note", role: "status" });
  const compareBtn = h("button", {
    type: "button", class: "btn", disabled: true, id: "compare-selected",
    onclick: () => go(`/compare?runs=${[...selected].sort((x, y) => x - y).join(",")}`),
  }, "Compare selected");
  const updateCompare = (refused) => {
    compareBtn.disabled = selected.size < 2 || selected.size > COMPARE_MAX;
    compareBtn.textContent = `Compare selected (${selected.size})`;
    compareNote.classList.toggle("error-text", Boolean(refused));
    compareNote.textContent = refused ? `At most ${COMPARE_MAX} runs can be compared: untick one first.`
      : selected.size === 1 ? "Tick at least one more run to compare." : "";
  };
  updateCompare();

  const headCells = COLUMNS.map(([key, label, , num]) => h("th", {
    scope: "col", class: num && key !== "severity" ? "num" : null, "data-key": key,
  }, h("button", { type: "button", class: "th-sort", onclick: () => sortBy(key) }, label,
    h("span", { class: "sort-icon", "aria-hidden": "true" }))));
  const tbody = h("tbody");
  const table = h("table", { class: "table runs-table", id: "runs-table" },
    h("caption", { class: "visually-hidden" }, "Runs; click a column header to sort"),
    h("thead", null, h("tr", null,
      h("th", { scope: "col", class: "col-check" }, h("span", { class: "visually-hidden" }, "Select for comparison")),
      headCells, canDelete ? h("th", { scope: "col", class: "col-actions" }, h("span", { class: "visually-hidden" }, "Actions")) : null)),
    tbody);

  function sortBy(key) {
    const numeric = COLUMNS.find(([k]) => k === key)[3];
    if (state.sort === key) state.dir = -state.dir;
    else {
      state.sort = key;
      state.dir = numeric ? -1 : 1; // numbers: biggest (worst, newest) first
    }
    syncHash();
    render();
  }

  function severityCell(run) {
    const cell = h("td", { class: "col-sev" });
    if (run.status === "ready" && run.summary) {
      const s = run.summary;
      replace(cell, sevBadge(s.severity, s.headline),
        s.pattern && s.pattern !== "healthy" ? h("span", { class: "muted small pattern", "data-pattern": s.pattern }, patternLabel(s.pattern, s.label)) : null);
    } else if (run.status === "ready") {
      replace(cell, h("span", { class: "muted small summary-pending" }, h("span", { class: "spinner", "aria-hidden": "true" }), " analysing"));
    } else if (run.status === "failed") {
      replace(cell, h("span", { class: "muted", title: run.error || "" }, "—"));
    } else if (run.status === "live") {
      replace(cell, h("span", { class: "muted small", title: "training: early warnings on the run page; the verdict comes when it is finalized" }, "training"));
    } else {
      replace(cell, h("span", { class: "muted" }, "pending"));
    }
    return cell;
  }

  function precisionCell(run) {
    const s = run.status === "ready" ? run.summary : null;
    const mix = s ? precisionMix(s.precision_mix) : null;
    if (!mix) {
      const why = run.status === "live" ? "after it is finalized" : "—";
      return h("td", { class: "col-precision" }, h("span", { class: "muted small" }, why));
    }
    return h("td", { class: "col-precision", title: "Layers per recommended precision and the GEMM speed-up over all-BF16 (default recommendation)" },
      mix, typeof s.gemm_speedup === "number" ? h("span", { class: "muted small" }, ` ${s.gemm_speedup.toFixed(2)}× vs BF16`) : null);
  }

  function bf16Cell(run) {
    const s = run.status === "ready" ? run.summary : null;
    if (!s) return h("td", { class: "num col-bf16" }, h("span", { class: "muted" }, "—"));
    return h("td", { class: "num col-bf16", title: `${plural(s.to_bf16, "layer")} to BF16, ${plural(s.gemm_overrides, "layer")} with GEMM overrides (default recommendation)` },
      fmtInt(s.to_bf16), s.gemm_overrides ? h("span", { class: "muted small" }, ` +${fmtInt(s.gemm_overrides)} GEMM`) : null);
  }

  function deleteCell(run) {
    const button = h("button", { type: "button", class: "btn btn-small btn-ghost btn-danger delete-run", "aria-label": `Delete ${runLabel(run)}` }, "Delete");
    armDelete(ctx, button, run, () => {
      items = items.filter((r) => r.id !== run.id);
      selected.delete(run.id);
      updateCompare();
      render();
    }, (err) => button.after(errorBox(err, { title: "Delete failed" })));
    return h("td", { class: "col-actions" }, button);
  }

  function row(run) {
    const check = h("input", {
      type: "checkbox", class: "pick", "aria-label": `Select ${runLabel(run)} for comparison`, disabled: run.status !== "ready",
      checked: selected.has(run.id),
      onchange: (e) => {
        const refused = e.target.checked && selected.size >= COMPARE_MAX;
        if (refused) e.target.checked = false;
        else if (e.target.checked) selected.add(run.id);
        else selected.delete(run.id);
        updateCompare(refused);
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
      bf16Cell(run),
      precisionCell(run),
      ...["gpu", "recipe", "te"].map((c) => h("td", { class: `col-meta col-${c}` }, meta(run, c) || h("span", { class: "muted" }, "—"))),
      h("td", { class: "col-meta col-commit mono", title: (run.metadata || {}).git_commit || null }, meta(run, "commit") || h("span", { class: "muted" }, "—")),
      h("td", { class: "col-meta col-training" }, trainingRunLink(run) || h("span", { class: "muted" }, "—")),
      h("td", { class: "num" }, run.status === "ready" ? fmtInt(run.layer_count) : "—"),
      h("td", { class: "num" }, run.status === "ready" ? fmtInt(run.points) : "—"),
      h("td", { class: "num nowrap" }, iters),
      h("td", { class: "nowrap", title: run.created_at }, fmtDate(run.created_at),
        h("div", { class: "muted small" }, fmtAgo(run.created_at))),
      canDelete ? deleteCell(run) : null);
  }

  let items = page.items.slice();
  let cursor = page.next_cursor;
  const count = h("p", { class: "page-sub", id: "runs-count" });
  const body = h("div", { class: "card card-flush" });

  function visible() {
    const [, , value] = COLUMNS.find(([k]) => k === state.sort);
    return items.filter((r) => matchesSearch(r, state.q)).map((r, i) => [r, i]).sort((a, b) => {
      const va = value(a[0]);
      const vb = value(b[0]);
      const missA = va === null || va === undefined;
      const missB = vb === null || vb === undefined;
      if (missA || missB) return missA === missB ? a[1] - b[1] : missA ? 1 : -1; // missing values last
      const c = typeof va === "number" ? va - vb : String(va).localeCompare(String(vb), "en", { numeric: true });
      return c !== 0 ? c * state.dir : a[1] - b[1];
    }).map(([r]) => r);
  }

  function render() {
    headCells.forEach((th, i) => th.setAttribute("aria-sort", COLUMNS[i][0] === state.sort ? (state.dir > 0 ? "ascending" : "descending") : "none"));
    const list = visible();
    const narrowed = filtered || state.q;
    count.textContent = `${plural(list.length, "run")}${cursor ? "+" : ""}${narrowed ? " matching" : ""}`;
    if (!list.length) {
      replace(body, h("div", { class: "empty-state" },
        h("h2", null, narrowed ? "No runs match these filters" : "No runs yet"),
        h("p", { class: "muted" }, narrowed
          ? "Try another search, project or tag, or clear the filters."
          : "Upload a Transformer Engine debug-log archive (fp8_log_dir as .tar.gz) to get per-layer FP8 statistics and a BF16 recommendation."),
        h("a", { class: "btn btn-primary", href: narrowed ? "#/runs" : "#/upload" }, narrowed ? "Clear filters" : "Upload a run")));
      return;
    }
    replace(tbody, state.group ? grouped(list) : list.map(row));
    if (!body.contains(table)) replace(body, h("div", { class: "table-scroll" }, table));
  }

  /* Rows under one header row per value of the grouping column (in the sorted order's first appearance). */
  function grouped(list) {
    const label = GROUPS.find(([key]) => key === state.group)[1];
    const keyOf = (r) => (state.group === "project" ? r.project : meta(r, state.group)) || "not given";
    const groups = new Map();
    for (const r of list) groups.set(keyOf(r), [...(groups.get(keyOf(r)) || []), r]);
    const span = 1 + COLUMNS.length + (canDelete ? 1 : 0);
    return [...groups].flatMap(([value, runs]) => [
      h("tr", { class: "group-row", "data-group": value }, h("th", { scope: "colgroup", colspan: String(span) }, `${label}: ${value} (${plural(runs.length, "run")})`)),
      ...runs.map(row)]);
  }

  const more = h("button", {
    type: "button", class: "btn", hidden: !cursor,
    onclick: async () => {
      more.disabled = true;
      try {
        const next = await api(`/runs${qs({ ...filters, limit: PAGE, cursor })}`, { signal: ctx.signal });
        items = items.concat(next.items);
        cursor = next.next_cursor;
        more.hidden = !cursor;
        render();
        poll();
      } catch (err) {
        if (err.name !== "AbortError") more.after(errorBox(err));
      } finally {
        more.disabled = false;
      }
    },
  }, "Load more");

  // Runs being ingested and ready runs whose summary is still computed: re-read the list until they settle.
  let polling = false;
  let delay = 1500; // grows while nothing changes (a summary that cannot be computed must not poll at 1.5 s forever)
  function poll() {
    const waiting = () => items.some((r) => !TERMINAL.has(r.status) || (r.status === "ready" && !r.summary));
    if (polling || !waiting()) return;
    polling = true;
    ctx.later(async () => {
      polling = false;
      try {
        const fresh = await api(`/runs${qs({ ...filters, limit: PAGE })}`, { signal: ctx.signal }); // the newest page (API max)
        const byId = new Map(fresh.items.map((r) => [r.id, r]));
        const known = new Set(items.map((r) => r.id));
        let changed = false;
        items = items.map((r) => {
          const f = byId.get(r.id);
          if (f && (f.status !== r.status || Boolean(f.summary) !== Boolean(r.summary))) changed = true;
          return f || r;
        });
        const added = fresh.items.filter((r) => !known.has(r.id) && r.id > Math.max(0, ...known));
        if (added.length) {
          items = added.concat(items);
          changed = true;
        }
        if (changed) render();
        delay = changed ? 1500 : Math.min(15000, delay * 1.5);
      } catch (err) {
        if (err.name === "AbortError") return;
        delay = Math.min(15000, delay * 2);
      }
      poll();
    }, delay);
  }

  replace(view,
    h("div", { class: "page-head" },
      h("div", null, h("h1", null, "Runs"), count),
      h("div", { class: "page-actions" }, compareNote, compareBtn, h("a", { class: "btn btn-primary", href: "#/upload" }, "Upload run"))),
    filterBar, body, h("div", { class: "center" }, more));
  render();
  poll();
}

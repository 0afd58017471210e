// Compare view (#/compare?runs=3,5,9; the two-run #/compare?base=&head= still works): 2-8 runs side by side.
//
// The runs are picked here (add, remove, make one the reference) or ticked in the runs list; the first run is the
// reference. The view shows (GET /compare/runs) the summary sentences, the verdict and recommendation table, an
// overlay of one layer's stat and of the loss (compare_charts.js), each layer's precision per run
// (compare_table.js), and with exactly two runs the base → head detail (compare_pair.js).
//
// Hash parameters: runs (or base + head), layer, tensor, stat, log, scalar (the overlays' choice).

import { h, replace, $ } from "./dom.js";
import { runLabel } from "./format.js";
import { api, qs, errorBox } from "./api.js";
import { sevBadge, card, loading } from "./widgets.js";
import { go, replaceHash, setTitle } from "./router.js";
import { runSwatch } from "./compare_colors.js";
import { overlayCard, scalarCard } from "./compare_charts.js";
import { verdictTable, precisionTable } from "./compare_table.js";
import { pairDetail } from "./compare_pair.js";

export const MIN_RUNS = 2;
export const MAX_RUNS = 8;

/* "/compare?runs=3,5,9&..." (commas kept readable; each id encoded). */
export function compareHash(ids, extra = {}) {
  const more = qs(extra);
  return `/compare?runs=${ids.map(encodeURIComponent).join(",")}${more ? `&${more.slice(1)}` : ""}`;
}

/* Run ids of the hash: `runs=1,2,3`, else the two-run `base` + `head`; tokens as given (the API judges them). */
export function idsOf(query) {
  const runs = query.get("runs");
  const tokens = runs !== null ? runs.split(",") : [query.get("base"), query.get("head")].filter((x) => x !== null);
  return tokens.map((t) => t.trim()).filter(Boolean);
}

export async function compareView(ctx, query) {
  setTitle("Compare");
  const view = $("#view");
  const ids = idsOf(query);
  const state = {
    layer: query.get("layer") || "", tensor: query.get("tensor") || "", stat: query.get("stat") || "",
    log: query.get("log") === "1", scalar: query.get("scalar") || "loss",
  };
  const sync = () => replaceHash(ctx, `#${compareHash(ids, {
    layer: state.layer, tensor: state.tensor, stat: state.stat, log: state.log ? "1" : "", scalar: state.scalar === "loss" ? "" : state.scalar,
  })}`);
  replace(view, h("div", { class: "page-head" }, h("h1", null, "Compare runs")), loading("Loading runs…"));

  const enough = ids.length >= MIN_RUNS;
  const [list, cmp] = await Promise.all([
    api(`/runs?status=ready&limit=200`, { signal: ctx.signal }),
    enough ? api(`/compare/runs${qs({ runs: ids.join(",") })}`, { signal: ctx.signal }).catch((err) => {
      if (err.name === "AbortError") throw err;
      return { __error: err };
    }) : null,
  ]);
  const known = new Map(list.items.map((r) => [String(r.id), r]));
  for (const r of (cmp && cmp.runs) || []) known.set(String(r.id), r);
  const content = h("div", { id: "compare-result" });
  replace(view, h("div", { class: "page-head" }, h("div", null, h("h1", null, "Compare runs"),
    h("p", { class: "page-sub" }, `Two to ${MAX_RUNS} runs side by side; the first is the reference.`))),
  picker(ids, known, list.items), content);

  if (!enough) {
    replace(content, h("div", { class: "empty-state" },
      h("h2", null, ids.length ? "Pick one more run" : "Pick runs to compare"),
      h("p", { class: "muted" }, list.items.length >= MIN_RUNS
        ? `Add runs above, or tick ${MIN_RUNS}–${MAX_RUNS} runs in the runs list and press “Compare selected”.`
        : "Comparison needs at least two ready runs.")));
    return;
  }
  if (cmp.__error) {
    replace(content, errorBox(cmp.__error, { title: "Comparison failed" }));
    return;
  }
  setTitle(`Compare ${cmp.runs.map((r) => `#${r.id}`).join(", ")}`);
  const pair = h("div", { id: "compare-pair" });
  replace(content,
    summaryCard(cmp),
    verdictTable(cmp),
    overlayCard(ctx, cmp, ids, state, sync),
    scalarCard(ctx, ids, state, sync),
    precisionTable(cmp),
    cmp.runs.length === 2 ? h("section", { class: "pair-section", "aria-labelledby": "compare-pair-title" },
      h("h2", { id: "compare-pair-title", class: "section-title" }, `Base #${cmp.runs[0].id} → head #${cmp.runs[1].id} in detail`), pair)
      : detailLinks(cmp));
  if (cmp.runs.length === 2) await pairDetail(ctx, pair, cmp.runs[0], cmp.runs[1]);
}

/* The chosen runs as chips (colour key, name, severity; remove, make reference) and the select adding one. */
function picker(ids, known, ready) {
  const goTo = (next) => go(next.length ? compareHash(next) : "/compare");
  const full = ids.length >= MAX_RUNS;
  const chips = ids.map((id, i) => {
    const run = known.get(id);
    return h("li", { class: "run-chip", "data-run": id },
      runSwatch(i),
      h("a", { href: `#/runs/${id}`, class: "run-chip-name" }, run ? `#${id} ${runLabel(run)}` : `#${id}`),
      run && run.project ? h("span", { class: "muted small" }, run.project) : null,
      run && run.severity ? sevBadge(run.severity) : null,
      i === 0 ? h("span", { class: "chip chip-small" }, "reference")
        : h("button", { type: "button", class: "btn btn-small btn-ghost make-ref", title: "Make this run the reference (first)",
          onclick: () => goTo([id, ...ids.filter((x) => x !== id)]) }, ids.length === 2 ? "⇄ Swap" : "Make reference"),
      h("button", { type: "button", class: "btn btn-small btn-ghost remove-run", "aria-label": `Remove #${id} from the comparison`,
        title: "Remove from the comparison", onclick: () => goTo(ids.filter((x) => x !== id)) }, "×"));
  });
  const options = ready.filter((r) => !ids.includes(String(r.id)));
  const add = h("select", {
    id: "compare-add", disabled: full || !options.length, "aria-label": "Add a run to the comparison",
    onchange: (e) => { if (e.target.value) goTo([...ids, e.target.value]); },
  }, h("option", { value: "" }, full ? `${MAX_RUNS} runs chosen` : "Add a run…"),
  options.map((r) => h("option", { value: String(r.id) }, `#${r.id} · ${runLabel(r)} · ${r.project}`)));
  const over = ids.length - MAX_RUNS;
  const message = over > 0 ? `${ids.length} runs chosen: a comparison shows at most ${MAX_RUNS}; remove ${over}.`
    : full ? `A comparison shows at most ${MAX_RUNS} runs: remove one to add another.`
      : ids.length < MIN_RUNS ? `Choose at least ${MIN_RUNS} runs.` : "";
  return h("form", { class: "filters compare-picker", id: "compare-picker", "aria-label": "Runs to compare", onsubmit: (e) => e.preventDefault() },
    h("ol", { class: "run-chips", id: "compare-chosen" }, chips),
    h("div", { class: "field field-inline" }, add),
    h("p", { class: ["small", over > 0 ? "error-text" : "muted"], id: "compare-limit", role: "status" }, message));
}

function summaryCard(cmp) {
  const incomparable = cmp.summary.find((x) => x.startsWith("incomparable"));
  return card("Summary", { id: "compare-multi-summary" },
    incomparable ? h("div", { class: "alert alert-warning", role: "alert", id: "compare-multi-incomparable" },
      h("div", { class: "alert-body" }, h("strong", { class: "alert-title" }, "No two of these runs share a layer"),
        h("div", null, incomparable.replace(/^incomparable:\s*/, "")))) : null,
    h("ul", { class: "sentences", id: "compare-multi-sentences" }, cmp.summary.filter((x) => x !== incomparable).map((x) => h("li", null, x))),
    cmp.runs.some((r) => r.recommendation_note) ? h("ul", { class: "sentences muted small" },
      cmp.runs.filter((r) => r.recommendation_note).map((r) => h("li", null, `#${r.id}: ${r.recommendation_note}`))) : null);
}

/* More than two runs: the reference against each other run, in detail, one link each. */
function detailLinks(cmp) {
  const [ref, ...rest] = cmp.runs;
  return card("Two runs in detail", {
    id: "compare-detail-links",
    subtitle: "Per-layer deltas, moved problems and both heatmaps on one scale, for the reference and one other run.",
  }, h("ul", { class: "plain-list" }, rest.map((r) => h("li", null,
    h("a", { href: `#${compareHash([ref.id, r.id])}` }, `#${ref.id} ${runLabel(ref)} → #${r.id} ${runLabel(r)}`)))));
}


// A live run's story, while it trains (live.js) and after it is finalized (the run page, run.js): its timeline of
// early-warning events with the alerts sent for them. Its training scalars are drawn by run_curves.js on both pages;
// the scalar names and line colours shared by the charts are here.
//
// The timeline pages through every event (GET /live/runs/<id>/events?before=<id>&limit=N, newest first): Newer /
// Older move a page, the range says which events of how many are shown. Each event stands for one (layer, kind)
// of a received piece; the series it groups are listed under it. An alert delivery is shown under its event.

import { h, replace } from "./dom.js";
import { api, errorBox, ApiError } from "./api.js";
import { fmtInt, fmtDate, plural } from "./format.js";
import { card, sevBadge } from "./widgets.js";

export const SCALARS = ["loss", "grad_norm", "param_norm", "lr", "tokens_per_s", "mem_gb"];
export const LINE_COLORS = ["#2563eb", "#9333ea", "#0d9488", "#e16f24", "#cf222e", "#6e7781", "#1a7f37", "#b08800"];
export const EVENTS_PAGE = 25;

function eventItem(e) {
  const members = (e.detail && e.detail.members) || [];
  return h("li", { class: "timeline-item", dataset: { kind: e.kind, event: String(e.id), severity: e.severity } },
    h("time", { class: "muted small mono", datetime: e.created_at }, fmtDate(e.created_at)), " ",
    sevBadge(e.severity), " ", h("strong", null, e.kind.replaceAll("_", " ")), " ",
    h("span", { class: "mono small" }, `rank ${e.rank} · iteration ${fmtInt(e.iteration)}`), " ",
    h("span", null, e.message),
    members.length > 1 ? h("details", { class: "timeline-members" },
      h("summary", { class: "muted small" }, `${plural(e.detail.series || members.length, "series", "series")} grouped`),
      h("ul", { class: "plain-list mono small" }, members.map((m) =>
        h("li", null, `${m.tensor} ${m.stat} · rank ${m.rank} · iteration ${fmtInt(m.iteration)}`)))) : null);
}

function alertItem(a) {
  return h("li", { class: "timeline-item timeline-alert", dataset: { alert: a.status } },
    h("time", { class: "muted small mono", datetime: a.created_at }, fmtDate(a.created_at)), " ",
    h("span", { class: ["badge", a.status === "failed" ? "sev-severe" : "badge-neutral"] }, `alert ${a.status}`), " ",
    h("span", null, (a.event && (a.event.message || a.event.kind)) || "alert"),
    a.last_error ? h("span", { class: "muted small" }, ` (${a.last_error})`) : null,
    a.attempts > 1 ? h("span", { class: "muted small" }, ` after ${a.attempts} attempts`) : null);
}

/* The paged event timeline of a run: { el, refresh(), loadAlerts(), total() }. `id` names the list element. */
export function eventTimeline(ctx, run, { id, empty = "No early warning so far." }) {
  const list = h("ol", { class: "live-timeline", id });
  const range = h("span", { class: "muted small", id: `${id}-range`, "aria-live": "polite" });
  const newer = h("button", { type: "button", class: "btn btn-small", id: `${id}-newer`, disabled: true, onclick: () => move(-1) }, "← Newer");
  const older = h("button", { type: "button", class: "btn btn-small", id: `${id}-older`, disabled: true, onclick: () => move(1) }, "Older →");
  const pager = h("div", { class: "timeline-pager", hidden: true }, newer, range, older);
  const el = h("div", { class: "timeline" }, list, pager);
  const befores = [null]; // the `before` of each page seen, newest page first
  let page = { total: 0, events: [], next_before: null };
  let alerts = [];
  let alertsAvailable = true;

  function render() {
    const byEvent = new Map();
    for (const a of alerts) {
      const key = a.event && a.event.id;
      if (key !== undefined && key !== null) byEvent.set(key, [...(byEvent.get(key) || []), a]);
    }
    if (!page.events.length) replace(list, h("li", { class: "muted" }, empty));
    else replace(list, page.events.map((e) => [eventItem(e), (byEvent.get(e.id) || []).map(alertItem)]));
    const first = (befores.length - 1) * EVENTS_PAGE + 1;
    pager.hidden = page.total <= EVENTS_PAGE && befores.length === 1;
    range.textContent = page.events.length
      ? `events ${fmtInt(first)}–${fmtInt(first + page.events.length - 1)} of ${fmtInt(page.total)}, newest first`
      : `${fmtInt(page.total)} events`;
    newer.disabled = befores.length === 1;
    older.disabled = page.next_before === null;
    el.dataset.total = String(page.total);
  }

  async function load() {
    const before = befores[befores.length - 1];
    const query = new URLSearchParams({ limit: String(EVENTS_PAGE), ...(before ? { before: String(before) } : {}) });
    page = await api(`/live/runs/${run.id}/events?${query}`, { signal: ctx.signal });
    render();
  }

  async function move(step) {
    if (step > 0 && page.next_before !== null) befores.push(page.next_before);
    else if (step < 0 && befores.length > 1) befores.pop();
    else return;
    try {
      await load();
    } catch (err) {
      if (err.name !== "AbortError") replace(list, h("li", null, errorBox(err, { title: "Events unavailable" })));
    }
  }

  async function loadAlerts() {
    if (!alertsAvailable) return;
    try {
      alerts = await api(`/alerts/log?run_id=${run.id}&limit=500`, { signal: ctx.signal });
      render();
    } catch (err) {
      if (err.name === "AbortError") throw err;
      if (err instanceof ApiError && (err.status === 404 || err.status === 403)) alertsAvailable = false; // no alerts API / no scope
    }
  }

  render();
  return { el, refresh: load, loadAlerts, total: () => page.total };
}

/* The finished run page's card (#live-story): the early warnings the run raised while it trained live (its training
 * scalars are drawn by the Training curves card, run_curves.js). Resolves to null for a run without events. */
export async function storyCard(ctx, run) {
  const timeline = eventTimeline(ctx, run, { id: "story-timeline", empty: "No early warning was raised while the run was live." });
  await timeline.refresh();
  if (!timeline.total()) return null;
  await timeline.loadAlerts();
  return card("While it trained", { id: "live-story",
    subtitle: "This run was streamed live: the early warnings raised on the way and the alerts sent for them (kept after finalize; its scalars are in Training curves)." },
  h("h3", { class: "story-heading" }, `Events and alerts (${fmtInt(timeline.total())})`), timeline.el);
}

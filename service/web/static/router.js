// Hash routing machinery: parse the hash, navigate, per-view context (abort/timers/cleanup), render a route.

import { h, replace, $ } from "./dom.js";
import { ApiError, qs, errorBox } from "./api.js";
import { askForToken } from "./auth.js";

let routes = []; // [pattern, nav key, view(ctx, match, query)], set by start()
let current = null;
let firstRender = true;

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/runs";
  const [path, query = ""] = raw.split("?");
  return { path: path.replace(/\/+$/, "") || "/runs", query: new URLSearchParams(query) };
}

export function go(path, params) {
  const target = `#${path}${params ? qs(params) : ""}`;
  if (location.hash === target) route();
  else location.hash = target;
}

function makeContext() {
  const controller = new AbortController();
  const timers = new Set();
  const cleanups = [];
  return {
    hash: location.hash, // the hash this view was rendered for, and then what replaceHash wrote
    signal: controller.signal,
    alive: () => !controller.signal.aborted,
    later(fn, ms) {
      const id = setTimeout(() => {
        timers.delete(id);
        if (!controller.signal.aborted) fn();
      }, ms);
      timers.add(id);
      return id;
    },
    onLeave(fn) {
      cleanups.push(fn);
    },
    dispose() {
      controller.abort();
      timers.forEach(clearTimeout);
      cleanups.forEach((fn) => fn());
    },
  };
}

export async function route() {
  if (current) current.dispose();
  const ctx = makeContext();
  current = ctx;
  const { path, query } = parseHash();
  const view = $("#view");
  const match = routes.map(([re, nav, fn]) => [path.match(re), nav, fn]).find(([m]) => m);
  document.querySelectorAll("[data-nav]").forEach((a) => {
    if (match && a.dataset.nav === match[1]) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  });
  if (!match) {
    replace(view, h("div", { class: "page-head" }, h("h1", null, "Page not found")),
      errorBox(new ApiError(404, "NotFound", `no page ${path}`)),
      h("p", null, h("a", { href: "#/runs" }, "Go to the runs list")));
    return;
  }
  try {
    await match[2](ctx, match[0], query);
  } catch (err) {
    if (err.name === "AbortError" || !ctx.alive()) return;
    console.warn(err);
    if (err instanceof ApiError && err.status === 401) {
      // The sign-in dialog is open (api.js asked for a token): behind it, say what is needed, not that it broke.
      replace(view, h("div", { class: "page-head" }, h("h1", null, "Sign in to see this page")),
        h("div", { class: "empty", id: "signin-needed" },
          h("p", null, "This service needs an access token. Enter one to continue; it is kept for this tab only."),
          h("button", { type: "button", class: "btn btn-primary", onclick: () => askForToken() }, "Enter a token")));
      return;
    }
    const missing = err instanceof ApiError && err.status === 404;
    replace(view, h("div", { class: "page-head" }, h("h1", null, missing ? "Not found" : "Something went wrong")),
      errorBox(err, { retry: missing ? null : route }),
      h("p", null, h("a", { href: "#/runs" }, "← Back to the runs list")));
  }
  if (!firstRender && ctx.alive()) {
    const heading = $("#view h1");
    if (heading) {
      heading.tabIndex = -1;
      heading.focus({ preventScroll: true });
    }
    window.scrollTo(0, 0);
  }
  firstRender = false;
}

/* Rewrite the hash for the view `ctx` (history.replaceState: no hashchange, no render) so the URL keeps what
   the view shows; nothing when the URL has moved on since the view last rendered or wrote it. A link's or the
   address bar's navigation changes location.hash at once and dispatches its hashchange as a task of its own:
   a write landing in between (a recommendation tab chosen when its answer came) put the old view's hash back,
   and the router, reading location.hash, rendered the old view again instead of the page asked for
   (the HTML standard's "navigate to a fragment" algorithm).
   Returns whether it wrote. */
export function replaceHash(ctx, hash) {
  if (!ctx.alive() || location.hash !== ctx.hash) return false;
  history.replaceState(null, "", hash);
  ctx.hash = location.hash; // as the URL parser wrote it back
  return true;
}

export function setTitle(text) {
  document.title = text ? `${text} · fp8-policy` : "fp8-policy";
}

/* Install the route table and render the current hash (defaulting to #/runs); called once by app.js. */
export function start(table) {
  routes = table;
  window.addEventListener("hashchange", route);
  if (!location.hash) history.replaceState(null, "", "#/runs");
  route();
}

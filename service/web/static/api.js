// API access: fetch helpers and ApiError, query strings, the inline error box, the cached per-run analysis.

import { askForToken, authHeaders, signInReason } from "./auth.js";
import { SEVERITIES } from "./constants.js";
import { h } from "./dom.js";

export const API = "/api/v1";

export class ApiError extends Error {
  constructor(status, error, detail) {
    super(detail || error);
    this.status = status;
    this.error = error;
    this.detail = detail;
  }
}

export function detailText(body) {
  if (!body || typeof body !== "object") return "";
  const d = body.detail;
  if (typeof d === "string") return d;
  if (Array.isArray(d)) {
    return d.map((e) => `${(e.loc || []).filter((p) => p !== "query" && p !== "body").join(".")}: ${e.msg}`).join("; ");
  }
  return d ? JSON.stringify(d) : "";
}

export async function apiFetch(path, { signal, as = "json", method = "GET", body } = {}) {
  let response;
  const json = body === undefined ? {} : { "Content-Type": "application/json" }; // body: sent as JSON
  try {
    response = await fetch(path.startsWith("/") ? path : `${API}/${path}`, {
      method,
      signal,
      headers: { ...(as === "json" ? { Accept: "application/json" } : {}), ...json, ...authHeaders() },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "NetworkError", `the service did not answer (${err.message})`);
  }
  if (!response.ok) {
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      /* not JSON */
    }
    const error = (body && body.error) || (response.status === 422 ? "ValidationError" : `HTTP ${response.status}`);
    if (response.status === 401) askForToken(signInReason(error, detailText(body)));
    throw new ApiError(response.status, error, detailText(body) || response.statusText);
  }
  if (as === "response") return response;
  if (as === "text") return response.text();
  return response.json();
}

export const api = (path, opts) => apiFetch(`${API}${path}`, opts);

export function qs(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  const text = q.toString();
  return text ? `?${text}` : "";
}

export function errorBox(err, { title, retry } = {}) {
  const isApi = err instanceof ApiError;
  return h(
    "div",
    { class: "alert alert-error", role: "alert" },
    h("div", { class: "alert-body" },
      title ? h("strong", { class: "alert-title" }, title) : null,
      h("div", null,
        h("code", { class: "error-code" }, isApi ? err.error : "Error"),
        " ",
        h("span", { class: "error-detail" }, isApi ? err.detail : String(err.message || err)))),
    retry ? h("button", { type: "button", class: "btn btn-small", onclick: retry }, "Retry") : null,
  );
}

// Overall severity per run, computed from the analysis (worst finding first). Cached for the session.
const analysisCache = new Map();

/* The run's analysis (thresholds: null or {warning, critical, severe} overrides), cached per run and thresholds. */
export function analysisOf(runId, signal, thresholds = null) {
  const key = `${runId}${qs(thresholds || {})}`;
  if (!analysisCache.has(key)) {
    const promise = api(`/runs/${runId}/analysis${qs(thresholds || {})}`, { signal }).catch((err) => {
      analysisCache.delete(key);
      throw err;
    });
    analysisCache.set(key, promise);
  }
  return analysisCache.get(key);
}

export function overallSeverity(analysis) {
  let worst = "ok";
  for (const f of analysis.findings || []) if (sevRank(f.severity) > sevRank(worst)) worst = f.severity;
  return worst;
}

export const sevRank = (sev) => SEVERITIES.indexOf(sev);

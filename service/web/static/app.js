/* fp8-policy dashboard: a dependency-free single-page app over the /api/v1 endpoints.
 *
 * Routes (URL hash): #/runs?project=&tag=&status=   runs list with filters and lazy overall severity
 *                    #/runs/<id>                     run page: figures, heatmap, findings, recommendation, layers
 *                    #/compare?base=<id>&head=<id>   two runs side by side with their deltas
 *                    #/upload                        drag & drop upload with progress and live status
 * Every view renders into #view; leaving a view aborts its requests and timers. API errors
 * ({"error", "detail"}) are shown inline where the data would have been.
 */
"use strict";

(() => {
  const API = "/api/v1";
  const SEVERITIES = ["ok", "warning", "critical", "severe"];
  const TENSORS = ["gradient", "activation", "weight"];
  const SEV_COLORS = { ok: "#1a7f37", warning: "#d4a72c", critical: "#e16f24", severe: "#cf222e" }; // = app.css
  const TENSOR_COLORS = { gradient: "#2563eb", activation: "#9333ea", weight: "#0d9488" };
  const FORMATS = [
    { id: "json", label: "JSON", ext: "json" },
    { id: "te-yaml", label: "TE YAML", ext: "yaml" },
    { id: "megatron", label: "Megatron", ext: "sh" },
    { id: "hydra", label: "Hydra", ext: "txt" },
    { id: "torchao", label: "torchao", ext: "py" },
  ];
  const TERMINAL = new Set(["ready", "failed"]);
  const SVG_NS = "http://www.w3.org/2000/svg";

  // ------------------------------------------------------------------------------------------ DOM helpers
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  function setAttrs(el, attrs) {
    if (!attrs) return;
    for (const [key, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") el.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
      else if (key === "dataset") Object.assign(el.dataset, value);
      else if (key === "style" && typeof value === "object") Object.assign(el.style, value);
      else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
      else if (key === "text") el.textContent = value;
      else if (value === true) el.setAttribute(key, "");
      else el.setAttribute(key, String(value));
    }
  }

  function append(el, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  function replace(el, ...children) {
    el.replaceChildren();
    append(el, children);
    return el;
  }

  const $ = (selector, root = document) => root.querySelector(selector);

  // ------------------------------------------------------------------------------------------ formatting
  function isNum(v) {
    return typeof v === "number" && Number.isFinite(v);
  }

  function toNum(v) {
    if (isNum(v)) return v;
    if (v === "NaN") return NaN;
    if (v === "Infinity") return Infinity;
    if (v === "-Infinity") return -Infinity;
    return null;
  }

  function fmtNum(v, digits = 4) {
    if (v === null || v === undefined || v === "") return "—";
    if (typeof v === "string") return v === "Infinity" ? "∞" : v === "-Infinity" ? "−∞" : v;
    if (!Number.isFinite(v)) return Number.isNaN(v) ? "NaN" : v > 0 ? "∞" : "−∞";
    if (Number.isInteger(v) && Math.abs(v) < 1e15) return v.toLocaleString("en-US");
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
    return v.toLocaleString("en-US", { maximumFractionDigits: digits });
  }

  function fmtPct(v, digits = 2) {
    if (v === null || v === undefined) return "—";
    if (!isNum(v)) return fmtNum(v);
    return `${v.toFixed(digits)}%`;
  }

  function fmtSigned(v, digits = 2, unit = "") {
    if (!isNum(v)) return fmtNum(v);
    const sign = v > 0 ? "+" : v < 0 ? "−" : "±";
    return `${sign}${Math.abs(v).toFixed(digits)}${unit}`;
  }

  function fmtInt(v) {
    return isNum(v) ? Math.round(v).toLocaleString("en-US") : "—";
  }

  function fmtBytes(n) {
    if (!isNum(n)) return "—";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i += 1;
    }
    return `${n.toFixed(i === 0 ? 0 : n < 10 ? 1 : 0)} ${units[i]}`;
  }

  function fmtDate(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return iso;
    const pad = (x) => String(x).padStart(2, "0");
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
  }

  function fmtAgo(iso) {
    if (!iso) return "";
    const seconds = (Date.now() - new Date(iso).getTime()) / 1000;
    if (!Number.isFinite(seconds)) return "";
    if (seconds < 45) return "just now";
    const steps = [[60, "min", 60], [24, "h", 3600], [30, "d", 86400], [12, "mo", 2592000]];
    for (const [limit, unit, div] of steps) {
      const value = Math.round(seconds / div);
      if (value < limit) return `${value} ${unit} ago`;
    }
    return `${Math.round(seconds / 31536000)} y ago`;
  }

  function fmtDuration(startIso, endIso) {
    if (!startIso || !endIso) return "—";
    const ms = new Date(endIso) - new Date(startIso);
    if (!Number.isFinite(ms) || ms < 0) return "—";
    return ms < 1000 ? `${ms} ms` : ms < 120000 ? `${(ms / 1000).toFixed(1)} s` : `${(ms / 60000).toFixed(1)} min`;
  }

  function plural(n, word, many = `${word}s`) {
    return `${fmtInt(n)} ${n === 1 ? word : many}`;
  }

  function runLabel(run) {
    return run.name || run.upload_filename || `run ${run.id}`;
  }

  // ------------------------------------------------------------------------------------------ API
  class ApiError extends Error {
    constructor(status, error, detail) {
      super(detail || error);
      this.status = status;
      this.error = error;
      this.detail = detail;
    }
  }

  function detailText(body) {
    if (!body || typeof body !== "object") return "";
    const d = body.detail;
    if (typeof d === "string") return d;
    if (Array.isArray(d)) {
      return d.map((e) => `${(e.loc || []).filter((p) => p !== "query" && p !== "body").join(".")}: ${e.msg}`).join("; ");
    }
    return d ? JSON.stringify(d) : "";
  }

  async function apiFetch(path, { signal, as = "json", method = "GET" } = {}) {
    let response;
    try {
      response = await fetch(path.startsWith("/") ? path : `${API}/${path}`, {
        method,
        signal,
        headers: as === "json" ? { Accept: "application/json" } : {},
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
      throw new ApiError(response.status, error, detailText(body) || response.statusText);
    }
    if (as === "response") return response;
    if (as === "text") return response.text();
    return response.json();
  }

  const api = (path, opts) => apiFetch(`${API}${path}`, opts);

  function qs(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
    const text = q.toString();
    return text ? `?${text}` : "";
  }

  function errorBox(err, { title, retry } = {}) {
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

  function analysisOf(runId, signal) {
    if (!analysisCache.has(runId)) {
      const promise = api(`/runs/${runId}/analysis`, { signal }).catch((err) => {
        analysisCache.delete(runId);
        throw err;
      });
      analysisCache.set(runId, promise);
    }
    return analysisCache.get(runId);
  }

  function overallSeverity(analysis) {
    let worst = "ok";
    for (const f of analysis.findings || []) if (sevRank(f.severity) > sevRank(worst)) worst = f.severity;
    return worst;
  }

  const sevRank = (sev) => SEVERITIES.indexOf(sev);

  // ------------------------------------------------------------------------------------------ small widgets
  function sevBadge(sev, extra) {
    const known = SEVERITIES.includes(sev);
    return h("span", { class: ["badge", known ? `sev-${sev}` : "badge-neutral"], title: extra || null }, sev || "—");
  }

  function statusBadge(status) {
    const busy = status === "queued" || status === "processing";
    return h("span", { class: ["badge", `status-${status}`], "data-status": status },
      busy ? h("span", { class: "spinner", "aria-hidden": "true" }) : null, status);
  }

  /* A layer name that keeps its informative tail (block index and sublayer) when it has to be shortened. */
  function layerName(name) {
    const m = /^(.*?\.)(\d+\..*)$/.exec(name) || /^(.*\.)([^.]+)$/.exec(name);
    const [prefix, tail] = m ? [m[1], m[2]] : ["", name];
    return h("span", { class: "mono layer-name", title: name },
      prefix ? h("span", { class: "ln-prefix" }, prefix) : null, h("span", { class: "ln-tail" }, tail));
  }

  function chip(text, href, title) {
    return href ? h("a", { class: "chip", href, title }, text) : h("span", { class: "chip", title }, text);
  }

  function figure(label, value, hint) {
    return h("div", { class: "figure" },
      h("div", { class: "figure-value" }, value),
      h("div", { class: "figure-label" }, label),
      hint ? h("div", { class: "figure-hint" }, hint) : null);
  }

  function card(title, { id, actions, subtitle, cls } = {}, ...body) {
    const headingId = id ? `${id}-title` : null;
    return h("section", { class: ["card", cls], id, "aria-labelledby": headingId },
      h("div", { class: "card-head" },
        h("div", null, h("h2", { id: headingId }, title), subtitle ? h("p", { class: "card-sub" }, subtitle) : null),
        actions ? h("div", { class: "card-actions" }, actions) : null),
      h("div", { class: "card-body" }, body));
  }

  function loading(text = "Loading…") {
    return h("p", { class: "muted loading" }, h("span", { class: "spinner", "aria-hidden": "true" }), text);
  }

  function toast(message) {
    const el = $("#toast");
    el.textContent = message;
    el.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => {
      el.hidden = true;
    }, 2200);
  }

  async function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(text);
        return true;
      } catch (_) {
        /* fall back below */
      }
    }
    const area = h("textarea", { class: "visually-hidden", readonly: true });
    area.value = text;
    document.body.append(area);
    area.select();
    let ok = false;
    try {
      ok = document.execCommand("copy");
    } catch (_) {
      ok = false;
    }
    area.remove();
    return ok;
  }

  function selectField(label, id, options, value, onchange) {
    const select = h("select", { id, onchange: (e) => onchange(e.target.value) },
      options.map(([v, text]) => h("option", { value: v, selected: String(v) === String(value) }, text)));
    return h("div", { class: "field field-inline" }, h("label", { for: id }, label), select);
  }

  /* A table whose headers sort it. columns: [{key, label, get(row), render(row), num, title, cls}] */
  function sortableTable({ columns, rows, caption, id, initial, rowAttrs, onRow, empty }) {
    let sortKey = initial ? initial.key : null;
    let sortDir = initial ? initial.dir : 1;
    const tbody = h("tbody");
    const headCells = columns.map((col) => {
      const button = h("button", { type: "button", class: "th-sort", onclick: () => sortBy(col.key) },
        col.label, h("span", { class: "sort-icon", "aria-hidden": "true" }));
      return h("th", { scope: "col", class: [col.num ? "num" : null, col.cls], "data-key": col.key, title: col.title || null },
        col.sortable === false ? col.label : button);
    });
    const table = h("table", { class: "table", id },
      caption ? h("caption", { class: "visually-hidden" }, caption) : null,
      h("thead", null, h("tr", null, headCells)),
      tbody);

    function value(col, row) {
      const v = col.get ? col.get(row) : row[col.key];
      const n = toNum(v);
      return n === null ? v : n;
    }

    function sorted() {
      if (!sortKey) return rows;
      const col = columns.find((c) => c.key === sortKey);
      return rows.map((row, i) => [row, i]).sort((a, b) => {
        const va = value(col, a[0]);
        const vb = value(col, b[0]);
        const missA = va === null || va === undefined || (typeof va === "number" && Number.isNaN(va));
        const missB = vb === null || vb === undefined || (typeof vb === "number" && Number.isNaN(vb));
        if (missA || missB) return missA === missB ? a[1] - b[1] : missA ? 1 : -1;
        const c = typeof va === "number" && typeof vb === "number" ? va - vb : String(va).localeCompare(String(vb), "en", { numeric: true });
        return c !== 0 ? c * sortDir : a[1] - b[1];
      }).map(([row]) => row);
    }

    function render() {
      headCells.forEach((th, i) => {
        const key = columns[i].key;
        th.setAttribute("aria-sort", key === sortKey ? (sortDir > 0 ? "ascending" : "descending") : "none");
      });
      const list = sorted();
      if (!list.length) {
        replace(tbody, h("tr", null, h("td", { colspan: columns.length, class: "empty" }, empty || "Nothing to show.")));
        return;
      }
      replace(tbody, list.map((row) => {
        const attrs = rowAttrs ? rowAttrs(row) : {};
        const tr = h("tr", attrs, columns.map((col) => h("td", { class: [col.num ? "num" : null, col.cls] },
          col.render ? col.render(row) : fmtNum(value(col, row)))));
        if (onRow) {
          tr.tabIndex = -1; // roving: one row of the table is in the tab order (see below)
          tr.classList.add("clickable");
          tr.addEventListener("focus", () => {
            tbody.querySelectorAll("tr[tabindex='0']").forEach((other) => {
              if (other !== tr) other.tabIndex = -1;
            });
            tr.tabIndex = 0;
          });
          tr.addEventListener("click", (e) => {
            if (!e.target.closest("a, button, input")) onRow(row, tr);
          });
          tr.addEventListener("keydown", (e) => {
            if (e.key === "Enter" || e.key === " ") {
              e.preventDefault();
              onRow(row, tr);
            } else if (e.key === "ArrowDown" && tr.nextElementSibling) {
              e.preventDefault();
              tr.nextElementSibling.focus();
            } else if (e.key === "ArrowUp" && tr.previousElementSibling) {
              e.preventDefault();
              tr.previousElementSibling.focus();
            }
          });
        }
        return tr;
      }));
      if (onRow && tbody.firstElementChild) tbody.firstElementChild.tabIndex = 0;
    }

    function sortBy(key) {
      const col = columns.find((c) => c.key === key);
      if (sortKey === key) sortDir = -sortDir;
      else {
        sortKey = key;
        sortDir = col.num ? -1 : 1; // numbers: biggest (worst) first
      }
      render();
    }

    render();
    return {
      table,
      setRows(next) {
        rows = next;
        render();
      },
    };
  }

  function tabs({ items, onSelect, label }) {
    const list = h("div", { class: "tabs", role: "tablist", "aria-label": label });
    const panelId = `panel-${Math.random().toString(36).slice(2, 8)}`;
    const panel = h("div", { class: "tab-panel", role: "tabpanel", tabindex: "0", id: panelId });
    const buttons = items.map((item, i) => h("button", {
      type: "button", role: "tab", class: "tab", id: `tab-${item.id}`, "data-format": item.id, "aria-controls": panelId,
      "aria-selected": i === 0 ? "true" : "false", tabindex: i === 0 ? "0" : "-1",
      onclick: () => select(i),
      onkeydown: (e) => {
        const moves = { ArrowRight: 1, ArrowLeft: -1 };
        if (e.key in moves) {
          e.preventDefault();
          const next = (i + moves[e.key] + items.length) % items.length;
          select(next);
          buttons[next].focus();
        } else if (e.key === "Home" || e.key === "End") {
          e.preventDefault();
          const next = e.key === "Home" ? 0 : items.length - 1;
          select(next);
          buttons[next].focus();
        }
      },
    }, item.label));
    append(list, buttons);

    function select(i) {
      buttons.forEach((b, k) => {
        b.setAttribute("aria-selected", k === i ? "true" : "false");
        b.tabIndex = k === i ? 0 : -1;
      });
      panel.setAttribute("aria-labelledby", buttons[i].id);
      onSelect(items[i], panel);
    }

    return { list, panel, select };
  }

  // ------------------------------------------------------------------------------------------ chart (inline SVG)
  function niceStep(range, target) {
    const raw = range / Math.max(1, target);
    const mag = 10 ** Math.floor(Math.log10(raw));
    const norm = raw / mag;
    return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 2.5 ? 2.5 : norm <= 5 ? 5 : 10) * mag;
  }

  function ticks(lo, hi, target) {
    if (!(hi > lo)) hi = lo + 1;
    const step = niceStep(hi - lo, target);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
    return { values: out, step };
  }

  function tickLabel(v, step) {
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential(1);
    const digits = Math.max(0, Math.min(6, -Math.floor(Math.log10(step)) + (step / 10 ** Math.floor(Math.log10(step)) === 2.5 ? 1 : 0)));
    return v.toLocaleString("en-US", { maximumFractionDigits: digits });
  }

  /* series: [{label, color, points: [[x, y], ...], dash}]; guides: [{value, label, color}] */
  function lineChart({ series, guides = [], width, height = 300, xLabel, yLabel, unit = "", title }) {
    const m = { top: 16, right: 96, bottom: 44, left: 64 };
    const W = Math.max(420, Math.floor(width));
    const H = height;
    const pw = W - m.left - m.right;
    const ph = H - m.top - m.bottom;
    const all = series.flatMap((sr) => sr.points.filter((p) => Number.isFinite(p[1])));
    const xs = all.map((p) => p[0]);
    const ys = all.map((p) => p[1]);
    let x0 = Math.min(...xs);
    let x1 = Math.max(...xs);
    if (!(x1 > x0)) x1 = x0 + 1;
    let y0 = Math.min(0, ...ys);
    let y1 = Math.max(...ys);
    const guideMax = guides.map((g) => g.value).filter((v) => v <= y1 * 1.25 || y1 === 0);
    y1 = Math.max(y1, ...guideMax, y0 + 1e-9);
    const yt = ticks(y0, y1 * 1.05, 5);
    y1 = yt.values[yt.values.length - 1];
    y0 = Math.min(y0, yt.values[0]);
    const xt = ticks(x0, x1, Math.max(3, Math.floor(pw / 90)));
    const X = (x) => m.left + ((x - x0) / (x1 - x0)) * pw;
    const Y = (y) => m.top + ph - ((y - y0) / (y1 - y0)) * ph;

    const root = s("svg", {
      class: "chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title || "chart",
    });
    root.append(s("title", null, title || ""));
    const grid = s("g", { class: "chart-grid" });
    for (const v of yt.values) {
      grid.append(s("line", { x1: m.left, x2: m.left + pw, y1: Y(v), y2: Y(v) }));
      grid.append(s("text", { x: m.left - 8, y: Y(v), class: "tick tick-y", "text-anchor": "end", "dominant-baseline": "middle" },
        tickLabel(v, yt.step) + unit));
    }
    for (const v of xt.values) {
      if (v < x0 || v > x1) continue;
      grid.append(s("line", { class: "xgrid", x1: X(v), x2: X(v), y1: m.top, y2: m.top + ph }));
      grid.append(s("text", { x: X(v), y: m.top + ph + 18, class: "tick", "text-anchor": "middle" }, tickLabel(v, xt.step)));
    }
    root.append(grid);
    root.append(s("rect", { class: "chart-frame", x: m.left, y: m.top, width: pw, height: ph }));
    if (xLabel) root.append(s("text", { class: "axis-label", x: m.left + pw / 2, y: H - 6, "text-anchor": "middle" }, xLabel));
    if (yLabel) {
      root.append(s("text", {
        class: "axis-label", transform: `translate(14 ${m.top + ph / 2}) rotate(-90)`, "text-anchor": "middle",
      }, yLabel));
    }
    for (const g of guides) {
      if (g.value < y0 || g.value > y1) continue;
      root.append(s("line", { class: "guide", x1: m.left, x2: m.left + pw, y1: Y(g.value), y2: Y(g.value), style: { stroke: g.color } }));
      root.append(s("text", { class: "guide-label", x: m.left + pw + 6, y: Y(g.value), style: { fill: g.color }, "dominant-baseline": "middle" },
        `${g.label} ${g.value}${unit}`));
    }
    const lines = s("g", { class: "chart-lines" });
    for (const sr of series) {
      let d = "";
      let pen = false;
      for (const [x, y] of sr.points) {
        if (!Number.isFinite(y)) {
          pen = false;
          continue;
        }
        d += `${pen ? "L" : "M"}${X(x).toFixed(1)} ${Y(y).toFixed(1)}`;
        pen = true;
      }
      lines.append(s("path", {
        d, class: "series", stroke: sr.color, "stroke-dasharray": sr.dash || null, "stroke-opacity": sr.opacity || null,
        "data-label": sr.label,
      }));
    }
    root.append(lines);

    // Hover read-out: nearest iteration, every series' value there.
    const cursor = s("line", { class: "cursor", x1: 0, x2: 0, y1: m.top, y2: m.top + ph, visibility: "hidden" });
    const dots = s("g", { class: "cursor-dots", visibility: "hidden" });
    root.append(cursor, dots);
    const overlay = s("rect", { x: m.left, y: m.top, width: pw, height: ph, fill: "transparent", class: "overlay" });
    root.append(overlay);
    const tip = h("div", { class: "chart-tip", hidden: true });
    const allX = [...new Set(xs)].sort((a, b) => a - b);
    overlay.addEventListener("mousemove", (e) => {
      const rect = root.getBoundingClientRect();
      const px = ((e.clientX - rect.left) / rect.width) * W;
      const xv = x0 + ((px - m.left) / pw) * (x1 - x0);
      let best = allX[0];
      for (const v of allX) if (Math.abs(v - xv) < Math.abs(best - xv)) best = v;
      cursor.setAttribute("x1", X(best));
      cursor.setAttribute("x2", X(best));
      cursor.setAttribute("visibility", "visible");
      dots.replaceChildren();
      const rows = [];
      for (const sr of series) {
        const p = sr.points.find((q) => q[0] === best);
        if (!p) continue;
        if (Number.isFinite(p[1])) dots.append(s("circle", { cx: X(best), cy: Y(p[1]), r: 3.5, fill: sr.color }));
        rows.push(h("div", { class: "tip-row" }, h("span", { class: "swatch", style: { background: sr.color } }),
          `${sr.label}: `, h("strong", null, `${fmtNum(p[1], 4)}${unit}`)));
      }
      dots.setAttribute("visibility", "visible");
      replace(tip, h("div", { class: "tip-head" }, `iteration ${fmtInt(best)}`), rows);
      tip.hidden = false;
      const left = (X(best) / W) * rect.width;
      tip.style.left = `${Math.min(left + 12, rect.width - 200)}px`;
      tip.style.top = `${m.top}px`;
    });
    overlay.addEventListener("mouseleave", () => {
      cursor.setAttribute("visibility", "hidden");
      dots.setAttribute("visibility", "hidden");
      tip.hidden = true;
    });
    return h("div", { class: "chart-wrap" }, root, tip);
  }

  // ------------------------------------------------------------------------------------------ router
  let current = null;
  let firstRender = true;

  function parseHash() {
    const raw = location.hash.replace(/^#/, "") || "/runs";
    const [path, query = ""] = raw.split("?");
    return { path: path.replace(/\/+$/, "") || "/runs", query: new URLSearchParams(query) };
  }

  function go(path, params) {
    const target = `#${path}${params ? qs(params) : ""}`;
    if (location.hash === target) route();
    else location.hash = target;
  }

  function makeContext() {
    const controller = new AbortController();
    const timers = new Set();
    const cleanups = [];
    return {
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

  const ROUTES = [
    [/^\/runs$/, "runs", (ctx, m, q) => runsView(ctx, q)],
    [/^\/runs\/(\d+)$/, "runs", (ctx, m) => runView(ctx, Number(m[1]))],
    [/^\/compare$/, "compare", (ctx, m, q) => compareView(ctx, q)],
    [/^\/upload$/, "upload", (ctx) => uploadView(ctx)],
  ];

  async function route() {
    if (current) current.dispose();
    const ctx = makeContext();
    current = ctx;
    const { path, query } = parseHash();
    const view = $("#view");
    const match = ROUTES.map(([re, nav, fn]) => [path.match(re), nav, fn]).find(([m]) => m);
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

  function setTitle(text) {
    document.title = text ? `${text} · fp8-policy` : "fp8-policy";
  }

  // ------------------------------------------------------------------------------------------ runs list
  async function runsView(ctx, query) {
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

  // ------------------------------------------------------------------------------------------ run page
  async function runView(ctx, runId) {
    const view = $("#view");
    setTitle(`Run ${runId}`);
    replace(view, loading("Loading run…"));
    const run = await api(`/runs/${runId}`, { signal: ctx.signal });
    setTitle(runLabel(run));

    const sevSlot = h("span", { class: "head-sev" });
    const head = h("div", { class: "page-head" },
      h("div", null,
        h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/runs" }, "Runs"), " / ",
          h("a", { href: `#/runs${qs({ project: run.project })}` }, run.project)),
        h("h1", null, runLabel(run), " ", h("span", { class: "muted run-id" }, `#${run.id}`)),
        h("div", { class: "run-meta" },
          statusBadge(run.status), sevSlot,
          run.tags.map((t) => chip(t, `#/runs${qs({ tag: t })}`)),
          h("span", { class: "muted small", title: run.created_at }, `created ${fmtDate(run.created_at)} (${fmtAgo(run.created_at)})`))),
      h("div", { class: "page-actions" },
        run.status === "ready" ? h("a", { class: "btn", href: `#/compare${qs({ base: run.id })}` }, "Compare…") : null,
        run.status === "ready" ? h("a", { class: "btn", href: `${API}/runs/${run.id}/metrics.csv`, download: "" }, "Metrics CSV") : null,
        h("a", { class: "btn btn-ghost", href: `${API}/runs/${run.id}`, target: "_blank", rel: "noopener" }, "API")));

    if (run.status !== "ready") {
      const busy = !TERMINAL.has(run.status);
      replace(view, head,
        run.status === "failed"
          ? h("div", { class: "alert alert-error", role: "alert" }, h("div", { class: "alert-body" },
            h("strong", { class: "alert-title" }, "Ingest failed"), h("div", { class: "error-detail" }, run.error || "no reason recorded")))
          : h("div", { class: "alert alert-info", role: "status" }, h("span", { class: "spinner", "aria-hidden": "true" }),
            ` This run is ${run.status}; the page updates when it is ready.`),
        ingestCard(run));
      if (busy) ctx.later(() => route(), 1000);
      return;
    }

    const figures = h("div", { class: "figures", id: "run-figures" },
      figure("Ranks", fmtInt(run.ranks)),
      figure("Layers", fmtInt(run.layer_count)),
      figure("Series", fmtInt(run.series_count)),
      figure("Points", fmtInt(run.points)),
      figure("Iterations", run.iteration_min === null ? "—" : `${fmtInt(run.iteration_min)}–${fmtInt(run.iteration_max)}`),
      figure("Lines read", fmtInt(run.lines_read), run.lines_skipped ? `${fmtInt(run.lines_skipped)} skipped` : null),
      figure("Upload", fmtBytes(run.upload_bytes), `ingest ${fmtDuration(run.started_at, run.finished_at)}`));

    const heatmapSlot = h("div");
    const findingsSlot = card("Findings", { id: "findings" }, loading("Analysing…"));
    const recSlot = card("Recommendation", { id: "recommendation" }, loading("Computing the recommendation…"));
    const layersSlot = card("Layers", { id: "layers" }, loading("Loading layers…"));
    replace(view, head, figures, heatmapSlot, findingsSlot, recSlot, layersSlot,
      ingestCard(run));

    let layersApi = null;
    const layersPromise = api(`/runs/${run.id}/layers`, { signal: ctx.signal }).catch(() => null);
    const analysisPromise = analysisOf(run.id, ctx.signal);

    analysisPromise.then(async (analysis) => {
      if (!ctx.alive()) return;
      const sev = overallSeverity(analysis);
      replace(sevSlot, sevBadge(sev, "overall severity (worst finding)"));
      findingsSlot.replaceWith(findingsCard(analysis, (layer) => layersApi && layersApi.select(layer)));
      const layersInfo = await layersPromise;
      replace(heatmapSlot, heatmapCard(ctx, run, analysis, layersInfo));
      layersApi = layersCard(ctx, run, analysis, layersInfo);
      layersSlot.replaceWith(layersApi.el);
    }).catch((err) => {
      if (err.name === "AbortError" || !ctx.alive()) return;
      replace(findingsSlot.querySelector(".card-body"), errorBox(err, { title: "Analysis failed" }));
      replace(layersSlot.querySelector(".card-body"), errorBox(err));
      layersPromise.then((layersInfo) => replace(heatmapSlot, heatmapCard(ctx, run, null, layersInfo)));
    });

    recommendationCard(ctx, run).then((el) => {
      if (ctx.alive()) recSlot.replaceWith(el);
    }).catch((err) => {
      if (err.name === "AbortError" || !ctx.alive()) return;
      replace(recSlot.querySelector(".card-body"), errorBox(err, { title: "No recommendation" }));
    });
  }

  function ingestCard(run) {
    const report = run.ingest_report || {};
    const files = report.files || [];
    const rows = files.map((f) => h("tr", null,
      h("td", { class: "mono" }, f.path), h("td", null, f.kind), h("td", { class: "num" }, fmtInt(f.rank)),
      h("td", { class: "num" }, fmtInt(f.lines_read)), h("td", { class: "num" }, fmtInt(f.skipped_lines ?? f.lines_unrecognised))));
    const samples = files.flatMap((f) => (f.skipped_samples || []).map((smp) => `${f.path}: ${typeof smp === "string" ? smp : JSON.stringify(smp)}`));
    return h("details", { class: "card details-card", id: "ingest" },
      h("summary", null, h("span", { class: "summary-title" }, "Ingest report"),
        h("span", { class: "muted small" }, ` ${plural(files.length, "file")} · sha256 ${run.sha256.slice(0, 12)}… · ${run.upload_filename || "upload"}`)),
      h("div", { class: "card-body" },
        h("dl", { class: "kv" },
          h("dt", null, "Lines read"), h("dd", null, fmtInt(run.lines_read)),
          h("dt", null, "Skipped"), h("dd", null, fmtInt(run.lines_skipped)),
          h("dt", null, "Blank"), h("dd", null, fmtInt(run.lines_blank)),
          h("dt", null, "Duplicated"), h("dd", null, fmtInt(run.lines_duplicated)),
          h("dt", null, "Started"), h("dd", null, fmtDate(run.started_at)),
          h("dt", null, "Finished"), h("dd", null, fmtDate(run.finished_at)),
          h("dt", null, "Metadata"), h("dd", { class: "mono" }, Object.keys(run.metadata || {}).length ? JSON.stringify(run.metadata) : "none")),
        rows.length ? h("div", { class: "table-scroll" }, h("table", { class: "table table-compact" },
          h("thead", null, h("tr", null, ["File", "Kind", "Rank", "Lines", "Skipped"].map((x, i) =>
            h("th", { scope: "col", class: i >= 2 ? "num" : null }, x)))),
          h("tbody", null, rows))) : null,
        samples.length ? h("pre", { class: "code code-small" }, samples.slice(0, 20).join("\n")) : null));
  }

  // --- heatmap
  function heatmapCard(ctx, run, analysis, layersInfo) {
    const statsByTensor = new Map();
    for (const layer of layersInfo || []) {
      for (const st of layer.stats || []) {
        if (!statsByTensor.has(st.tensor)) statsByTensor.set(st.tensor, new Set());
        statsByTensor.get(st.tensor).add(st.stat);
      }
    }
    const tensors = statsByTensor.size ? TENSORS.filter((t) => statsByTensor.has(t)) : TENSORS;
    const sublayers = [...new Set((analysis ? analysis.layers : layersInfo || []).map((l) => l.sublayer).filter(Boolean))];
    const state = { tensor: tensors.includes("gradient") ? "gradient" : tensors[0], stat: "underflows%", rank: "", sublayer: "" };

    const img = h("img", {
      id: "heatmap-img", class: "heatmap-img", alt: "", decoding: "async",
    });
    const status = h("div", { class: "heatmap-status" });
    const frame = h("div", { class: "heatmap-frame", "aria-busy": "true" }, img, status);
    const openPng = h("a", { class: "btn btn-small btn-ghost", target: "_blank", rel: "noopener" }, "PNG");
    const openSvg = h("a", { class: "btn btn-small btn-ghost", target: "_blank", rel: "noopener" }, "SVG");

    const statSelectWrap = h("span");
    function statOptions() {
      const available = statsByTensor.get(state.tensor);
      const list = available ? [...available].sort((a, b) => (b.includes("underflows%") - a.includes("underflows%")) || a.localeCompare(b)) : ["underflows%", "overflows%", "scale_inv_min", "scale_inv_max", "mse"];
      if (!list.includes(state.stat)) state.stat = list[0];
      replace(statSelectWrap, selectField("Stat", "heatmap-stat", list.map((x) => [x, x]), state.stat, (v) => {
        state.stat = v;
        load();
      }));
    }

    function url(ext) {
      return `${API}/runs/${run.id}/heatmap.${ext}${qs({ tensor: state.tensor, stat: state.stat, rank: state.rank, sublayer: state.sublayer })}`;
    }

    let token = 0;
    function load() {
      token += 1;
      const mine = token;
      const src = url("png");
      frame.setAttribute("aria-busy", "true");
      frame.classList.add("is-loading");
      replace(status, loading("Rendering heatmap…"));
      img.alt = `Heatmap of ${state.tensor} ${state.stat} per layer and iteration${state.rank !== "" ? `, rank ${state.rank}` : ""}`;
      openPng.href = src;
      openSvg.href = url("svg");
      img.onload = () => {
        if (mine !== token) return;
        frame.classList.remove("is-loading", "is-error");
        frame.setAttribute("aria-busy", "false");
        status.replaceChildren();
      };
      img.onerror = async () => {
        if (mine !== token) return;
        frame.classList.remove("is-loading");
        frame.classList.add("is-error");
        frame.setAttribute("aria-busy", "false");
        let err;
        try {
          await apiFetch(src, { signal: ctx.signal, as: "response" });
          err = new ApiError(0, "ImageError", "the heatmap could not be decoded");
        } catch (e) {
          if (e.name === "AbortError") return;
          err = e;
        }
        replace(status, errorBox(err, { title: "Heatmap unavailable", retry: load }));
      };
      img.src = src;
    }

    const controls = h("div", { class: "controls" },
      selectField("Tensor", "heatmap-tensor", tensors.map((t) => [t, t]), state.tensor, (v) => {
        state.tensor = v;
        statOptions();
        load();
      }),
      statSelectWrap,
      sublayers.length > 1 ? selectField("Sublayer", "heatmap-sublayer", [["", "All"], ...sublayers.map((x) => [x, x])], "", (v) => {
        state.sublayer = v;
        load();
      }) : null,
      run.ranks > 1 ? selectField("Rank", "heatmap-rank", [["", "All (worst)"], ...Array.from({ length: run.ranks }, (_, i) => [String(i), `rank ${i}`])], "", (v) => {
        state.rank = v;
        load();
      }) : null,
      h("span", { class: "control-links" }, openPng, openSvg));
    statOptions();
    load();
    return card("Heatmap", {
      id: "heatmap",
      subtitle: "Layers (rows, model order) × iterations (columns); colour is the statistic's value.",
    }, controls, frame);
  }

  // --- findings
  const EVIDENCE_COLUMNS = [
    ["layer", "Layer"], ["metric", "Metric"], ["rank", "Rank"], ["window", "Window"], ["level", "Level"],
    ["max", "Max"], ["mean", "Mean"], ["last", "Last"], ["slope_per_1k", "Slope / 1k it"],
    ["start_level", "Start"], ["end_level", "End"], ["projected_value", "Projected"], ["projected_iteration", "Projected at"],
    ["ratio", "Ratio"], ["reference", "Reference"], ["onset", "Onset"], ["crossing_iteration", "Crosses at"], ["count", "Count"],
  ];

  function evidenceValue(key, v) {
    if (v === null || v === undefined) return "—";
    if (Array.isArray(v)) return v.map((x) => fmtNum(x)).join("–");
    if (["onset", "projected_iteration", "crossing_iteration", "rank", "count"].includes(key)) return fmtNum(v);
    if (typeof v === "number") return fmtNum(v, 4);
    return String(v);
  }

  function findingsCard(analysis, onLayer) {
    const findings = analysis.findings || [];
    const list = h("ol", { class: "findings", id: "findings-list" }, findings.map((f, i) => {
      const ev = f.evidence || [];
      const cols = EVIDENCE_COLUMNS.filter(([k]) => ev.some((e) => e[k] !== null && e[k] !== undefined));
      const limit = 6;
      const evRows = (all) => (all ? ev : ev.slice(0, limit)).map((e) => h("tr", null, cols.map(([k]) =>
        h("td", { class: [k === "layer" ? "mono" : "num", k === "layer" || k === "metric" ? "left" : null] },
          k === "layer" && e.layer ? h("button", { type: "button", class: "link-button mono", onclick: () => onLayer(e.layer) }, e.layer) : evidenceValue(k, e[k])))));
      const tbody = h("tbody", null, evRows(false));
      const more = ev.length > limit ? h("button", {
        type: "button", class: "btn btn-small btn-ghost", onclick: (e) => {
          replace(tbody, evRows(true));
          e.target.remove();
        },
      }, `Show all ${ev.length} evidence rows`) : null;
      const layerChips = (f.layers || []).slice(0, 12).map((l) => h("button", { type: "button", class: "chip chip-button mono", onclick: () => onLayer(l), title: `Plot ${l}` }, l));
      return h("li", { class: ["finding", `finding-${f.severity}`], "data-pattern": f.pattern },
        h("div", { class: "finding-head" }, sevBadge(f.severity), h("span", { class: "finding-pattern" }, f.pattern.replace(/_/g, " ")),
          f.layers && f.layers.length ? h("span", { class: "muted small" }, plural(f.layers.length, "layer")) : null),
        h("p", { class: "finding-summary" }, f.summary),
        layerChips.length ? h("div", { class: "chips" }, layerChips, f.layers.length > 12 ? h("span", { class: "muted small" }, `+${f.layers.length - 12} more`) : null) : null,
        ev.length ? h("div", { class: "table-scroll" }, h("table", { class: "table table-compact evidence", "aria-label": `Evidence for finding ${i + 1}` },
          h("thead", null, h("tr", null, cols.map(([k, label]) => h("th", { scope: "col", class: k === "layer" || k === "metric" ? null : "num" }, label)))),
          tbody)) : null,
        more);
    }));
    const notes = (analysis.notes || []).length
      ? h("div", { class: "notes" }, h("h3", null, "Notes"), h("ul", null, analysis.notes.map((n) => h("li", null, n))))
      : null;
    const t = analysis.thresholds || {};
    return card(`Findings (${findings.length})`, {
      id: "findings",
      subtitle: `Underflow bands: warning ≥ ${t.warning}%, critical ≥ ${t.critical}%, severe ≥ ${t.severe}% (level = p95 of the trailing window).`,
    }, list, notes);
  }

  // --- recommendation
  async function recommendationCard(ctx, run) {
    const rec = await api(`/runs/${run.id}/recommendation`, { signal: ctx.signal });
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
          const response = await apiFetch(`${API}/runs/${run.id}/recommendation?format=${encodeURIComponent(item.id)}`, { signal: ctx.signal, as: "response" });
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
        figure("Recipe", rec.recipe ? rec.recipe.name : "—", rec.recipe && rec.recipe.class ? rec.recipe.class.split(".").pop() : null),
        figure("GEMM time vs all-FP8", isNum(cost.gemm_slowdown_vs_all_fp8_pct) ? fmtSigned(cost.gemm_slowdown_vs_all_fp8_pct, 1, "%") : "—",
          isNum(cost.gemm_speedup_vs_all_bf16) ? `${cost.gemm_speedup_vs_all_bf16.toFixed(2)}× faster than BF16` : null),
        figure("Confidence", conf === null ? "—" : `${Math.round(conf * 100)}%`,
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
      subtitle: `Policy ${rec.policy_version || ""} — the same decision rendered for each tool.`,
    }, h("div", { class: "rec-layout" }, summary, h("div", { class: "rec-code" }, t.list, t.panel)));
    t.select(0);
    return el;
  }

  // --- layers table + series chart
  function layersCard(ctx, run, analysis, layersInfo) {
    const th = analysis.thresholds || {};
    const bands = (v) => {
      if (!isNum(v)) return null;
      if (v >= th.severe) return "severe";
      if (v >= th.critical) return "critical";
      if (v >= th.warning) return "warning";
      return null;
    };
    const pctCell = (key) => (row) => {
      const v = row[key];
      const band = bands(v);
      const tensor = key.split("_")[0];
      const detail = key.endsWith("_max") && row[`${tensor}_underflow_mean`] !== undefined
        ? `${tensor} underflows%: max ${fmtNum(v)}, mean ${fmtNum(row[`${tensor}_underflow_mean`])}, last ${fmtNum(row[`${tensor}_underflow_last`])}`
        : null;
      return h("span", { class: ["pct", band ? `tint-${band}` : null], title: detail }, isNum(v) ? v.toFixed(3) : fmtNum(v));
    };
    const columns = [
      { key: "order", label: "#", num: true, get: (r) => r.order, render: (r) => h("span", { class: "muted" }, r.order + 1), title: "Model order" },
      {
        key: "name", label: "Layer", cls: "col-layer",
        render: (r) => layerName(r.name),
      },
      { key: "group", label: "Group" },
      { key: "index", label: "Block", num: true, render: (r) => fmtNum(r.index) },
      { key: "sublayer", label: "Sublayer", render: (r) => r.sublayer || "—" },
      new Set((analysis.layers || []).map((l) => l.status)).size > 1
        ? { key: "status", label: "Status", render: (r) => h("span", { class: r.status === "fp8" ? "muted" : "chip chip-small" }, (r.status || r.precision || "").replace(/_/g, " ")) }
        : null,
      { key: "severity", label: "Severity", get: (r) => sevRank(r.severity), render: (r) => sevBadge(r.severity), num: true },
      {
        key: "worst_signal", label: "Worst signal",
        render: (r) => {
          if (!r.worst_signal) return h("span", { class: "muted" }, "—");
          const [tensor, ...rest] = r.worst_signal.split(" ");
          const stat = rest.join(" ").replace("underflows%", "UF%").replace("overflows%", "OF%");
          return h("span", { class: "nowrap", title: r.worst_signal }, tensor, " ", h("span", { class: "muted small" }, stat));
        },
      },
      { key: "worst_level", label: "Level", num: true, render: pctCell("worst_level"), title: "Level of the worst signal (%)" },
      { key: "gradient_underflow_max", label: "Grad max", num: true, render: pctCell("gradient_underflow_max"), title: "Gradient underflows%, max" },
      { key: "activation_underflow_max", label: "Act max", num: true, render: pctCell("activation_underflow_max"), title: "Activation underflows%, max" },
      { key: "weight_underflow_max", label: "Wt max", num: true, render: pctCell("weight_underflow_max"), title: "Weight underflows%, max" },
      { key: "patterns", label: "Patterns", get: (r) => (r.patterns || []).join(","), render: (r) => (r.patterns || []).map((p) => h("span", { class: "chip chip-small" }, p)) },
    ].filter(Boolean);
    const rows = (analysis.layers || []).map((l, i) => ({ ...l, order: i }));
    const statsOf = new Map((layersInfo || []).map((l) => [l.name, l.stats || []]));
    let selected = null;

    const chartSlot = h("div", { class: "chart-panel", id: "layer-chart" },
      h("p", { class: "muted chart-hint" }, "Select a layer (click a row, or press Enter on it) to plot its gradient / activation / weight underflow series."));
    const stat = { value: "underflows%" };
    let tableApi;
    const filterInput = h("input", {
      type: "search", id: "layer-filter", placeholder: "e.g. lm_head, fc2, layers.3.", autocomplete: "off",
      oninput: () => applyFilter(),
    });
    const onlyFlagged = h("input", { type: "checkbox", id: "layer-flagged", onchange: () => applyFilter() });
    const shown = h("span", { class: "muted small", "aria-live": "polite" });
    function applyFilter() {
      const q = filterInput.value.trim().toLowerCase();
      const list = rows.filter((r) => (!q || r.name.toLowerCase().includes(q)) && (!onlyFlagged.checked || r.severity !== "ok"));
      shown.textContent = `${list.length} of ${rows.length} layers`;
      tableApi.setRows(list);
      markSelected();
    }
    function markSelected() {
      tableApi.table.querySelectorAll("tbody tr").forEach((tr) => {
        const on = tr.dataset.layer === selected;
        tr.classList.toggle("selected", on);
        tr.setAttribute("aria-selected", on ? "true" : "false");
      });
    }

    tableApi = sortableTable({
      id: "layers-table",
      caption: "Per-layer assessment; click a header to sort, a row to plot its series",
      columns,
      rows,
      rowAttrs: (r) => ({ "data-layer": r.name, "data-severity": r.severity }),
      onRow: (r) => select(r.name),
      empty: "No layer matches.",
    });
    applyFilter();

    let token = 0;
    async function select(name) {
      selected = name;
      markSelected();
      const mine = ++token;
      const statNames = [...new Set((statsOf.get(name) || []).map((x) => x.stat))].sort((a, b) => (b.includes("underflows%") - a.includes("underflows%")) || a.localeCompare(b));
      if (statNames.length && !statNames.includes(stat.value)) stat.value = statNames[0];
      const statPicker = statNames.length > 1 ? selectField("Stat", "chart-stat", statNames.map((x) => [x, x]), stat.value, (v) => {
        stat.value = v;
        select(name);
      }) : null;
      const header = h("div", { class: "chart-head" },
        h("h3", null, h("span", { class: "mono" }, name)),
        h("div", { class: "controls" }, statPicker,
          h("button", { type: "button", class: "btn btn-small btn-ghost", onclick: () => {
            selected = null;
            markSelected();
            replace(chartSlot, h("p", { class: "muted chart-hint" }, "Select a layer to plot its series."));
          } }, "Close")));
      if (statsOf.has(name) && !statNames.length) {
        const row = rows.find((r) => r.name === name);
        replace(chartSlot, header, h("div", { class: "alert alert-info" },
          `No statistics were logged for this layer${row && row.status ? ` (status: ${row.status.replace(/_/g, " ")})` : ""}, so there is no series to plot.`));
        return;
      }
      replace(chartSlot, header, loading(`Loading ${stat.value} series…`));
      if (!chartSlot.isConnected) return;
      if (chartSlot.getBoundingClientRect().top < 0) chartSlot.scrollIntoView({ block: "start", behavior: "smooth" });
      const results = await Promise.all(TENSORS.map((tensor) =>
        api(`/runs/${run.id}/series${qs({ layer: name, tensor, stat: stat.value })}`, { signal: ctx.signal })
          .then((body) => ({ tensor, body }), (err) => ({ tensor, err }))));
      if (mine !== token || !ctx.alive()) return;
      const got = results.filter((r) => r.body);
      if (!got.length) {
        replace(chartSlot, header, errorBox(results[0].err, { title: "No series for this layer" }));
        return;
      }
      const series = [];
      for (const { tensor, body } of got) {
        const ranks = body.series.length;
        for (const sr of body.series) {
          series.push({
            label: ranks > 1 ? `${tensor} r${sr.rank}` : tensor,
            color: TENSOR_COLORS[tensor],
            opacity: ranks > 1 ? 0.75 : null,
            points: sr.iterations.map((it, k) => [it, toNum(sr.values[k])]),
          });
        }
      }
      const isUnderflow = stat.value.endsWith("underflows%");
      const guides = isUnderflow ? [
        { value: th.warning, label: "warning", color: SEV_COLORS.warning },
        { value: th.critical, label: "critical", color: SEV_COLORS.critical },
        { value: th.severe, label: "severe", color: SEV_COLORS.severe },
      ].filter((g) => isNum(g.value)) : [];
      const missing = results.filter((r) => r.err).map((r) => r.tensor);
      const legend = h("div", { class: "legend" }, got.map(({ tensor, body }) => h("span", { class: "legend-item" },
        h("span", { class: "swatch", style: { background: TENSOR_COLORS[tensor] } }), tensor,
        body.series.length > 1 ? h("span", { class: "muted small" }, ` (${body.series.length} ranks)`) : null)),
      missing.length ? h("span", { class: "muted small" }, `no ${missing.join(" / ")} series`) : null);
      const draw = () => lineChart({
        series, guides, width: chartSlot.clientWidth - 2, height: 300, xLabel: "iteration", yLabel: stat.value,
        unit: stat.value.endsWith("%") ? "%" : "", title: `${name}: ${stat.value} by iteration`,
      });
      const holder = h("div", { class: "chart-holder" }, draw());
      replace(chartSlot, header, legend, holder);
      let lastWidth = chartSlot.clientWidth;
      const observer = new ResizeObserver(() => {
        if (Math.abs(chartSlot.clientWidth - lastWidth) > 8 && mine === token) {
          lastWidth = chartSlot.clientWidth;
          replace(holder, draw());
        }
      });
      observer.observe(chartSlot);
      ctx.onLeave(() => observer.disconnect());
    }

    const el = card("Layers", {
      id: "layers",
      subtitle: "Per-layer assessment from the analysis. Underflow cells are tinted by band; click a header to sort.",
    },
    h("div", { class: "controls layer-controls" },
      h("div", { class: "field field-inline" }, h("label", { for: "layer-filter" }, "Filter"), filterInput),
      h("div", { class: "field field-check" }, onlyFlagged, h("label", { for: "layer-flagged" }, "Only flagged layers")),
      shown),
    chartSlot,
    h("div", { class: "table-scroll table-tall" }, tableApi.table));

    return {
      el,
      select(name) {
        if (!rows.some((r) => r.name === name)) return;
        filterInput.value = "";
        onlyFlagged.checked = false;
        applyFilter();
        select(name);
        const tr = tableApi.table.querySelector(`tr[data-layer="${CSS.escape(name)}"]`);
        if (tr) tr.scrollIntoView({ block: "nearest" });
        chartSlot.scrollIntoView({ block: "start", behavior: "smooth" });
      },
    };
  }

  // ------------------------------------------------------------------------------------------ compare
  async function compareView(ctx, query) {
    setTitle("Compare");
    const view = $("#view");
    const base = query.get("base") || "";
    const headId = query.get("head") || "";
    replace(view, h("div", { class: "page-head" }, h("h1", null, "Compare runs")), loading("Loading runs…"));
    const list = await api(`/runs?status=ready&limit=200`, { signal: ctx.signal });
    const runs = list.items;
    const byId = new Map(runs.map((r) => [String(r.id), r]));
    const option = (r) => [String(r.id), `#${r.id} · ${runLabel(r)} · ${r.project}`];
    const opts = [["", "Choose a run…"], ...runs.map(option)];
    const baseSel = selectField("Base run", "compare-base", opts, base, () => {});
    const headSel = selectField("Head run", "compare-head", opts, headId, () => {});
    const form = h("form", {
      class: "filters compare-form", "aria-label": "Choose runs to compare",
      onsubmit: (e) => {
        e.preventDefault();
        const b = $("#compare-base").value;
        const hd = $("#compare-head").value;
        go("/compare", { base: b, head: hd });
      },
    }, baseSel,
    h("button", {
      type: "button", class: "btn btn-ghost swap", "aria-label": "Swap base and head", title: "Swap base and head",
      onclick: () => {
        const a = $("#compare-base");
        const b = $("#compare-head");
        [a.value, b.value] = [b.value, a.value];
      },
    }, "⇄"),
    headSel,
    h("button", { type: "submit", class: "btn btn-primary", id: "compare-go" }, "Compare"));

    const content = h("div", { id: "compare-result" });
    replace(view, h("div", { class: "page-head" }, h("div", null, h("h1", null, "Compare runs"),
      h("p", { class: "page-sub" }, "Base is the reference; deltas are head − base."))), form, content);

    if (!base || !headId) {
      replace(content, h("div", { class: "empty-state" },
        h("h2", null, "Pick two runs"),
        h("p", { class: "muted" }, runs.length >= 2
          ? "Choose a base run and a head run, then press Compare. You can also tick two runs in the runs list."
          : "Comparison needs at least two ready runs.")));
      return;
    }
    if (base === headId) {
      replace(content, errorBox(new ApiError(400, "SameRun", "base and head are the same run; choose two different runs")));
      return;
    }
    setTitle(`Compare #${base} → #${headId}`);
    replace(content, loading("Comparing…"));
    const [cmp, baseRun, headRun] = await Promise.all([
      api(`/compare${qs({ base, head: headId })}`, { signal: ctx.signal }).catch((err) => {
        if (err.name === "AbortError") throw err;
        return { __error: err };
      }),
      byId.get(base) || api(`/runs/${base}`, { signal: ctx.signal }).catch(() => null),
      byId.get(headId) || api(`/runs/${headId}`, { signal: ctx.signal }).catch(() => null),
    ]);

    const side = (label, run, id) => {
      const sev = h("span", { class: "muted small" }, "…");
      if (run && run.status === "ready") {
        analysisOf(run.id).then((a) => replace(sev, sevBadge(overallSeverity(a)),
          h("span", { class: "muted small" }, ` ${(a.findings || []).filter((f) => f.pattern !== "healthy").map((f) => f.pattern).join(", ") || "healthy"}`)))
          .catch(() => replace(sev, "—"));
      }
      return h("div", { class: "side card", "data-side": label.toLowerCase() },
        h("div", { class: "side-label" }, label),
        run ? h("div", null,
          h("a", { class: "side-name", href: `#/runs/${run.id}` }, runLabel(run)), " ", h("span", { class: "muted" }, `#${run.id}`),
          h("div", { class: "muted small" }, `${run.project} · ${fmtInt(run.layer_count)} layers · ${fmtInt(run.ranks)} rank(s) · iterations ${fmtInt(run.iteration_min)}–${fmtInt(run.iteration_max)}`),
          h("div", { class: "side-sev" }, sev))
          : h("div", { class: "muted" }, `run ${id} not found`));
    };

    if (cmp.__error) {
      replace(content,
        h("div", { class: "sides" }, side("Base", baseRun, base), h("div", { class: "sides-arrow", "aria-hidden": "true" }, "→"), side("Head", headRun, headId)),
        errorBox(cmp.__error, { title: "Comparison failed" }));
      return;
    }
    replace(content,
      h("div", { class: "sides" }, side("Base", baseRun, base), h("div", { class: "sides-arrow", "aria-hidden": "true" }, "→"), side("Head", headRun, headId)),
      compareSummary(cmp),
      compareImageCard(ctx, base, headId),
      h("div", { class: "grid-2" }, compareFindings(cmp), compareGroups(cmp)),
      compareLayers(cmp));
  }

  function compareImageCard(ctx, base, headId) {
    const img = h("img", { id: "compare-img", class: "compare-img", alt: "" });
    const status = h("div", { class: "heatmap-status" });
    const frame = h("div", { class: "heatmap-frame" }, img, status);
    const open = h("a", { class: "btn btn-small btn-ghost", target: "_blank", rel: "noopener" }, "PNG");
    const openSvg = h("a", { class: "btn btn-small btn-ghost", target: "_blank", rel: "noopener" }, "SVG");
    let tensor = "gradient";
    let token = 0;
    function load() {
      const mine = ++token;
      const src = `${API}/compare.png${qs({ base, head: headId, tensor })}`;
      open.href = src;
      openSvg.href = `${API}/compare.svg${qs({ base, head: headId, tensor })}`;
      img.alt = `${tensor} underflows% heatmaps of run ${base} (base) and run ${headId} (head) side by side, one colour scale`;
      frame.classList.add("is-loading");
      frame.classList.remove("is-error");
      frame.setAttribute("aria-busy", "true");
      replace(status, loading("Rendering comparison…"));
      img.onload = () => {
        if (mine !== token) return;
        frame.classList.remove("is-loading");
        frame.setAttribute("aria-busy", "false");
        status.replaceChildren();
      };
      img.onerror = async () => {
        if (mine !== token) return;
        frame.classList.remove("is-loading");
        frame.classList.add("is-error");
        frame.setAttribute("aria-busy", "false");
        let err = new ApiError(0, "ImageError", "the comparison image could not be decoded");
        try {
          await apiFetch(src, { signal: ctx.signal, as: "response" });
        } catch (e) {
          if (e.name === "AbortError") return;
          err = e;
        }
        replace(status, errorBox(err, { title: "Comparison image unavailable", retry: load }));
      };
      img.src = src;
    }
    load();
    return card("Side by side", {
      id: "compare-image",
      subtitle: "Both heatmaps on one colour scale: base on the left, head on the right.",
    },
    h("div", { class: "controls" },
      selectField("Tensor", "compare-tensor", TENSORS.map((t) => [t, t]), tensor, (v) => {
        tensor = v;
        load();
      }),
      h("span", { class: "control-links" }, open, openSvg)),
    frame);
  }

  function compareSummary(cmp) {
    const sentences = Array.isArray(cmp.summary) ? cmp.summary : cmp.summary ? [String(cmp.summary)] : [];
    const notes = (cmp.notes || []).filter((n) => !sentences.includes(n));
    const unmatched = cmp.unmatched || {};
    const onlyBase = (unmatched.only_in_base || []).length;
    const onlyHead = (unmatched.only_in_head || []).length;
    return card("Summary", { id: "compare-summary" },
      sentences.length
        ? h("ul", { class: "sentences", id: "compare-sentences" }, sentences.map((x) => h("li", null, x)))
        : h("p", { class: "muted", id: "compare-sentences" }, "No difference worth a sentence."),
      notes.length ? h("ul", { class: "sentences muted small" }, notes.map((n) => h("li", null, n))) : null,
      onlyBase || onlyHead ? h("p", { class: "muted small" },
        `Layers match by exact name: ${plural(onlyBase, "layer")} only in base, ${plural(onlyHead, "layer")} only in head.`) : null);
  }

  function findingItem(f) {
    return h("li", { "data-pattern": f.pattern },
      h("div", { class: "finding-head" }, sevBadge(f.severity), h("strong", { class: "finding-pattern" }, String(f.pattern).replace(/_/g, " ")),
        (f.layers || []).length ? h("span", { class: "muted small" }, plural(f.layers.length, "layer")) : null),
      f.summary ? h("div", { class: "small muted" }, f.summary) : null);
  }

  function compareFindings(cmp) {
    const block = (title, list, cls) => h("div", { class: ["delta-findings", cls] },
      h("h3", null, title, h("span", { class: "count" }, String(list.length))),
      list.length ? h("ul", null, list.map(findingItem)) : h("p", { class: "muted small" }, "none"));
    const changes = cmp.precision_changes || [];
    return card("Findings and precision", { id: "compare-findings" },
      block("Appeared in head", cmp.findings_appeared || [], "appeared"),
      block("Gone in head", cmp.findings_disappeared || [], "disappeared"),
      h("div", { class: "delta-findings" },
        h("h3", null, "Precision changes", h("span", { class: "count" }, String(changes.length))),
        changes.length ? h("ul", null, changes.map((c) => h("li", null, h("span", { class: "mono" }, c.layer), " ",
          h("span", { class: "muted" }, `${c.base ?? "—"} → ${c.head ?? "—"}`))))
          : h("p", { class: "muted small" }, "none")));
  }

  function deltaCell(d, { pp = true } = {}) {
    if (!d || !isNum(d.change)) return h("span", { class: "muted" }, "—");
    const cls = d.change >= 0.005 ? "delta-up" : d.change <= -0.005 ? "delta-down" : "delta-zero";
    const rel = isNum(d.relative) ? ` (${fmtSigned(d.relative * 100, 0, "%")})` : "";
    return h("span", { class: ["delta", cls], title: `${fmtNum(d.base)}% → ${fmtNum(d.head)}%${rel}` }, fmtSigned(d.change, 2, pp ? " pp" : ""));
  }

  function pair(a, b, fmt = (v) => fmtPct(v)) {
    return h("span", { class: "pair" }, h("span", null, fmt(a)), h("span", { class: "arrow", "aria-label": "to" }, " → "), h("span", null, fmt(b)));
  }

  function compareGroups(cmp) {
    const groups = cmp.groups || [];
    const rows = groups.map((g) => h("tr", { "data-group": g.group },
      h("th", { scope: "row" }, g.group, h("div", { class: "muted small" }, plural(g.layers, "layer"))),
      TENSORS.map((t) => {
        const st = (g.stats || {})[t] || {};
        return h("td", { class: "num" }, pair(st.base, st.head), h("div", null, deltaCell(st)));
      }),
      h("td", { class: "num" }, pair((g.bf16 || {}).base, (g.bf16 || {}).head, (v) => fmtInt(v)),
        (g.moved_to_bf16 || []).length ? h("div", { class: "small muted" }, `+${g.moved_to_bf16.length} to BF16`) : null,
        (g.moved_to_fp8 || []).length ? h("div", { class: "small muted" }, `+${g.moved_to_fp8.length} to FP8`) : null)));
    return card("Per group", {
      id: "compare-groups-card",
      subtitle: "Mean underflow level (%) of the group's layers, base → head; change in percentage points.",
    }, groups.length ? h("div", { class: "table-scroll" }, h("table", { class: "table table-compact", id: "compare-groups" },
      h("thead", null, h("tr", null, h("th", { scope: "col" }, "Group"), TENSORS.map((t) => h("th", { scope: "col", class: "num" }, t)),
        h("th", { scope: "col", class: "num" }, "BF16 layers"))),
      h("tbody", null, rows))) : h("p", { class: "muted" }, "No groups."));
  }

  function compareLayers(cmp) {
    const state = { stat: "level", onlyChanged: false, query: "" };
    const stat = (row, tensor) => ((row.stats || {})[tensor] || {})[state.stat] || {};
    const rows = (cmp.layers || []).map((l, i) => ({ ...l, order: i }));
    const sevCell = (r) => {
      const sv = r.severity || {};
      return h("span", { class: "pair" }, sv.base ? sevBadge(sv.base) : h("span", { class: "muted" }, "—"),
        h("span", { class: "arrow", "aria-label": "to" }, " → "), sv.head ? sevBadge(sv.head) : h("span", { class: "muted" }, "—"));
    };
    const columns = [
      { key: "order", label: "#", num: true, render: (r) => h("span", { class: "muted" }, r.order + 1) },
      { key: "name", label: "Layer", cls: "col-layer", render: (r) => layerName(r.name) },
      { key: "group", label: "Group" },
      { key: "index", label: "Block", num: true, render: (r) => fmtNum(r.index) },
      { key: "sublayer", label: "Sublayer", render: (r) => r.sublayer || "—" },
      rows.some((r) => r.in !== "both") ? {
        key: "in", label: "In", render: (r) => (r.in === "both" ? h("span", { class: "muted" }, "both")
          : h("span", { class: "chip chip-small" }, `only ${r.in}`)),
      } : null,
      {
        key: "severity", label: "Severity", num: true,
        get: (r) => sevRank((r.severity || {}).head || "ok") - sevRank((r.severity || {}).base || "ok"),
        render: sevCell, title: "Base → head; sorts by the change",
      },
      ...TENSORS.flatMap((t) => [
        {
          key: `${t}-pair`, label: `${t[0].toUpperCase()}${t.slice(1)}`, num: true, sortable: true,
          get: (r) => stat(r, t).head, render: (r) => pair(stat(r, t).base, stat(r, t).head, (v) => (isNum(v) ? v.toFixed(2) : "—")),
          title: `${t} underflows% (${state.stat}), base → head`,
        },
        { key: `${t}-delta`, label: "Δ pp", num: true, get: (r) => stat(r, t).change, render: (r) => deltaCell(stat(r, t), { pp: false }), title: `${t} change, percentage points` },
      ]),
      {
        key: "status_changed", label: "Precision", get: (r) => (r.status_changed ? 1 : 0),
        render: (r) => (r.status_changed ? h("span", { class: "chip chip-small" }, `${(r.status || {}).base} → ${(r.status || {}).head}`) : h("span", { class: "muted" }, (r.status || {}).head || (r.status || {}).base || "—")),
      },
    ].filter(Boolean);
    const tableApi = sortableTable({
      id: "compare-layers", caption: "Per-layer changes, head − base", columns, rows: [],
      initial: { key: "gradient-delta", dir: -1 }, empty: "No layer matches.",
      rowAttrs: (r) => ({ "data-layer": r.name }),
    });
    const shown = h("span", { class: "muted small" });
    const changed = (r) => r.status_changed || (r.severity || {}).base !== (r.severity || {}).head || r.in !== "both";
    function apply() {
      const q = state.query.toLowerCase();
      const list = rows.filter((r) => (!state.onlyChanged || changed(r)) && (!q || r.name.toLowerCase().includes(q)));
      shown.textContent = `${list.length} of ${rows.length} layers`;
      tableApi.setRows(list);
    }
    apply();
    return card("Per layer", {
      id: "compare-layers-card",
      subtitle: "Underflows% per tensor, base → head, and the change in percentage points (red: more underflow, green: less). Click a header to sort.",
    },
    h("div", { class: "controls" },
      selectField("Statistic", "compare-stat", [["level", "level (p95, trailing window)"], ["max", "max"], ["mean", "mean"], ["last", "last"]], state.stat, (v) => {
        state.stat = v;
        apply();
      }),
      h("div", { class: "field field-inline" }, h("label", { for: "compare-filter" }, "Filter"),
        h("input", { type: "search", id: "compare-filter", placeholder: "layer name", oninput: (e) => { state.query = e.target.value.trim(); apply(); } })),
      h("div", { class: "field field-check" },
        h("input", { type: "checkbox", id: "compare-changed", onchange: (e) => { state.onlyChanged = e.target.checked; apply(); } }),
        h("label", { for: "compare-changed" }, "Only layers whose severity, precision or presence changed")),
      shown),
    h("div", { class: "table-scroll table-tall" }, tableApi.table));
  }

  // ------------------------------------------------------------------------------------------ upload
  function uploadView(ctx) {
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
          h("div", { class: "field field-wide" }, h("label", { for: "upload-metadata" }, "Metadata ", h("span", { class: "muted small" }, "(optional JSON object: model dims, GPU, recipe, TE version)")), metadata)),
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
      data.append("name", name.value.trim() || file.name.replace(/\.(tar\.gz|tgz|tar|zip|log\.gz|log|gz)$/i, ""));
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
        if (xhr.status === 200) {
          replace(result, h("div", { class: "alert alert-info" },
            `These bytes were already uploaded to project “${body.project}” as run #${body.id}.`));
        }
        choose(null);
        fileInput.value = "";
        follow(body, statusLine, steps, result);
      });
      xhr.open("POST", `${API}/runs`);
      xhr.setRequestHeader("Accept", "application/json");
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

  // ------------------------------------------------------------------------------------------ boot
  window.addEventListener("hashchange", route);
  if (!location.hash) history.replaceState(null, "", "#/runs");
  route();
})();

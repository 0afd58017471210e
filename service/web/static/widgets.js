// Small reusable widgets: badges, chips, cards, figures, loading/toast, copy, select fields, sortable tables, tabs,
// and the loader of server-rendered images (heatmap, compare).

import { SEVERITIES } from "./constants.js";
import { h, append, replace, $ } from "./dom.js";
import { toNum, fmtNum } from "./format.js";
import { ApiError, apiFetch, errorBox } from "./api.js";
import { hasToken } from "./auth.js";

export function sevBadge(sev, extra) {
  const known = SEVERITIES.includes(sev);
  return h("span", { class: ["badge", known ? `sev-${sev}` : "badge-neutral"], title: extra || null }, sev || "—");
}

export function statusBadge(status) {
  const busy = status === "queued" || status === "processing";
  return h("span", { class: ["badge", `status-${status}`], "data-status": status },
    busy ? h("span", { class: "spinner", "aria-hidden": "true" }) : null, status);
}

/* A layer name shown whole: where it must wrap, it wraps after a dot (never cut, never an ellipsis); the block
   index and sublayer (the tail) stay in the normal colour, the module path before them muted. */
export function layerName(name) {
  const m = /^(.*?\.)(\d+\..*)$/.exec(name) || /^(.*\.)([^.]+)$/.exec(name);
  const [prefix, tail] = m ? [m[1], m[2]] : ["", name];
  const breakable = (text) => text.split(/(?<=\.)/).flatMap((part, i) => (i ? [h("wbr"), part] : [part]));
  return h("span", { class: "mono layer-name", title: name },
    prefix ? h("span", { class: "ln-prefix" }, ...breakable(prefix)) : null, h("span", { class: "ln-tail" }, ...breakable(tail)));
}

export function chip(text, href, title) {
  return href ? h("a", { class: "chip", href, title }, text) : h("span", { class: "chip", title }, text);
}

export function figure(label, value, hint) {
  return h("div", { class: "figure" },
    h("div", { class: "figure-value" }, value),
    h("div", { class: "figure-label" }, label),
    hint ? h("div", { class: "figure-hint" }, hint) : null);
}

export function card(title, { id, actions, subtitle, cls } = {}, ...body) {
  const headingId = id ? `${id}-title` : null;
  return h("section", { class: ["card", cls], id, "aria-labelledby": headingId },
    h("div", { class: "card-head" },
      h("div", null, h("h2", { id: headingId }, title), subtitle ? h("p", { class: "card-sub" }, subtitle) : null),
      actions ? h("div", { class: "card-actions" }, actions) : null),
    h("div", { class: "card-body" }, body));
}

export function loading(text = "Loading…") {
  return h("p", { class: "muted loading" }, h("span", { class: "spinner", "aria-hidden": "true" }), text);
}

export function toast(message) {
  const el = $("#toast");
  el.textContent = message;
  el.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => {
    el.hidden = true;
  }, 2200);
}

export async function copyText(text) {
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

export function selectField(label, id, options, value, onchange) {
  const select = h("select", { id, onchange: (e) => onchange(e.target.value) },
    options.map(([v, text]) => h("option", { value: v, selected: String(v) === String(value) }, text)));
  return h("div", { class: "field field-inline" }, h("label", { for: id }, label), select);
}

/* A table whose headers sort it. columns: [{key, label, get(row), render(row), num, title, cls}] */
export function sortableTable({ columns, rows, caption, id, initial, rowAttrs, onRow, empty }) {
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

export function tabs({ items, onSelect, label }) {
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

// A server-rendered image in its frame: busy state while it renders, the newest request wins, and when the image
// fails the API's own {"error","detail"} is fetched and shown with a retry button.
export function imageLoader(ctx, { img, frame, status, busyText, errorTitle, undecodable }) {
  let token = 0;
  return function show(src, retry) {
    const mine = ++token;
    frame.classList.add("is-loading");
    frame.classList.remove("is-error");
    frame.setAttribute("aria-busy", "true");
    replace(status, loading(busyText));
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
      let err = new ApiError(0, "ImageError", undecodable);
      try {
        await apiFetch(src, { signal: ctx.signal, as: "response" });
      } catch (e) {
        if (e.name === "AbortError") return;
        err = e;
      }
      replace(status, errorBox(err, { title: errorTitle, retry }));
    };
    if (!hasToken()) {
      img.src = src;
      return;
    }
    // An <img> cannot send the Authorization header: fetch the image, show it as a blob (errors as above).
    apiFetch(src, { signal: ctx.signal, as: "response" })
      .then((response) => response.blob())
      .then((blob) => {
        if (mine !== token) return;
        if (img.src.startsWith("blob:")) URL.revokeObjectURL(img.src);
        img.src = URL.createObjectURL(blob);
      })
      .catch((err) => {
        if (err.name === "AbortError" || mine !== token) return;
        frame.classList.remove("is-loading");
        frame.classList.add("is-error");
        frame.setAttribute("aria-busy", "false");
        replace(status, errorBox(err, { title: errorTitle, retry }));
      });
  };
}

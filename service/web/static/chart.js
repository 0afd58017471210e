// The inline-SVG time-series line chart (axes, ticks, threshold guides, hover read-out).

import { h, s, replace } from "./dom.js";
import { fmtNum, fmtInt } from "./format.js";

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

/* Exponential moving average with TensorBoard's debiasing (weight 0: the raw values); NaN/inf points are kept
 * as gaps and do not enter the average. */
export function smooth(points, weight) {
  if (!(weight > 0)) return points;
  let last = 0;
  let n = 0;
  return points.map(([x, y]) => {
    if (!Number.isFinite(y)) return [x, y];
    last = last * weight + (1 - weight) * y;
    n += 1;
    return [x, last / (1 - weight ** n)];
  });
}

function logTicks(lo, hi) {
  const out = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e += 1) {
    for (const f of hi / lo < 1e3 ? [1, 2, 5] : [1]) {
      const v = f * 10 ** e;
      if (v >= lo * 0.999 && v <= hi * 1.001) out.push(Number(v.toPrecision(6)));
    }
  }
  return out;
}

/* series: [{label, color, points: [[x, y], ...], dash}]; guides: [{value, label, color}].
 * log: logarithmic y axis (values <= 0 sit on the axis floor, said in the title); smoothing: EMA weight 0..0.99
 * (the raw series stay drawn faintly underneath). xDomain: [lo, hi] the x axis covers at least (charts that share
 * an axis); marks: x values ticked under the plot (e.g. where other data was logged); onHover(x | null): the
 * nearest x under the pointer. The returned element's cursorAt(x | null) shows the cursor there from outside.
 * width: the CSS px it is shown at (drawn at that size, never rescaled; at least minWidth); the right margin holds
 * the guides' labels, so a chart without guides gives it to the plot. The frame, grid, marks and cursor are 1
 * device-pixel-aligned hairlines at the devicePixelRatio it is drawn for (crisp; redraw when that changes). */
export function lineChart({ series, guides = [], width, height = 300, xLabel, yLabel, unit = "", title, log = false, smoothing = 0,
  xDomain = null, marks = [], onHover = null, minWidth = 420 }) {
  const m = { top: 16, right: guides.length ? 96 : 24, bottom: 44, left: 64 };
  const W = Math.max(minWidth, Math.floor(width));
  const dpr = window.devicePixelRatio || 1;
  const hair = Math.max(1, Math.round(dpr)); // device px
  // the centre of a hairline whose edges fall on device pixels (a 1 px line at x.5 at dpr 1, at x or x.5 at dpr 2)
  const snap = (v) => (Math.round(v * dpr - hair / 2) + hair / 2) / dpr;
  const H = height;
  const pw = W - m.left - m.right;
  const ph = H - m.top - m.bottom;
  const all = series.flatMap((sr) => sr.points.filter((p) => Number.isFinite(p[1])));
  const xs = all.map((p) => p[0]);
  const ys = all.map((p) => p[1]);
  let x0 = Math.min(...xs, ...(xDomain ? [xDomain[0]] : []));
  let x1 = Math.max(...xs, ...(xDomain ? [xDomain[1]] : []));
  if (!(x1 > x0)) x1 = x0 + 1;
  let y0;
  let y1 = Math.max(...ys);
  const guideMax = guides.map((g) => g.value).filter((v) => v <= y1 * 1.25 || y1 === 0);
  let yt;
  let Y;
  if (log) {
    const positive = ys.filter((v) => v > 0);
    const floor = positive.length ? Math.min(...positive) : 1e-3;
    y0 = 10 ** Math.floor(Math.log10(floor));
    y1 = Math.max(y1, ...guideMax, y0 * 10);
    y1 = 10 ** Math.ceil(Math.log10(y1));
    yt = { values: logTicks(y0, y1), step: 0 };
    const l0 = Math.log10(y0);
    const l1 = Math.log10(y1);
    Y = (y) => m.top + ph - ((Math.log10(Math.max(y, y0)) - l0) / (l1 - l0)) * ph;
  } else {
    y0 = Math.min(0, ...ys);
    y1 = Math.max(y1, ...guideMax, y0 + 1e-9);
    yt = ticks(y0, y1 * 1.05, 5);
    const top = yt.values[yt.values.length - 1];
    if (top < y1) yt.values.push(Number((top + yt.step).toPrecision(12))); // the axis always covers the data
    y1 = yt.values[yt.values.length - 1];
    y0 = Math.min(y0, yt.values[0]);
    Y = (y) => m.top + ph - ((y - y0) / (y1 - y0)) * ph;
  }
  const xt = ticks(x0, x1, Math.max(3, Math.floor(pw / 90)));
  const X = (x) => m.left + ((x - x0) / (x1 - x0)) * pw;

  const root = s("svg", {
    class: "chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title || "chart",
  });
  root.style.setProperty("--hairline", `${hair / dpr}px`);
  root.append(s("title", null, title || ""));
  const grid = s("g", { class: "chart-grid" });
  for (const v of yt.values) {
    grid.append(s("line", { x1: m.left, x2: m.left + pw, y1: snap(Y(v)), y2: snap(Y(v)) }));
    grid.append(s("text", { x: m.left - 8, y: Y(v), class: "tick tick-y", "text-anchor": "end", "dominant-baseline": "middle" },
      (log ? fmtNum(v, 4) : tickLabel(v, yt.step)) + unit));
  }
  for (const v of xt.values) {
    if (v < x0 || v > x1) continue;
    grid.append(s("line", { class: "xgrid", x1: snap(X(v)), x2: snap(X(v)), y1: m.top, y2: m.top + ph }));
    grid.append(s("text", { x: X(v), y: m.top + ph + 18, class: "tick", "text-anchor": "middle" }, tickLabel(v, xt.step)));
  }
  root.append(grid);
  const [fx, fy] = [snap(m.left), snap(m.top)];
  root.append(s("rect", { class: "chart-frame", x: fx, y: fy, width: snap(m.left + pw) - fx, height: snap(m.top + ph) - fy }));
  if (xLabel) root.append(s("text", { class: "axis-label", x: m.left + pw / 2, y: H - 6, "text-anchor": "middle" }, xLabel));
  if (yLabel) {
    root.append(s("text", {
      class: "axis-label", transform: `translate(14 ${m.top + ph / 2}) rotate(-90)`, "text-anchor": "middle",
    }, yLabel));
  }
  for (const g of guides) {
    if (g.value < y0 || g.value > y1 || (log && g.value <= 0)) continue;
    root.append(s("line", { class: "guide", x1: m.left, x2: m.left + pw, y1: snap(Y(g.value)), y2: snap(Y(g.value)), style: { stroke: g.color } }));
    root.append(s("text", { class: "guide-label", x: m.left + pw + 6, y: Y(g.value), style: { fill: g.color }, "dominant-baseline": "middle" },
      `${g.label} ${g.value}${unit}`));
  }
  const pathOf = (points) => {
    let d = "";
    let pen = false;
    for (const [x, y] of points) {
      if (!Number.isFinite(y)) {
        pen = false;
        continue;
      }
      d += `${pen ? "L" : "M"}${X(x).toFixed(1)} ${Y(y).toFixed(1)}`;
      pen = true;
    }
    return d;
  };
  if (marks.length) {
    const ticked = s("g", { class: "chart-marks" });
    for (const v of marks) if (v >= x0 && v <= x1) ticked.append(s("line", { x1: snap(X(v)), x2: snap(X(v)), y1: m.top + ph - 6, y2: m.top + ph }));
    root.append(ticked);
  }
  const lines = s("g", { class: "chart-lines" });
  for (const sr of series) {
    if (smoothing > 0) lines.append(s("path", { d: pathOf(sr.points), class: "series-raw", stroke: sr.color }));
    lines.append(s("path", {
      d: pathOf(smooth(sr.points, smoothing)), class: "series", stroke: sr.color, "stroke-dasharray": sr.dash || null,
      "stroke-opacity": sr.opacity || null, "data-label": sr.label,
    }));
  }
  root.append(lines);
  root.dataset.scale = log ? "log" : "linear";

  // Hover read-out: nearest iteration, every series' value there.
  const cursor = s("line", { class: "cursor", x1: 0, x2: 0, y1: m.top, y2: m.top + ph, visibility: "hidden" });
  const dots = s("g", { class: "cursor-dots", visibility: "hidden" });
  root.append(cursor, dots);
  const overlay = s("rect", { x: m.left, y: m.top, width: pw, height: ph, fill: "transparent", class: "overlay" });
  root.append(overlay);
  const tip = h("div", { class: "chart-tip", hidden: true });
  const allX = [...new Set(xs)].sort((a, b) => a - b);
  const nearest = (xv) => {
    let best = allX[0];
    for (const v of allX) if (Math.abs(v - xv) < Math.abs(best - xv)) best = v;
    return best;
  };
  const hide = () => {
    cursor.setAttribute("visibility", "hidden");
    dots.setAttribute("visibility", "hidden");
    tip.hidden = true;
  };
  const show = (best, withTip = true) => {
    const rect = root.getBoundingClientRect();
    cursor.setAttribute("x1", snap(X(best)));
    cursor.setAttribute("x2", snap(X(best)));
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
    tip.hidden = !withTip;
    const left = (X(best) / W) * rect.width;
    tip.style.left = `${Math.min(left + 12, rect.width - 200)}px`;
    tip.style.top = `${m.top}px`;
  };
  overlay.addEventListener("mousemove", (e) => {
    const rect = root.getBoundingClientRect();
    const px = ((e.clientX - rect.left) / rect.width) * W;
    const best = nearest(x0 + ((px - m.left) / pw) * (x1 - x0));
    show(best);
    if (onHover) onHover(best);
  });
  overlay.addEventListener("mouseleave", () => {
    hide();
    if (onHover) onHover(null);
  });
  const wrap = h("div", { class: "chart-wrap" }, root, tip);
  wrap.cursorAt = (x) => (x === null || !allX.length ? hide() : show(nearest(x), false));
  return wrap;
}

/* Calls redraw() when the width of `el` has changed by more than `min` px and then held still for `ms` (a window
 * dragged wider redraws once, not on every frame), and when the devicePixelRatio changes (zoom, another screen:
 * the hairlines are aligned for it); stops when the view is left. */
export function redrawOnResize(ctx, el, redraw, { ms = 150, min = 8 } = {}) {
  let width = el.clientWidth;
  let timer = null;
  let media = null;
  const onRatio = () => {
    watchRatio();
    if (ctx.alive()) redraw();
  };
  const watchRatio = () => {
    media = matchMedia(`(resolution: ${window.devicePixelRatio}dppx)`);
    media.addEventListener("change", onRatio, { once: true });
  };
  watchRatio();
  const observer = new ResizeObserver(() => {
    if (Math.abs(el.clientWidth - width) <= min) return;
    clearTimeout(timer);
    timer = setTimeout(() => {
      timer = null;
      if (!ctx.alive()) return;
      width = el.clientWidth;
      redraw();
    }, ms);
  });
  observer.observe(el);
  ctx.onLeave(() => {
    observer.disconnect();
    media.removeEventListener("change", onRatio);
    clearTimeout(timer);
  });
}

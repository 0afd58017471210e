// Run page: the speed/risk frontier card. The recommendation's `frontier` (points from all-BF16 to all-cheapest,
// the rule recipes, the chosen point) drawn as SVG, the arms an experiment measured beside them (held-out gap to
// BF16 on the right axis; with replicates, ± its standard error as a bar), and the newest experiment's verdict with
// its next step. Data: GET|POST recommendation.

import { h, s, replace } from "./dom.js";
import { API, apiFetch } from "./api.js";
import { isNum, fmtNum } from "./format.js";
import { card } from "./widgets.js";

const W = 640, H = 310, M = { left: 64, right: 64, top: 30, bottom: 40 };
const RULE_MARK = { last_15pct: "▲", last_n_nvidia: "■", first_last: "◆", all_low: "✕" };

function scale(lo, hi, a, b) {
  const span = hi - lo || 1;
  return (v) => a + ((v - lo) / span) * (b - a);
}

function extent(values) {
  const finite = values.filter(isNum);
  if (!finite.length) return [0, 1];
  const lo = Math.min(...finite), hi = Math.max(...finite);
  return lo === hi ? [lo - 0.5, hi + 0.5] : [lo, hi];
}

function chart(frontier, measured) {
  const points = frontier.points || [];
  const rules = frontier.baselines || [];
  const chosen = frontier.chosen || {};
  const xs = [...points.map((p) => p.speedup), ...rules.map((b) => b.speedup), chosen.speedup, ...measured.map((m) => m.gemm_speedup)];
  const risks = [...points.map((p) => p.predicted_risk), ...rules.map((b) => b.predicted_risk), chosen.predicted_risk, 0];
  const gaps = measured.map((m) => m.heldout_gap).filter(isNum);
  const spans = measured.filter((m) => isNum(m.heldout_gap) && isNum(m.gap_se)).flatMap((m) => [m.heldout_gap - m.gap_se, m.heldout_gap + m.gap_se]);
  const [x0, x1] = extent(xs);
  const [r0, r1] = extent(risks);
  const [g0, g1] = extent([...gaps, ...spans, 0]);
  const x = scale(x0, x1, M.left, W - M.right);
  const y = scale(r0, r1, H - M.bottom, M.top);
  const yg = scale(g0, g1, H - M.bottom, M.top);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "frontier-chart", role: "img", id: "frontier-chart",
    "aria-label": "Speed/risk frontier: GEMM speedup against predicted risk, with the rule recipes and measured arms" });
  svg.append(s("line", { x1: M.left, y1: H - M.bottom, x2: W - M.right, y2: H - M.bottom, class: "axis" }));
  svg.append(s("line", { x1: M.left, y1: M.top, x2: M.left, y2: H - M.bottom, class: "axis" }));
  for (const t of [x0, (x0 + x1) / 2, x1]) {
    svg.append(s("text", { x: x(t), y: H - M.bottom + 16, "text-anchor": "middle", class: "tick" }, `${t.toFixed(2)}×`));
  }
  for (const t of [r0, (r0 + r1) / 2, r1]) {
    svg.append(s("text", { x: M.left - 6, y: y(t) + 4, "text-anchor": "end", class: "tick" }, fmtNum(t, 3)));
  }
  svg.append(s("text", { x: (M.left + W - M.right) / 2, y: H - 6, "text-anchor": "middle", class: "label" },
    "GEMM-time speedup over all-BF16 (cost model)"));
  svg.append(s("text", { x: 12, y: 12, class: "label" }, `predicted risk (${frontier.risk_unit})`));
  if (points.length) {
    const path = points.map((p, i) => `${i ? "L" : "M"}${x(p.speedup).toFixed(1)},${y(p.predicted_risk).toFixed(1)}`).join(" ");
    svg.append(s("path", { d: path, class: "frontier-line" }));
    for (const [i, p] of points.entries()) {
      const moved = p.layers_changed.map((c) => `${c.layer} ${c.from}→${c.to}`).join("; ");
      svg.append(s("circle", { cx: x(p.speedup), cy: y(p.predicted_risk), r: 2.5, class: "frontier-point" },
        s("title", null, `point ${i}: ${p.speedup.toFixed(3)}×, risk ${fmtNum(p.predicted_risk, 4)}${moved ? ` (${moved})` : ""}`)));
    }
  }
  const labels = new Map(); // rules on the same spot share one label
  for (const b of rules) {
    const ry = y(isNum(b.predicted_risk) ? b.predicted_risk : 0);
    svg.append(s("text", { x: x(b.speedup), y: ry + 4, "text-anchor": "middle", class: "rule-mark", "data-rule": b.name },
      RULE_MARK[b.name] || "●", s("title", null, `${b.name}: ${b.rule}; ${b.speedup.toFixed(3)}×, risk ${isNum(b.predicted_risk) ? fmtNum(b.predicted_risk, 4) : "not measured"}`)));
    const spot = `${x(b.speedup).toFixed(0)},${ry.toFixed(0)}`;
    labels.set(spot, [...(labels.get(spot) || []), b.name]);
  }
  for (const [spot, names] of labels) {
    const [lx, ly] = spot.split(",").map(Number);
    svg.append(s("text", { x: lx - 6, y: ly - 8, "text-anchor": "end", class: "tick" }, names.join(" = ")));
  }
  if (isNum(chosen.predicted_risk)) {
    svg.append(s("text", { x: x(chosen.speedup), y: y(chosen.predicted_risk) + 6, "text-anchor": "middle", class: "chosen-mark", id: "frontier-chosen" },
      "★", s("title", null, `${chosen.source === "target" ? `target ${chosen.spec}` : "recommended"}: ${chosen.speedup.toFixed(3)}×, risk ${fmtNum(chosen.predicted_risk, 4)}`)));
  }
  if (gaps.length) {
    svg.append(s("line", { x1: W - M.right, y1: M.top, x2: W - M.right, y2: H - M.bottom, class: "axis" }));
    for (const t of [g0, g1]) svg.append(s("text", { x: W - M.right + 6, y: yg(t) + 4, class: "tick" }, fmtNum(t, 3)));
    svg.append(s("text", { x: W - 12, y: 12, "text-anchor": "end", class: "label" }, "○ measured held-out gap (nats)"));
    for (const m of measured) {
      if (!isNum(m.heldout_gap) || !isNum(m.gemm_speedup)) continue;
      const se = isNum(m.gap_se) ? ` ± ${m.gap_se.toFixed(4)} (SE over replicates)` : "";
      if (isNum(m.gap_se) && m.gap_se > 0) {
        svg.append(s("line", { x1: x(m.gemm_speedup), x2: x(m.gemm_speedup), y1: yg(m.heldout_gap - m.gap_se), y2: yg(m.heldout_gap + m.gap_se),
          class: "measured-se", "data-arm": m.name }));
      }
      svg.append(s("circle", { cx: x(m.gemm_speedup), cy: yg(m.heldout_gap), r: 5, class: "measured-point", "data-arm": m.name },
        s("title", null, `measured ${m.name} (${m.kind}): gap ${m.heldout_gap.toFixed(4)}${se} nats at ${m.gemm_speedup.toFixed(3)}×`)));
    }
  }
  return svg;
}

function verdict(v) {
  if (!v) return h("p", { class: "muted small" }, "No experiment yet: `fp8-policy verify RUN --spec FILE` trains the arms and posts them.");
  const status = h("strong", { class: `verdict verdict-${v.status}`, id: "frontier-verdict" }, v.status);
  return h("div", null,
    h("p", null, "Verification: ", status, ` — ${v.detail}`),
    v.next_step ? h("p", { class: "small" }, `Next step: ${v.next_step.text}`) : null);
}

/* settings: null (GET) or the POST body of the page's recompute settings; recPromise: the page's one recommendation
 * JSON (recommendation.js recommendationJson), so this card and the others read the same answer. */
export async function frontierCard(ctx, run, settings, recPromise = null) {
  const url = `${API}/runs/${run.id}/recommendation`;
  const rec = await (recPromise ||
    apiFetch(url, settings ? { signal: ctx.signal, method: "POST", body: settings } : { signal: ctx.signal }));
  const frontier = rec.frontier;
  if (!frontier) return card("Speed and risk", { id: "frontier" }, h("p", { class: "muted" }, "This service's answer has no frontier."));
  const measured = (rec.verification && rec.verification.measured) || [];
  const body = [];
  if (!frontier.available) body.push(h("p", { class: "muted small" }, `No frontier: ${frontier.reason}. The rules are placed on the speed axis only.`));
  body.push(chart(frontier, measured));
  const chosen = frontier.chosen || {};
  body.push(h("p", { class: "small" },
    `Recommended: ${isNum(chosen.speedup) ? chosen.speedup.toFixed(3) : "—"}× GEMM speedup, predicted risk ${isNum(chosen.predicted_risk) ? fmtNum(chosen.predicted_risk, 4) : "—"} ${frontier.risk_unit}. `,
    h("a", { href: `${url.replace("/recommendation", "/frontier.png")}`, download: `run_${run.id}_frontier.png` }, "PNG")));
  body.push(h("p", { class: "muted small" }, frontier.predicted_risk_definition));
  body.push(verdict(rec.verification));
  const el = card("Speed and risk", { id: "frontier", subtitle: "per-layer mixes from all-BF16 to all-cheapest; ▲■◆✕ the rule recipes, ★ the recommendation, ○ measured arms" });
  replace(el.querySelector(".card-body"), ...body);
  return el;
}

// Formatting of numbers, percentages, sizes, dates and durations for display; run labels.

export function isNum(v) {
  return typeof v === "number" && Number.isFinite(v);
}

export function toNum(v) {
  if (isNum(v)) return v;
  if (v === "NaN") return NaN;
  if (v === "Infinity") return Infinity;
  if (v === "-Infinity") return -Infinity;
  return null;
}

export function fmtNum(v, digits = 4) {
  if (v === null || v === undefined || v === "") return "—";
  if (typeof v === "string") return v === "Infinity" ? "∞" : v === "-Infinity" ? "−∞" : v;
  if (!Number.isFinite(v)) return Number.isNaN(v) ? "NaN" : v > 0 ? "∞" : "−∞";
  if (Number.isInteger(v) && Math.abs(v) < 1e15) return v.toLocaleString("en-US");
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
  return v.toLocaleString("en-US", { maximumFractionDigits: digits });
}

export function fmtPct(v, digits = 2) {
  if (v === null || v === undefined) return "—";
  if (!isNum(v)) return fmtNum(v);
  return `${v.toFixed(digits)}%`;
}

export function fmtSigned(v, digits = 2, unit = "") {
  if (!isNum(v)) return fmtNum(v);
  const sign = v > 0 ? "+" : v < 0 ? "−" : "±";
  return `${sign}${Math.abs(v).toFixed(digits)}${unit}`;
}

export function fmtInt(v) {
  return isNum(v) ? Math.round(v).toLocaleString("en-US") : "—";
}

export function fmtBytes(n) {
  if (!isNum(n)) return "—";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n.toFixed(i === 0 ? 0 : n < 10 ? 1 : 0)} ${units[i]}`;
}

export function fmtDate(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const pad = (x) => String(x).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/* A time of day on the 24-hour clock fmtDate uses (toLocaleTimeString() gave "3:04:05 PM" beside "2026-12-02 15:04"). */
export function fmtTime(date = new Date()) {
  const pad = (x) => String(x).padStart(2, "0");
  return `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

export function fmtAgo(iso) {
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

export function fmtDuration(startIso, endIso) {
  if (!startIso || !endIso) return "—";
  const ms = new Date(endIso) - new Date(startIso);
  if (!Number.isFinite(ms) || ms < 0) return "—";
  return ms < 1000 ? `${ms} ms` : ms < 120000 ? `${(ms / 1000).toFixed(1)} s` : `${(ms / 60000).toFixed(1)} min`;
}

export function plural(n, word, many = `${word}s`) {
  return `${fmtInt(n)} ${n === 1 ? word : many}`;
}

export function runLabel(run) {
  return run.name || run.upload_filename || `run ${run.id}`;
}

export function fmtRatio(v, digits = 2) {
  return isNum(v) ? `${v.toFixed(digits)}×` : "—";
}

/* A fraction 0..1 as a whole percentage ("87%"). */
export function fmtShare(v) {
  return isNum(v) ? `${Math.round(v * 100)}%` : "—";
}

/* The human name of a pattern: the API's label when given, else its string with spaces. */
export function patternLabel(pattern, label) {
  if (label) return label;
  if (!pattern) return "";
  const text = String(pattern).replace(/_/g, " ");
  return text.charAt(0).toUpperCase() + text.slice(1);
}

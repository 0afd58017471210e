// Severity and tensor colours from colors.json, their one definition (the heatmap images read the same file):
// sets the CSS custom properties (--sev-<band>, -bg, -line, -border) for the light or dark theme and keeps them
// in step with prefers-color-scheme; JS drawing (chart, heatmap canvas) reads the current values from here.

import COLORS from "./colors.json" with { type: "json" };

export const SEVERITY_NAMES = Object.keys(COLORS.severity);
const darkQuery = window.matchMedia("(prefers-color-scheme: dark)");

export function isDark() {
  return darkQuery.matches;
}

/* {line, text, bg, border} of a severity band in the current theme. */
export function sevColors(band) {
  const entry = COLORS.severity[band];
  if (!entry) return null;
  return isDark() ? { ...entry, ...entry.dark } : entry;
}

export function tensorColor(tensor) {
  return (isDark() ? COLORS.tensor_dark : COLORS.tensor)[tensor] || "#8c959f";
}

function applyTheme() {
  const root = document.documentElement.style;
  for (const band of SEVERITY_NAMES) {
    const c = sevColors(band);
    root.setProperty(`--sev-${band}`, c.text);
    root.setProperty(`--sev-${band}-line`, c.line);
    root.setProperty(`--sev-${band}-bg`, c.bg);
    root.setProperty(`--sev-${band}-border`, c.border);
  }
}

const listeners = new Set();
/* Call fn when the colour scheme changes (views redraw canvases and charts); returns the unsubscribe. */
export function onThemeChange(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

applyTheme();
darkQuery.addEventListener("change", () => {
  applyTheme();
  listeners.forEach((fn) => fn());
});

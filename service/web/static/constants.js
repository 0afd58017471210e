// Shared constants: severity levels and colours, tensor names and colours, terminal run statuses.

export const SEVERITIES = ["ok", "warning", "critical", "severe"];
export const TENSORS = ["gradient", "activation", "weight"];
export const SEV_COLORS = { ok: "#1a7f37", warning: "#d4a72c", critical: "#e16f24", severe: "#cf222e" }; // = app.css
export const TENSOR_COLORS = { gradient: "#2563eb", activation: "#9333ea", weight: "#0d9488" };
export const TERMINAL = new Set(["ready", "failed"]);

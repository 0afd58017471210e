// Shared constants: severity levels, tensor names, terminal run statuses. Colours live in colors.js/colors.json.

export const SEVERITIES = ["ok", "warning", "critical", "severe"];
export const TENSORS = ["gradient", "activation", "weight"];
export const TERMINAL = new Set(["ready", "failed"]);

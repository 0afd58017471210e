// Run page: the heatmap card (tensor/stat/sublayer/rank controls over the server-rendered PNG/SVG).

import { TENSORS } from "./constants.js";
import { h, replace } from "./dom.js";
import { API, qs } from "./api.js";
import { card, selectField, imageLoader } from "./widgets.js";

export function heatmapCard(ctx, run, analysis, layersInfo) {
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

  const show = imageLoader(ctx, { img, frame, status, busyText: "Rendering heatmap…",
    errorTitle: "Heatmap unavailable", undecodable: "the heatmap could not be decoded" });
  function load() {
    const src = url("png");
    img.alt = `Heatmap of ${state.tensor} ${state.stat} per layer and iteration${state.rank !== "" ? `, rank ${state.rank}` : ""}`;
    openPng.href = src;
    openSvg.href = url("svg");
    show(src, load);
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

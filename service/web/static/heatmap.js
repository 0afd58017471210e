// Run page: the heatmap card (tensor/stat/sublayer/rank controls over the server-rendered PNG/SVG).

import { TENSORS } from "./constants.js";
import { h, replace } from "./dom.js";
import { API, ApiError, apiFetch, qs, errorBox } from "./api.js";
import { card, loading, selectField } from "./widgets.js";

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

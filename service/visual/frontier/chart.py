"""The speed/risk frontier as a PNG or SVG: the frontier's points, the chosen one, the rule recipes, and the arms an
experiment measured (held-out gap to BF16 on a second axis, ± its standard error with replicates). Drawn in a render worker (service/visual/pool.py);
its input is the recommendation's `frontier` JSON and the measured arms (plain data).
"""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from fp8_policy.service.visual import render as heatmap_render  # noqa: E402  # its lock and rc: one drawing at once
from fp8_policy.service.visual.style import rc  # noqa: E402

WIDTH_IN, HEIGHT_IN, DPI = 8.0, 5.0, 110
MARKERS = {"last_15pct": "^", "last_n_nvidia": "s", "first_last": "D", "all_low": "X"}


def draw(data: dict[str, Any], fmt: str = "png") -> bytes:
    frontier, measured = data["frontier"], data.get("measured") or []
    with heatmap_render._LOCK, matplotlib.rc_context(rc()):
        fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
        fig.patch.set_facecolor("white")
        ax = fig.add_axes((0.09, 0.12, 0.78 if measured else 0.86, 0.78))
        points = frontier.get("points") or []
        if points:
            ax.plot(
                [p["speedup"] for p in points],
                [p["predicted_risk"] for p in points],
                "-o",
                ms=2.5,
                lw=1.2,
                color="#3b6ea5",
                label=f"frontier ({len(points)} points)",
            )
        for base in frontier.get("baselines") or []:
            risk = base["predicted_risk"] if base["predicted_risk"] is not None else 0.0
            ax.plot(
                [base["speedup"]],
                [risk],
                MARKERS.get(base["name"], "o"),
                ms=8,
                color="#d9822b",
                mfc="white" if base["predicted_risk"] is None else "#d9822b",
                label=base["name"],
            )
            ax.annotate(base["name"], (base["speedup"], risk), textcoords="offset points", xytext=(5, 5), fontsize=7)
        chosen = frontier.get("chosen") or {}
        if chosen.get("predicted_risk") is not None:
            label = "target " + str(chosen.get("spec")) if chosen.get("source") == "target" else "recommended"
            ax.plot([chosen["speedup"]], [chosen["predicted_risk"]], "*", ms=15, color="#2a9d55", label=label)
        ax.set_xlabel("GEMM-time speedup over all-BF16 (cost model)")
        ax.set_ylabel(f"predicted risk ({frontier.get('risk_unit', 'nats per step')})")
        ax.set_title(data.get("title", "speed/risk frontier"), fontsize=10)
        if not frontier.get("available"):
            ax.text(
                0.5,
                0.5,
                "no loss-sensitivity statistics: risk not measured (rules at 0)",
                ha="center",
                transform=ax.transAxes,
                fontsize=9,
                color="#777777",
            )
        if measured:
            twin = ax.twinx()
            for arm in measured:
                gap = arm.get("heldout_gap")
                if gap is None or arm.get("gemm_speedup") is None:
                    continue
                twin.plot([arm["gemm_speedup"]], [gap], "o", ms=7, mfc="none", mec="#222222")
                if arm.get("gap_se"):  # replicates: ± the standard error of the mean gap
                    twin.errorbar(
                        [arm["gemm_speedup"]], [gap], yerr=[arm["gap_se"]], fmt="none", ecolor="#222222", lw=1
                    )
                twin.annotate(
                    arm["name"],
                    (arm["gemm_speedup"], gap),
                    textcoords="offset points",
                    xytext=(5, -10),
                    fontsize=7,
                    color="#222222",
                )
            twin.set_ylabel("measured held-out gap to BF16 (nats), hollow")
        ax.legend(loc="upper left", fontsize=7, frameon=False)
        ax.grid(alpha=0.3)
        buffer = io.BytesIO()
        fig.savefig(
            buffer,
            format=fmt,
            dpi=DPI,
            facecolor="white",
            metadata={"Software": None} if fmt == "png" else {"Date": None},
        )
    return buffer.getvalue()

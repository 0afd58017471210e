"""A merged `MetadataLog` as JSON, so the plan job reads the metadata logs once and the rank and finalize jobs
(any worker, any machine) get them from the job row instead of reading the archive again."""

from __future__ import annotations

from typing import Any

from fp8_policy.policy.parse.metadata_log import MetadataLog
from fp8_policy.policy.records import LayerPlan


def metadata_to_json(log: MetadataLog) -> dict[str, Any]:
    return {
        "assigned": log.assigned,
        "layer_order": log.layer_order,
        "lines_read": log.lines_read,
        "lines_unrecognised": log.lines_unrecognised,
        "plans": [
            {
                "layer": plan.layer,
                "disabled": plan.disabled,
                "features": sorted(plan.features),
                "gemm_plans": [[tensor, gemm, text] for (tensor, gemm), text in plan.gemm_plans.items()],
            }
            for plan in log.plans.values()
        ],
    }


def metadata_from_json(data: dict[str, Any]) -> MetadataLog:
    plans = {
        item["layer"]: LayerPlan(
            item["layer"], {(t, g): text for t, g, text in item["gemm_plans"]}, item["disabled"], set(item["features"])
        )
        for item in data["plans"]
    }
    return MetadataLog(
        list(data["assigned"]), plans, list(data["layer_order"]), data["lines_read"], data["lines_unrecognised"]
    )

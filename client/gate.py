"""The CI gate: decide pass/fail from a run's analysis and render the markdown (or JSON) summary.

Belongs here: severity ordering, the pass/fail rule (fail exactly when a finding's severity is at or above the bar:
the analysis names every layer row above `ok` in a finding of at least its severity, so the findings alone are
the verdict, and the count printed is the count that decided),
the worst-layers pick and the markdown layout of `fp8-policy gate`. Input is the service's JSON as returned by
`PolicyClient` (run, analysis, recommendation dicts); no HTTP, no printing, no exit codes (see `cli.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SEVERITIES = ("ok", "warning", "critical", "severe")
FAIL_ON = ("warning", "critical", "severe")
WORST_LAYERS = 5
MAX_LAYER_NAMES = 6


def severity_rank(severity: str | None) -> int:
    """ok 0 < warning 1 < critical 2 < severe 3; unknown severities count as ok."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else 0


@dataclass(frozen=True)
class GateResult:
    """The verdict and everything the summary shows."""

    run: dict[str, Any]
    fail_on: str
    passed: bool
    findings: list[dict[str, Any]]
    failing: list[dict[str, Any]]
    worst_layers: list[dict[str, Any]]
    recommendation: dict[str, Any] = field(default_factory=dict)
    failing_layers: list[str] = field(default_factory=list)  # table rows at or above the bar

    def to_dict(self) -> dict[str, Any]:
        rec = self.recommendation
        return {
            "run_id": self.run.get("id"),
            "run_name": self.run.get("name"),
            "passed": self.passed,
            "fail_on": self.fail_on,
            "failing_findings": self.failing,
            "failing_layers": self.failing_layers,
            "findings": self.findings,
            "worst_layers": self.worst_layers,
            "recommendation": {
                key: rec.get(key)
                for key in ("fp8_skip_layers", "gemm_overrides", "recipe", "expected_cost", "confidence")
            },
        }


def layer_verdict(row: dict[str, Any]) -> str:
    """A layer row's verdict: "n/a" (not assessed) or its severity (older services send no `verdict`)."""
    verdict = row.get("verdict")
    return str(verdict) if verdict is not None else str(row.get("severity") or "ok")


def worst_layers(layers: list[dict[str, Any]], limit: int = WORST_LAYERS) -> list[dict[str, Any]]:
    """The rows of the analysis table above `ok`, worst severity first, then highest level."""
    flagged = [row for row in layers if severity_rank(layer_verdict(row)) > 0]
    flagged.sort(key=lambda row: (-severity_rank(layer_verdict(row)), -_number(row.get("worst_level"))))
    return flagged[:limit]


def evaluate(
    run: dict[str, Any], analysis: dict[str, Any], recommendation: dict[str, Any], fail_on: str = "critical"
) -> GateResult:
    """Fail exactly when a finding's severity is at or above `fail_on` (warning | critical | severe).

    `failing_layers` lists the table rows at or above the bar; the analysis names each of them in a finding of
    at least its severity (warning-band layers in a `warning_band` finding), so they never decide on their own
    and the printed count of findings is the count that decided."""
    if fail_on not in FAIL_ON:
        raise ValueError(f"fail_on must be one of {', '.join(FAIL_ON)}, got {fail_on!r}")
    findings = list(analysis.get("findings", []))
    failing = [f for f in findings if severity_rank(f.get("severity")) >= severity_rank(fail_on)]
    rows = list(analysis.get("layers", []))
    layers = [str(r.get("name")) for r in rows if severity_rank(layer_verdict(r)) >= severity_rank(fail_on)]
    return GateResult(
        run=run,
        fail_on=fail_on,
        passed=not failing,
        findings=findings,
        failing=failing,
        worst_layers=worst_layers(rows),
        recommendation=recommendation,
        failing_layers=layers,
    )


def render_markdown(result: GateResult) -> str:
    """`## FP8 policy gate: PASS|FAIL`, the findings, the worst layers and the recommended change."""
    run = result.run
    verdict = "PASS" if result.passed else "FAIL"
    title = f"run {run.get('id')}" + (f" `{run['name']}`" if run.get("name") else "")
    lines = [
        f"## FP8 policy gate: {verdict}",
        "",
        f"{title} (project `{run.get('project', '?')}`): {len(result.failing)} finding(s) at or above "
        f"**{result.fail_on}**" + (f" ({len(result.failing_layers)} layer(s))." if result.failing_layers else "."),
        "",
    ]
    lines += _findings_table(result.findings)
    lines += _layers_table(result.worst_layers)
    lines += change_section(result.recommendation)
    lines += [
        f"Get it as a config: `fp8-policy recommend {run.get('id')} --format te-yaml|megatron|hydra|torchao -o FILE`",
        "",
    ]
    return "\n".join(lines).rstrip() + "\n"


def _findings_table(findings: list[dict[str, Any]]) -> list[str]:
    rows = ["### Findings", "", "| severity | pattern | layers | summary |", "|---|---|---|---|"]
    for finding in findings:
        rows.append(
            f"| {finding.get('severity')} | {finding.get('pattern')} | {_names(finding.get('layers', []))} "
            f"| {_cell(finding.get('summary', ''))} |"
        )
    return rows + [""]


def _layers_table(layers: list[dict[str, Any]]) -> list[str]:
    if not layers:
        return ["### Worst layers", "", "No layer above `ok`.", ""]
    rows = ["### Worst layers", "", "| layer | severity | worst signal | level % | patterns |", "|---|---|---|---|---|"]
    for row in layers:
        level = row.get("worst_level")
        rows.append(
            f"| `{row.get('name')}` | {layer_verdict(row)} | {row.get('worst_signal') or ''} "
            f"| {_fmt(level)} | {', '.join(row.get('patterns', []))} |"
        )
    return rows + [""]


def change_section(rec: dict[str, Any]) -> list[str]:
    """Markdown bullets of a recommendation: skip list, GEMM overrides, recipe, expected cost, confidence."""
    skips = rec.get("fp8_skip_layers") or []
    headline = (rec.get("headline") or {}).get("text")
    lines = [
        "### Recommended change",
        "",
        *([f"- **{_cell(headline)}**"] if headline else []),
        f"- Keep in BF16 (`fp8_skip_layers`, {len(skips)}): {_names(skips) if skips else 'none'}",
    ]
    for override in rec.get("gemm_overrides") or []:
        lines.append(
            f"- GEMM override `{override.get('layer')}`: {', '.join(override.get('gemms', []))} in BF16"
            f" ({_cell(override.get('reason', ''))})"
        )
    recipe = rec.get("recipe") or {}
    if recipe:
        lines.append(f"- Recipe: **{recipe.get('name')}** (`{recipe.get('class')}`): {_cell(recipe.get('reason', ''))}")
    ladder = ((rec.get("precision_ladder") or {}).get("counts")) or {}
    if any(ladder.values()):
        mix = ", ".join(f"{n} {p}" for p, n in ladder.items() if n)
        lines.append(f"- Precision per layer (`precision_ladder`): {mix}")
    kept = rec.get("kept_bf16") or []
    if kept:
        lines.append(f"- Already BF16, kept there (`kept_bf16`, {len(kept)}): {_names(kept)}")
    cost = rec.get("expected_cost") or {}
    if cost:
        share = cost.get("gemm_share") or {}
        mix = (
            " / ".join(f"{_fmt(_number(share.get(k)) * 100)}% {k.upper()}" for k in ("fp4", "fp8", "bf16"))
            if share
            else f"{_fmt(_number(cost.get('bf16_gemm_share')) * 100)}% BF16"
        )
        lines.append(
            f"- Expected cost: GEMM FLOPs {mix}: {_fmt(cost.get('gemm_speedup_vs_all_bf16'))}x faster than "
            f"all-BF16 GEMMs, GEMM time {_signed_pct(cost.get('gemm_slowdown_vs_all_fp8_pct'))} vs every layer at "
            f"{cost.get('fp8_recipe') or 'the recipe'}"
        )
    if rec.get("confidence") is not None:
        lines.append(f"- Confidence: {_confidence(rec['confidence'])}")
    return lines + [""]


def _names(names: list[str]) -> str:
    shown = ", ".join(f"`{name}`" for name in names[:MAX_LAYER_NAMES])
    more = len(names) - MAX_LAYER_NAMES
    return shown + (f" (+{more} more)" if more > 0 else "")


def _confidence(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items() if not isinstance(v, (dict, list)))
    return str(value)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _signed_pct(value: Any) -> str:
    """A change in percent with its sign: +1.41%, -0.3%, ±0% (never `+-0%`: a change that is -0.0 or rounds to
    zero); n/a when not given."""
    if value is None:
        return "n/a"
    number = _number(value)
    text = _fmt(abs(number))
    if float(text) == 0:
        return "±0%"
    return f"{'+' if number > 0 else '-'}{text}%"


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    try:
        return f"{float(value):.3g}"
    except (TypeError, ValueError):
        return str(value)

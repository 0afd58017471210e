"""Parsing of nvdlfw_inspect metadata-log lines (`nvdlfw_inspect_logs/…`) into per-layer plans; no file I/O here.

Input contract: an iterable of text lines of one metadata log (one rank, one file), with or without line endings;
CRLF and blank lines are tolerated, unknown lines are counted in `lines_unrecognised` and never raise.
Ground truth for precision is the TE plan lines (TE debug API plan lines in nvdlfw_inspect_logs). Note that the "Assigned layer name"
list is not the list of GEMM layers: LayerNormMLP is assigned as `…layernorm_mlp` but its plan and stats lines
use `…layernorm_mlp.fc1` / `…layernorm_mlp.fc2`, and container modules (`model`, `…self_attention`) have no plans.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fp8_policy.policy.records import LayerPlan

# Plan-line regexes (TE debug API messages in nvdlfw_inspect_logs), split into the logging header and the message so each message form is matched once.
# The optional "NVDLFW INSPECT - " prefix is the stderr stream handler's format (WARNING and above).
_HEADER = re.compile(r"^(?:NVDLFW INSPECT - )?(?P<ts>\S+ \S+) - (?P<level>[A-Z]+) - (?P<message>.*)$")
_ASSIGNED = re.compile(r"^Assigned layer name: (?P<layer>.+?)\s*$")
_LAYER = re.compile(r"^LAYER=(?P<layer>.+?): (?P<body>.*)$")
_PLAN = re.compile(
    r"^Tensor: (?P<tensor>\w+), gemm (?P<gemm>\w+) - "
    r"(?P<plan>FP8 Quantize|Quantize|High Precision|modify_tensor\(\))\s*$"
)
# TE: "Feature=F, API=A: <tensor>" or "...: <gemm>, <tensor>" (PerTensorScaling, FakeQuant);
# nvdlfw generic: "Feature=F, API=A, TENSOR=<tensor>: Called".
_FEATURE = re.compile(r"^Feature=(?P<feature>\w+), API=(?P<api>\w+)(?:, TENSOR=|: )(?:(?P<gemm>\w+), )?(?P<tensor>\w+)")
_DISABLED = re.compile(r"^(?:Quantization|FP8) Disabled\s*$")
# A rank's own record of its place in a parallel job, written through nvdlfw_inspect's `log_message` by
# `fp8_policy.record_parallel_layout()` (client/parallel_record.py) and by the CPU collector:
# `fp8_policy parallel {"rank": 5, "world_size": 16, "tensor_model_parallel_size": 2, ..., "tp_rank": 1, ...}`.
PARALLEL_RECORD = "fp8_policy parallel "
MAX_PARALLEL_RECORD_CHARS = 4_000

# Messages nvdlfw_inspect writes that carry nothing we use; they count as recognised.
_KNOWN_MESSAGES = (
    "Default logging to file enabled at ",
    "Reading config from ",
    "Loaded configs for ",
    "Debug API call '",
    "Registered feature ",
)
_KNOWN_LAYER_MESSAGES = ("`reduction_group` not found",)

_QUANTIZED_PLANS = frozenset({"Quantize", "FP8 Quantize"})


@dataclass(slots=True)
class MetadataLog:
    """What one (or, after `merge_metadata`, several) metadata logs say about the model's layers."""

    assigned: list[str] = field(default_factory=list)  # "Assigned layer name" values, first-seen order, unique
    plans: dict[str, LayerPlan] = field(default_factory=dict)  # layers with plan, feature or disable lines
    layer_order: list[str] = field(default_factory=list)  # layers in the order they first appear in LAYER= lines
    lines_read: int = 0  # every line consumed, blank ones included
    lines_unrecognised: int = 0  # non-blank lines matching no known message
    # the rank's own parallel record (PARALLEL_RECORD): its sizes and coordinates; None when it wrote none. Kept
    # per log: merging several ranks' logs keeps none (each rank's is read before the merge).
    parallel: dict[str, Any] | None = None
    # a digest of the messages that describe layers (assigned names, plan, feature and disable lines), in order:
    # two logs with the same key merge to the same plans, so merge_metadata takes such a log's layers once (a
    # job's data-parallel replicas write the same ones). None: not known (a merged or renamed log).
    content_key: bytes | None = field(default=None, compare=False)

    def known_layers(self) -> frozenset[str]:
        """Assigned names plus every layer with plan lines (covers `…layernorm_mlp.fc1`), for `split_metric_name`."""
        return frozenset(self.assigned) | frozenset(self.plans)


def parse_metadata_lines(lines: Iterable[str]) -> MetadataLog:
    """Parse the lines of one metadata log. A plain string is split into lines first."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    log = MetadataLog()
    seen_assigned: set[str] = set()
    key = hashlib.blake2b(digest_size=16)
    for raw in lines:
        log.lines_read += 1
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        if not _parse_line(line, log, seen_assigned, key):
            log.lines_unrecognised += 1
    log.content_key = key.digest()
    return log


def merge_metadata(logs: Iterable[MetadataLog]) -> MetadataLog:
    """Combine the logs of several ranks or sessions without changing them.

    A layer is disabled if any log says so; for one (tensor, gemm) a high-precision plan wins over a quantized one,
    so a GEMM counts as FP8 only if every rank quantized it. Orders keep first appearance; counters add up.
    """
    merged = MetadataLog()
    seen_assigned: set[str] = set()
    seen_keys: set[bytes] = set()
    for log in logs:
        merged.lines_read += log.lines_read
        merged.lines_unrecognised += log.lines_unrecognised
        if log.content_key is not None:
            if log.content_key in seen_keys:  # merging the same layers again changes nothing (idempotent)
                continue
            seen_keys.add(log.content_key)
        for layer in log.assigned:
            _add_assigned(merged, seen_assigned, layer)
        for layer in log.layer_order:
            _plan_for(merged, layer)
        for layer, plan in log.plans.items():
            target = _plan_for(merged, layer)
            target.disabled = target.disabled or plan.disabled
            target.features |= plan.features
            for key, text in plan.gemm_plans.items():
                _set_gemm_plan(target, key, text)
    return merged


def renamed(log: MetadataLog, rename: Callable[[str], str]) -> MetadataLog:
    """`log` with every layer name passed through `rename` (one rank's logged names -> the job's global names,
    policy/parallel/naming.py), before the logs of several ranks are merged: under local naming every pipeline
    stage logs `layers.0`, and merging first would mix different blocks' plans. Its own record is kept."""
    out = MetadataLog(lines_read=log.lines_read, lines_unrecognised=log.lines_unrecognised, parallel=log.parallel)
    seen: set[str] = set()
    for layer in log.assigned:
        _add_assigned(out, seen, rename(layer))
    for layer in log.layer_order:
        _plan_for(out, rename(layer))
    for layer, plan in log.plans.items():
        target = _plan_for(out, rename(layer))
        target.disabled = target.disabled or plan.disabled
        target.features |= plan.features
        for key, text in plan.gemm_plans.items():
            _set_gemm_plan(target, key, text)
    return out


# What a message does, cached across logs: the ranks of one job write the same messages (their own layers' plan
# lines) with other timestamps, and matching the message regexes was most of the parse (207k lines of 1,024
# ranks: 4.5 s -> 1.2 s). Values: ("assigned", layer) | ("plan", layer, (tensor, gemm), text) |
# ("feature", layer, feature) | ("disabled", layer) | ("known",) | None (unrecognised).
_Action = tuple[Any, ...] | None
_ACTIONS: dict[str, _Action] = {}
_MAX_ACTIONS = 1 << 16


def _parse_line(line: str, log: MetadataLog, seen_assigned: set[str], key: Any = None) -> bool:
    """Apply one non-blank line to `log`; False when the line is not a known message. `key` (a hash) takes the
    messages that describe layers (MetadataLog.content_key)."""
    header = _HEADER.match(line)
    if header is None:
        return False
    message = header["message"]
    if message.startswith(PARALLEL_RECORD):  # a rank's own record: its coordinates, never the same twice
        return _parse_parallel_record(message[len(PARALLEL_RECORD) :], log)
    try:
        action = _ACTIONS[message]
    except KeyError:
        if len(_ACTIONS) >= _MAX_ACTIONS:
            _ACTIONS.clear()
        action = _ACTIONS[message] = _action(message)
    if action is None:
        return False
    kind = action[0]
    if kind == "known":
        return True
    if key is not None:
        key.update(message.encode("utf-8", "surrogatepass") + b"\n")
    if kind == "assigned":
        _add_assigned(log, seen_assigned, action[1])
    elif kind == "plan":
        _set_gemm_plan(_plan_for(log, action[1]), action[2], action[3])
    elif kind == "feature":
        _plan_for(log, action[1]).features.add(action[2])
    else:
        _plan_for(log, action[1]).disabled = True
    return True


def _action(message: str) -> _Action:
    """What `message` (a line without its logging header) does to a metadata log."""
    assigned = _ASSIGNED.match(message)
    if assigned is not None:
        return ("assigned", assigned["layer"])
    layer_message = _LAYER.match(message)
    if layer_message is not None:
        layer, body = layer_message["layer"], layer_message["body"]
        if (plan := _PLAN.match(body)) is not None:
            return ("plan", layer, (plan["tensor"], plan["gemm"]), plan["plan"])
        if (feature := _FEATURE.match(body)) is not None:
            return ("feature", layer, feature["feature"])
        if _DISABLED.match(body):
            return ("disabled", layer)
        return ("known",) if body.startswith(_KNOWN_LAYER_MESSAGES) else None
    return ("known",) if message.startswith(_KNOWN_MESSAGES) else None


def _parse_parallel_record(text: str, log: MetadataLog) -> bool:
    """A JSON object of integers and short strings (a rank's sizes and coordinates); anything else is unrecognised."""
    if len(text) > MAX_PARALLEL_RECORD_CHARS:
        return False
    try:
        value = json.loads(text)
    except ValueError:
        return False
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, (int, bool)) or (isinstance(v, str) and len(v) <= 64))
        for k, v in value.items()
    ):
        return False
    log.parallel = value
    return True


def _add_assigned(log: MetadataLog, seen: set[str], layer: str) -> None:
    if layer not in seen:
        seen.add(layer)
        log.assigned.append(layer)


def _plan_for(log: MetadataLog, layer: str) -> LayerPlan:
    plan = log.plans.get(layer)
    if plan is None:
        plan = log.plans[layer] = LayerPlan(layer=layer)
        log.layer_order.append(layer)
    return plan


def _set_gemm_plan(plan: LayerPlan, key: tuple[str, str], text: str) -> None:
    """Record a plan line; a repeated (tensor, gemm) keeps the high-precision text if either says so."""
    previous = plan.gemm_plans.get(key)
    if previous is None or previous in _QUANTIZED_PLANS:
        plan.gemm_plans[key] = text

"""Issue 12 item 10: human names for patterns and recipes as data, one number style in rationales, and no citation
of documents users do not have (internal `*.md` notes) anywhere in policy/ (rationales included)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fp8_policy.policy.analysis import Pattern
from fp8_policy.policy.analysis.findings import PATTERN_LABELS
from fp8_policy.policy.analysis.recipes import RECIPE_LABELS, RECIPES
from fp8_policy.policy.records import RECIPE_CLASSES
from tests.policy.recommend.test_recipe import rec, u_shape_spec

POLICY = Path(__file__).resolve().parents[3] / "policy"


def test_every_pattern_and_recipe_has_a_human_label():
    assert set(PATTERN_LABELS) == set(Pattern)
    assert Pattern.U_SHAPE.label == "U-shape" and Pattern.HEALTHY.label == "Healthy"
    assert set(RECIPE_LABELS) == set(RECIPES) == set(RECIPE_CLASSES)
    assert RECIPE_LABELS["current"] == "Current scaling (Float8CurrentScaling)"
    for name, label in RECIPE_LABELS.items():  # the TE class is named in its label
        assert RECIPE_CLASSES[name].rsplit(".", 1)[1] in label


def test_the_recommendation_json_carries_the_labels():
    data = json.loads(json.dumps(rec(u_shape_spec(), current_recipe="delayed").to_dict()))
    assert data["recipe"]["label"] == RECIPE_LABELS[data["recipe"]["name"]]
    assert {(f["pattern"], f["label"]) for f in data["findings"]} == {("u_shape", "U-shape")}


def test_no_policy_source_cites_an_internal_document():
    offenders = [
        f"{path.relative_to(POLICY)}:{n}"
        for path in POLICY.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\b[\w-]+\.md\b|§", line)
    ]
    assert not offenders, offenders


def test_rationale_cites_the_public_source_and_formats_numbers_one_way():
    lines = rec(u_shape_spec(), current_recipe="delayed", gpu="h100").rationale
    text = "\n".join(lines)
    assert ".md" not in text and "§" not in text
    assert "https://nvidia.github.io/TransformerEngine/features/low_precision_training/speedups.html" in text
    # delayed kept (no evidence for a switch): the label and the kwargs as keyword=value, never a dict repr
    assert "Recipe: Delayed scaling (DelayedScaling) with fp8_format=HYBRID, amax_history_len=1024" in text
    assert "{" not in text  # no Python reprs of kwargs dicts
    levels = re.findall(r"(?:activation|gradient|weight) (\d+\.\d+)%", text)
    assert levels and all(len(level.split(".")[1]) == 2 for level in levels)
    assert "gpu 'h100' = compute capability 9.0" in text

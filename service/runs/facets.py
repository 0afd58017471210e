"""The runs list's metadata filters (`GET /api/v1/runs?gpu=H100&recipe=mxfp8&te_version=2.8&git_commit=3f2a`):
each value checked (400 `InvalidParameter` otherwise) and put in the spelling runs store their facets in
(policy/run_facets.py `facet_key`), for db/runs.py `RunRepository.list` to compare. HTTP concerns only."""

from __future__ import annotations

import re

from fp8_policy.policy.run_facets import MAX_FACET_CHARS, facet_key
from fp8_policy.service import limits
from fp8_policy.service.errors import InvalidParameter

# a TE version as `transformer_engine.__version__` writes it ("2.8.0", "2.8.0+cu128", "2.9.0.dev0+abc1234"),
# or its start ("2", "2.8")
_VERSION = re.compile(r"v?\d+(?:\.\d+)*(?:[.+\-][0-9A-Za-z.+\-]*)?")
# a commit as metadata records it: a SHA, abbreviated or not, or `git describe --dirty` text; one word
_COMMIT = re.compile(r"\S+")

FACET_HELP = {
    "gpu": 'Only runs whose metadata names this GPU ("H100", "NVIDIA H100 80GB HBM3", "hopper", "sm_90" ...; '
    "the same product in any spelling).",
    "recipe": 'Only runs whose metadata names this recipe ("mxfp8", "MXFP8BlockScaling", "delayed", ...).',
    "te_version": 'Only runs on this TE version or one under it ("2.8" finds 2.8.0 and 2.8.0+cu128, not 2.80).',
    "git_commit": "Only runs whose metadata's git commit starts with this (an abbreviated SHA; one word).",
}


def facet_filters(
    *, gpu: str | None, recipe: str | None, te_version: str | None, git_commit: str | None
) -> dict[str, str]:
    """facet -> key for each filter given; 400 for a blank, over-long or malformed one."""
    given = {"gpu": gpu, "recipe": recipe, "te_version": te_version, "git_commit": git_commit}
    filters: dict[str, str] = {}
    for facet, value in given.items():
        if value is None:
            continue
        limits.check_text(facet, value, MAX_FACET_CHARS, error=InvalidParameter)
        text = value.strip()
        if facet == "te_version" and text and not _VERSION.fullmatch(text):
            raise InvalidParameter(f"te_version {value!r} is not a version such as 2.8 or 2.8.0+cu128")
        if facet == "git_commit" and text and not _COMMIT.fullmatch(text):
            raise InvalidParameter(f"git_commit {value!r} is not a commit id: one word, such as an abbreviated SHA")
        key = facet_key(facet, text)
        if key is None:
            raise InvalidParameter(f"{facet} is blank; leave it out to list runs of any {facet.replace('_', ' ')}")
        filters[facet] = key
    return filters

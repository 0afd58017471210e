"""Ranks that logged the same thing: stored once, and the replicas that disagree with their group.

Belongs here: `SeriesDigest` keys, `group_replicas` (ranks whose every series equals a lower rank's are replicas of
it: their series need not be stored again), and `replica_mismatches` (within a data-parallel group, the ranks whose
statistics differ from what the rest of the group agrees on). Pure: the ingest computes the digests as it parses.
Must not be here: parsing, storing, the layout's arithmetic (ranks.py).

Why replicas must agree: TE's debug features reduce activation and gradient statistics over the reduction group
before logging (transformer_engine/debug/features/utils/stats_buffer.py; Megatron and Megatron-Bridge set it to the
tensor-and-data-parallel group with `set_tensor_reduction_group(get_tensor_and_data_parallel_group())`), so every
rank of a data-parallel group logs the same value; weights are the same replicated parameters. A replica that
differs while the others agree points at a fault (a desynchronised replica, silent data corruption), not at
precision. When no two replicas agree, the statistics were not reduced (per-rank batches): nothing is a fault.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

SeriesKey = tuple[str, str, str]  # (global layer, tensor, stat as logged)


def series_digest(iterations: bytes, values: bytes) -> bytes:
    """A 16-byte digest of one series' points (the bytes of its iteration and value arrays)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(len(iterations).to_bytes(8, "little"))
    h.update(iterations)
    h.update(values)
    return h.digest()


def rank_digest(digests: Mapping[SeriesKey, bytes], keep: Callable[[SeriesKey], bool] | None = None) -> bytes:
    """One digest over a rank's series (those `keep` selects), independent of their order."""
    h = hashlib.blake2b(digest_size=16)
    for key in sorted(k for k in digests if keep is None or keep(k)):
        h.update("\x1f".join(key).encode("utf-8", "surrogatepass"))
        h.update(digests[key])
    return h.digest()


def group_replicas(digests: Mapping[int, bytes]) -> dict[int, int]:
    """rank -> the lowest rank with the same whole-rank digest, for every rank that repeats another."""
    first: dict[bytes, int] = {}
    replicas: dict[int, int] = {}
    for rank in sorted(digests):
        representative = first.setdefault(digests[rank], rank)
        if representative != rank:
            replicas[rank] = representative
    return replicas


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Ranks of one replica group whose statistics differ from what the rest of the group agrees on."""

    group: tuple[int, ...]  # every rank of the group
    agreeing: tuple[int, ...]  # the majority that logged the same
    differing: tuple[int, ...]  # the ranks that stand apart
    what: str  # "dense layers" | "experts"

    def as_dict(self) -> dict[str, object]:
        return {
            "group": list(self.group),
            "agreeing": list(self.agreeing),
            "differing": list(self.differing),
            "what": self.what,
        }


@dataclass(frozen=True, slots=True)
class GroupVerdict:
    mismatches: tuple[Mismatch, ...]
    unreduced: tuple[tuple[int, ...], ...]  # groups where no two ranks agree (statistics per rank)
    undecided: tuple[tuple[int, ...], ...]  # groups of two that disagree: a fault or per-rank statistics


def replica_mismatches(groups: Iterable[tuple[int, ...]], digests: Mapping[int, bytes], what: str) -> GroupVerdict:
    """Within each replica group (ranks that must log the same), the minority that differs from a strict majority.

    A group where every rank differs from every other logged per-rank statistics; a group of two that disagrees
    cannot say which one is wrong.
    """
    mismatches, unreduced, undecided = [], [], []
    for group in groups:
        present = tuple(r for r in group if r in digests)
        if len(present) < 2:
            continue
        counts: dict[bytes, list[int]] = {}
        for rank in present:
            counts.setdefault(digests[rank], []).append(rank)
        if len(counts) == 1:
            continue
        biggest = max(counts.values(), key=len)
        if len(biggest) * 2 > len(present):
            differing = tuple(r for r in present if r not in biggest)
            mismatches.append(Mismatch(present, tuple(biggest), differing, what))
        elif len(counts) == len(present) and len(present) > 2:
            unreduced.append(present)
        else:
            undecided.append(present)
    return GroupVerdict(tuple(mismatches), tuple(unreduced), tuple(undecided))

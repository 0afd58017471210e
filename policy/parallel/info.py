"""`ParallelInfo`: what a run knows about the job's parallel layout, as stored with the run and shown by every view.

Belongs here: the record (layout, where it came from, the naming convention, each rank's coordinates, replicas
stored once, replica mismatches, notes) and its JSON form (`to_json` / `from_json`, the `parallel` object of the
analysis). Must not be here: deciding any of it (resolve.py, replicas.py), storage (db/).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fp8_policy.policy.parallel.layout import ParallelLayout
from fp8_policy.policy.parallel.replicas import Mismatch

METADATA, INFERRED, UNKNOWN = "metadata", "inferred", "unknown"
SOURCES = (METADATA, INFERRED, UNKNOWN)
COORD_KEYS = ("tp", "pp", "dp", "ep", "cp")


@dataclass(slots=True)
class ParallelInfo:
    """A run's parallel layout. `layout` is None when the source is unknown; `coords[rank]` may hold only the
    coordinates that could be told (an inferred stage gives `pp` alone)."""

    source: str = UNKNOWN
    layout: ParallelLayout | None = None
    naming: str | None = None  # layer_number | global | local (policy/parallel/naming.py); None: as logged
    coords: dict[int, dict[str, int]] = field(default_factory=dict)
    replicas: dict[int, int] = field(default_factory=dict)  # rank -> the rank whose series it repeats
    mismatches: list[Mismatch] = field(default_factory=list)
    unreduced: bool = False  # replicas never agree: statistics were logged per rank, not reduced
    missing_ranks: list[int] = field(default_factory=list)  # ranks of the layout with no statistics
    outside_ranks: list[int] = field(default_factory=list)  # ranks past the stated world size (the logs won)
    notes: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """Layers are named globally for certain: the layout is known and the naming convention was told."""
        return self.source != UNKNOWN and self.naming is not None

    @property
    def pipeline(self) -> bool:
        return self.layout is not None and self.layout.pp > 1

    def stages(self) -> list[int]:
        return list(range(self.layout.pp)) if self.layout is not None else [0]

    def ranks_of_stage(self, pp_rank: int) -> list[int]:
        return sorted(r for r, c in self.coords.items() if c.get("pp", 0) == pp_rank)

    def representative(self, rank: int) -> int:
        """The rank whose stored series `rank` repeats (itself when it was stored)."""
        return self.replicas.get(rank, rank)

    def to_json(self) -> dict[str, Any]:
        layout = self.layout
        sizes: dict[str, Any] = {"tp": 1, "pp": 1, "vpp": None, "dp": 1, "ep": 1, "cp": 1}
        extra: dict[str, Any] = dict.fromkeys(
            (
                "etp",
                "num_layers",
                "num_moe_experts",
                "first_stage_layers",
                "last_stage_layers",
                "stage_counts",
                "embedding_in_split",
                "loss_in_split",
                "world_size",
                "describe",
            )
        )  # the same keys with or without a layout: readers never test for presence
        if layout is not None:
            sizes = {"tp": layout.tp, "pp": layout.pp, "vpp": layout.vpp, "dp": layout.dp, "ep": layout.ep}
            sizes["cp"] = layout.cp
            extra = {
                "etp": layout.etp,
                "num_layers": layout.num_layers,
                "num_moe_experts": layout.num_moe_experts,
                "first_stage_layers": layout.first_stage_layers,
                "last_stage_layers": layout.last_stage_layers,
                "stage_counts": [list(row) for row in layout.stage_counts] if layout.stage_counts else None,
                "embedding_in_split": layout.embedding_in_split,
                "loss_in_split": layout.loss_in_split,
                "world_size": layout.world_size,
                "describe": layout.describe(),
            }
        return {
            **sizes,
            "order": layout.order if layout is not None else None,
            "source": self.source,
            "naming": self.naming,
            "exact": self.exact,
            **extra,
            "ranks": {str(rank): coord for rank, coord in sorted(self.coords.items())},
            "replicas": {str(rank): rep for rank, rep in sorted(self.replicas.items())},
            "mismatches": [m.as_dict() for m in self.mismatches],
            "unreduced": self.unreduced,
            "missing_ranks": self.missing_ranks,
            "outside_ranks": self.outside_ranks,
            "notes": self.notes,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> ParallelInfo:
        if not data:
            return cls()
        layout = None
        if data.get("source") in (METADATA, INFERRED) and data.get("order"):
            counts = data.get("stage_counts")
            layout = ParallelLayout(
                tp=data["tp"],
                pp=data["pp"],
                dp=data["dp"],
                cp=data["cp"],
                ep=data["ep"],
                etp=data.get("etp"),
                vpp=data.get("vpp"),
                order=data["order"],
                num_layers=data.get("num_layers"),
                num_moe_experts=data.get("num_moe_experts"),
                first_stage_layers=data.get("first_stage_layers"),
                last_stage_layers=data.get("last_stage_layers"),
                stage_counts=tuple(tuple(row) for row in counts) if counts else None,
                embedding_in_split=bool(data.get("embedding_in_split")),
                loss_in_split=bool(data.get("loss_in_split")),
            )
        mismatches = [
            Mismatch(tuple(m["group"]), tuple(m["agreeing"]), tuple(m["differing"]), m["what"])
            for m in data.get("mismatches", [])
        ]
        return cls(
            source=data.get("source", UNKNOWN),
            layout=layout,
            naming=data.get("naming"),
            coords={int(rank): dict(coord) for rank, coord in data.get("ranks", {}).items()},
            replicas={int(rank): int(rep) for rank, rep in data.get("replicas", {}).items()},
            mismatches=mismatches,
            unreduced=bool(data.get("unreduced")),
            missing_ranks=list(data.get("missing_ranks", [])),
            outside_ranks=list(data.get("outside_ranks", [])),
            notes=list(data.get("notes", [])),
        )

"""The training spec `fp8-policy verify --spec FILE` runs: a Python file that defines

    def model(): ...              # a fresh model (same weights for the same torch seed)
    def loss(model, batch): ...   # the scalar training loss of one batch
    def batches(): ...            # a fresh iterator of training batches (the same order each call); with a
                                  # `seed` keyword, `verify --replicates N` calls batches(seed=...) per replicate
    def heldout(): ...            # an iterable of held-out batches

and optionally `optimizer(params)`, `scheduler(optimizer)` (a torch LR scheduler, stepped after every optimizer step),
`checkpoint` (a state-dict path loaded into `model()`), `STEPS`, `SEED`.
Loaded with runpy (the file runs as a script: only load specs you wrote or trust).
"""

from __future__ import annotations

import runpy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REQUIRED = ("model", "loss", "batches", "heldout")


@dataclass(frozen=True)
class Spec:
    path: Path
    names: dict[str, Any]

    def run_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.names.get("checkpoint") or self.names["model"],
            "loss": self.names["loss"],
            "batches": self.names["batches"],
            "heldout": self.names["heldout"],
        }
        if self.names.get("checkpoint"):
            kwargs["model_factory"] = self.names["model"]
        for optional in ("optimizer", "scheduler"):
            if callable(self.names.get(optional)):
                kwargs[optional] = self.names[optional]
        return kwargs


def load_spec(path: str | Path) -> Spec:
    names = runpy.run_path(str(path))
    missing = [name for name in REQUIRED if not callable(names.get(name))]
    if missing:
        raise ValueError(f"{path}: the spec must define {', '.join(REQUIRED)}; missing {', '.join(missing)}")
    return Spec(Path(path), names)

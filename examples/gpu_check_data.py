"""The verification kit's data, shared by its checks (examples/gpu_check.py, gpu_check_sensitivity.py): the parity
tensors of the TE H100 fixture and the reader of the statistics log TE writes."""

from __future__ import annotations

import re
from pathlib import Path

import torch

LINE = re.compile(r" - INFO - (?P<name>\S+) \t\t\t\t iteration=(?P<it>\d+) \t\t\t\t value=(?P<value>\S+)$")
STATS_LOG = Path("nvdlfw_inspect_statistics_logs") / "nvdlfw_inspect_globalrank-0.log"


def read_log(path: Path) -> dict[tuple[str, int], str]:
    out = {}
    for line in path.read_text().splitlines():
        match = LINE.search(line)
        if match:
            out[(match["name"], int(match["it"]))] = match["value"]
    return out


def parity_tensors() -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """x0, w, g0 per layer as the TE H100 parity fixture's README builds them (CPU, float32)."""
    g = torch.Generator().manual_seed(1234)
    out = {}
    for name, (fin, fout) in (("fc1", (256, 512)), ("fc2", (512, 256))):
        x0 = torch.randn(128, fin, generator=g) * torch.exp(torch.randn(128, fin, generator=g) * 2.5)
        w = torch.randn(fout, fin, generator=g) * 0.02 * torch.exp(torch.randn(fout, fin, generator=g) * 1.5)
        g0 = torch.randn(128, fout, generator=g) * torch.exp(torch.randn(128, fout, generator=g) * 3.0) * 1e-3
        out[name] = (x0, w, g0)
    return out

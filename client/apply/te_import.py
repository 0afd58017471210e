"""The lazy Transformer Engine import every TE-facing module of `client.apply` shares, and its install hint.

Belongs here: `import_te` and `TE_MISSING` only (a leaf module, so `te`, `te_ladder` and `recipe` import it
without importing each other).
"""

from __future__ import annotations

import importlib
import types

TE_MISSING = "transformer_engine is not installed: pip install 'fp8-policy[te]' on a CUDA machine"


def import_te(module: str = "transformer_engine.pytorch") -> types.ModuleType:
    """Import a TE module, or raise ImportError with the install hint."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(TE_MISSING) from exc

"""Per-phase wall-clock accounting. Kernels add their time (forward and backward) to the
"aggregate" phase so the trainer can split an epoch into aggregation, dense compute and the rest."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import torch

_totals: dict = defaultdict(float)
_depth = {"n": 0}
sync_cuda = {"on": False}  # set by the trainer on GPU so timings include the kernels themselves


@contextmanager
def phase(name: str):
    """Time a block. Nested blocks of the same phase count once (the outermost)."""
    if _depth["n"]:
        yield
        return
    _depth["n"] += 1
    if sync_cuda["on"]:
        torch.cuda.synchronize()
    start = time.perf_counter()
    try:
        yield
    finally:
        if sync_cuda["on"]:
            torch.cuda.synchronize()
        _totals[name] += time.perf_counter() - start
        _depth["n"] -= 1


def take() -> dict:
    """Return the accumulated seconds per phase and reset them."""
    out = dict(_totals)
    _totals.clear()
    return out

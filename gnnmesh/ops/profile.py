"""Per-phase wall-clock accounting. Kernels add their time (forward and backward) to the
"aggregate" phase so the trainer can split an epoch into aggregation, dense compute and the rest."""

from __future__ import annotations

import resource
import time
from collections import defaultdict
from contextlib import contextmanager

import torch

_totals: dict = defaultdict(float)
_sys_totals: dict = defaultdict(float)
_depth = {"n": 0}
sync_cuda = {"on": False}  # set by the trainer on GPU so timings include the kernels themselves
# set by a benchmark that splits the kernel (sys) time, page faults mostly, by phase as well:
# a system call per phase, so off in training
count_sys = {"on": False}


def _sys_seconds() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime if count_sys["on"] else 0.0


@contextmanager
def phase(name: str):
    """Time a block. Nested blocks of the same phase count once (the outermost)."""
    if _depth["n"]:
        yield
        return
    _depth["n"] += 1
    if sync_cuda["on"]:
        torch.cuda.synchronize()
    start, sys_start = time.perf_counter(), _sys_seconds()
    try:
        yield
    finally:
        if sync_cuda["on"]:
            torch.cuda.synchronize()
        _totals[name] += time.perf_counter() - start
        if count_sys["on"]:
            _sys_totals[name] += _sys_seconds() - sys_start
        _depth["n"] -= 1


def active() -> bool:
    """Whether a phase is being timed now (work inside it counts as that phase's)."""
    return _depth["n"] > 0


def take() -> dict:
    """Return the accumulated seconds per phase and reset them."""
    out = dict(_totals)
    _totals.clear()
    return out


def take_sys() -> dict:
    """Return the accumulated kernel (sys) seconds per phase, counted while ``count_sys`` is
    on, and reset them."""
    out = dict(_sys_totals)
    _sys_totals.clear()
    return out

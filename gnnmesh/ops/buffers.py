"""Memory for the CPU kernels' outputs, reused from epoch to epoch.

A fresh large tensor costs a page fault for every 4 KiB page it is first written to (the
operating system zeroes each one): for the ``[N, F]`` outputs of an SpMM on a million-node
graph that takes longer than the multiply. Every large kernel output is carved from a
pooled buffer instead; when torch frees the last tensor on that memory, the buffer goes
back to the pool and the next output of about its size takes it, its pages already there.

Sizes are rounded up to one of eight classes per doubling (at most 12.5% unused), and a
buffer serves any request up to a quarter smaller, so the varying blocks of sampled
mini-batches reuse each other's buffers as well. The idle
buffers never hold more than the most pooled memory that was in use at once: past that,
the longest idle go back to the system.

Pooling is off unless a program turns it on (``gnnmesh train`` does, except for strategies
that hold resident memory to a budget: idle buffers would count against it).
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict

import numpy as np
import torch

_MIN_BYTES = 1 << 20  # smaller blocks come from malloc's own free lists, already in memory
_NUMPY = {torch.float32: np.float32, torch.float64: np.float64}
_idle: OrderedDict = OrderedDict()  # id -> buffer no tensor uses, the longest idle first
_state = {"live": 0, "most_live": 0, "idle": 0, "on": False}  # bytes, and whether pooling is on
_lock = threading.Lock()


def size_class(nbytes: int) -> int:
    """``nbytes`` rounded up to the next of eight steps between powers of two."""
    step = 1 << max(0, nbytes.bit_length() - 4)
    return -(-nbytes // step) * step


def empty(shape, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialized CPU tensor, on pooled memory when it is large."""
    shape = tuple(int(s) for s in shape)
    size = math.prod(shape) * torch.tensor([], dtype=dtype).element_size()
    if size < _MIN_BYTES or dtype not in _NUMPY or not _state["on"]:
        return torch.empty(shape, dtype=dtype)
    wanted = size_class(size)
    with _lock:
        key = _fitting(wanted)
        buffer = _idle.pop(key) if key is not None else np.empty(wanted, dtype=np.uint8)
        if key is not None:
            _state["idle"] -= buffer.nbytes
        _state["live"] += buffer.nbytes
        _state["most_live"] = max(_state["most_live"], _state["live"])
    array = buffer[:size].view(_NUMPY[dtype]).reshape(shape)
    # torch keeps ``array`` alive as long as any tensor uses its memory; then the buffer is free
    weakref.finalize(array, _release, buffer)
    return torch.from_numpy(array)


def _fitting(wanted: int):
    """The idle buffer to take for ``wanted`` bytes: the smallest of at least that size and
    at most a quarter more, the last freed among equals (its pages are the likeliest still
    in the caches); None if there is none."""
    best = None
    for key in reversed(_idle):
        size = _idle[key].nbytes
        if wanted <= size <= wanted + wanted // 4 and (best is None or size < _idle[best].nbytes):
            best = key
    return best


def _release(buffer: np.ndarray) -> None:
    with _lock:
        _state["live"] -= buffer.nbytes
        _idle[id(buffer)] = buffer
        _state["idle"] += buffer.nbytes
        while _state["idle"] > _state["most_live"]:
            _, oldest = _idle.popitem(last=False)
            _state["idle"] -= oldest.nbytes


def pool(on: bool) -> None:
    """Turn pooling on or off (off gives the idle buffers back)."""
    _state["on"] = bool(on)
    if not on:
        clear()


def idle_bytes() -> int:
    """Bytes the pool holds that no tensor uses."""
    return _state["idle"]


def clear() -> None:
    """Give the idle buffers back (a process done with a graph whose sizes will not recur)."""
    with _lock:
        _idle.clear()
        _state["idle"] = 0
        _state["most_live"] = _state["live"]

"""Transfers overlapped with compute (HongTu §5): while batch b computes, batch b+1's rows and
topology come in on one CUDA copy stream and batch b-1's results go out on another, ordered by
events, so that the host<->device copies hide behind the kernels.

The pipeline *fetches* a batch's loads one batch ahead and *takes* them when the batch runs; it
*puts* results to the host tier, which are done one batch later, in the order they were put, so
that sums into the host tier add up in the same order as in line. Fetches and puts never touch
the same table within a stage (a stage reads its inputs and writes its output, or the inputs'
gradients), and ``settle`` finishes every put before the next stage reads.

On the CPU the same schedule runs in line: a fetch is done when made, a put waits for the
batch after. With ``ahead`` off, every load and put runs when its batch needs it. Either way
the same rows move: the byte counters do not change, and neither does any result.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass
class _InFlight:
    """A fetch issued on the load stream: its value, usable once ``done`` has passed."""

    value: Any
    done: torch.cuda.Event


class Overlap:
    """The transfer schedule of one rank's pipeline over ``store`` on ``device``. ``ahead``:
    fetch a batch ahead and put a batch behind (on CUDA, on copy streams)."""

    def __init__(self, store, device, ahead: bool):
        self.store, self.device, self.ahead = store, torch.device(device), bool(ahead)
        self.streams = self.ahead and self.device.type == "cuda"
        if self.streams:
            self.load_stream = torch.cuda.Stream(self.device)
            self.store_stream = torch.cuda.Stream(self.device)
        self._puts: deque = deque()  # per batch, its puts not yet done: [(event, name, rows, values, add)]
        self._batch: list = []

    def fetch(self, load: Callable[[], Any]) -> Any:
        """``load()``'s value: on CUDA, issued on the load stream and handed over by ``take``."""
        if not self.streams:
            return load()
        with torch.cuda.stream(self.load_stream):
            value = load()
            done = torch.cuda.Event()
            done.record()
        return _InFlight(value, done)

    def take(self, fetched: Any) -> Any:
        """A fetch's value, for the compute stream: it waits for the copies, and the fetched
        tensors (made on the load stream) are marked as used on it, so that the allocator
        does not hand their memory out again while its kernels still read them."""
        if not isinstance(fetched, _InFlight):
            return fetched
        compute = torch.cuda.current_stream(self.device)
        compute.wait_event(fetched.done)
        for t in _cuda_tensors(fetched.value):
            t.record_stream(compute)
        return fetched.value

    def put(self, name: str, rows, values: torch.Tensor, add: bool = False) -> None:
        """``store[name][rows] = values`` (``+=`` with ``add``), now or a batch later; on CUDA
        copied out on the store stream, once the kernels computing ``values`` are done."""
        values = values.detach()
        if not self.ahead:
            self._apply(name, rows, values, add)
            return
        done = None
        if self.streams:
            compute = torch.cuda.current_stream(self.device)
            self.store_stream.wait_stream(compute)
            with torch.cuda.stream(self.store_stream):
                staged = torch.empty(values.shape, dtype=torch.float32, device="cpu", pin_memory=True)
                staged.copy_(values, non_blocking=True)
                done = torch.cuda.Event()
                done.record()
            values.record_stream(self.store_stream)
            values = staged
        self._batch.append((done, name, rows, values, add))

    def batch_done(self) -> None:
        """A batch has put all it puts: finish the puts of the batches before it."""
        if not self.ahead:
            return
        self._puts.append(self._batch)
        self._batch = []
        while len(self._puts) > 1:
            self._finish(self._puts.popleft())

    def settle(self) -> None:
        """Finish every put (before anything reads what they write)."""
        if self._batch:
            self._puts.append(self._batch)
            self._batch = []
        while self._puts:
            self._finish(self._puts.popleft())

    def _finish(self, puts: list) -> None:
        for done, name, rows, values, add in puts:
            if done is not None:
                done.synchronize()
            self._apply(name, rows, values, add)

    def _apply(self, name: str, rows, values: torch.Tensor, add: bool) -> None:
        (self.store.accumulate if add else self.store.write)(name, rows, values)


def _cuda_tensors(value: Any, seen=None):
    """Every CUDA tensor in ``value``: a tensor, a container of them, or an object holding
    them (a transfer step, a block's adjacency and its index arrays)."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        if value.is_cuda:
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _cuda_tensors(item, seen)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _cuda_tensors(item, seen)
    elif hasattr(value, "__dict__"):
        for item in vars(value).values():
            yield from _cuda_tensors(item, seen)

"""Many ranks in one process, to run ``propagate`` at world sizes a machine cannot start
as processes (64 ranks of torch on two cores).

Each rank is a thread holding a ``SimulatedComm``, which does what ``gnnmesh.comm.Comm``
does for the collectives ``propagate`` uses (all_reduce, all_to_all, all_gather,
broadcast_object, all_gather_object) and returns the same data in the same order, so the
labels equal those of real ranks (tests/partition/test_propagate.py checks it). The threads
take turns: one runs at a time and hands over at each collective, in rank order. That makes
each rank's own memory measurable: with ``trace_memory``, tracemalloc's count of allocated
bytes (numpy's arrays included) is split by the rank that was running, giving each rank's
peak.

    >>> from gnnmesh.partition.simulate import simulate
    >>> results, peaks = simulate(fn, 16, graph, trace_memory=True)   # fn(comm, *args)
"""

from __future__ import annotations

import copy
import threading
import time
import tracemalloc
from typing import Callable, Optional

import numpy as np
import torch


class _World:
    """Shared state of the simulated ranks: the turn, the collectives in flight and, when
    traced, each rank's live and peak bytes."""

    def __init__(self, size: int, trace: bool):
        self.size, self.trace = size, trace
        self.cond = threading.Lock()
        self.wake = [threading.Condition(self.cond) for _ in range(size)]  # one per rank
        self.turn = 0
        self.done = [False] * size
        self.calls = [0] * size
        self.slots: dict = {}
        self.error: Optional[BaseException] = None
        self.live = [0] * size
        self.peak = [0] * size
        self.base = 0
        self.started = 0.0
        self.segments = [[] for _ in range(size)]  # seconds each rank ran between collectives

    # -- turns (called with the condition held) --------------------------------------------
    def _start(self, rank: int) -> None:
        self.started = time.perf_counter()
        if self.trace:
            self.base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()

    def _stop(self, rank: int) -> None:
        self.segments[rank].append(time.perf_counter() - self.started)
        if self.trace:
            current, peak = tracemalloc.get_traced_memory()
            self.peak[rank] = max(self.peak[rank], self.live[rank] + peak - self.base)
            self.live[rank] += current - self.base

    def _pass(self, rank: int) -> None:
        """Hand the turn to the next rank still running."""
        for step in range(1, self.size + 1):
            nxt = (rank + step) % self.size
            if not self.done[nxt]:
                self.turn = nxt
                self.wake[nxt].notify()
                break
        if self.error is not None:
            for wake in self.wake:
                wake.notify()

    def _wait(self, rank: int, ready=lambda: True) -> None:
        self.wake[rank].wait_for(lambda: self.error is not None or (self.turn == rank and ready()))
        if self.error is not None:
            raise RuntimeError("another simulated rank failed") from self.error

    def begin(self, rank: int) -> None:
        with self.cond:
            self._wait(rank)
            self._start(rank)

    def end(self, rank: int, error: Optional[BaseException] = None) -> None:
        with self.cond:
            if error is not None and self.error is None:
                self.error = error
            self._stop(rank)
            self.done[rank] = True
            self._pass(rank)

    def collective(self, rank: int, contribution, combine: Callable, shared: bool = False):
        """Deposit this rank's ``contribution`` to its next collective, let the others run,
        and return ``combine(contributions in rank order, rank)`` once all have deposited
        (computed once for all ranks when ``shared``: the same result for every rank)."""
        with self.cond:
            index = self.calls[rank]
            self.calls[rank] += 1
            slot = self.slots.setdefault(index, {"data": [None] * self.size, "in": 0, "out": 0})
            slot["data"][rank] = contribution
            slot["in"] += 1
            self._stop(rank)
            self._pass(rank)
            self._wait(rank, lambda: slot["in"] == self.size)
            self._start(rank)
            if not shared:
                result = combine(slot["data"], rank)
            else:
                if "result" not in slot:
                    slot["result"], slot["by"] = combine(slot["data"], rank), rank
                result = copy.copy(slot["result"])
            slot["out"] += 1
            if slot["out"] == self.size:  # last reader: the contributions are freed now
                held = list(enumerate(slot["data"])) + ([(slot["by"], slot.pop("result"))] if "by" in slot else [])
                self._stop(rank)  # what this rank held until now is its own; the freeing is not
                del self.slots[index]
                slot.clear()
                for owner, data in held:
                    self.live[owner] -= _nbytes(data)
                held.clear()
                self._start(rank)
            return result


def _sum_of(data, me):
    """The elementwise sum of the ranks' arrays, in rank order, one array at a time."""
    total = data[0].copy()
    for array in data[1:]:
        total += array
    return total


def _nbytes(data) -> int:
    if isinstance(data, np.ndarray):
        return data.nbytes
    if isinstance(data, (tuple, list)):
        return sum(_nbytes(d) for d in data)
    return 0


class SimulatedComm:
    """One simulated rank's communicator (the ``Comm`` methods ``propagate`` uses)."""

    def __init__(self, world: _World, rank: int):
        self._world, self.rank, self.world_size = world, rank, world.size

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        total = self._world.collective(self.rank, tensor.numpy().copy(),
                                       _sum_of, shared=True)
        tensor.copy_(torch.from_numpy(np.ascontiguousarray(total, dtype=tensor.numpy().dtype)))
        return tensor

    def all_to_all(self, send: torch.Tensor, send_counts: list, recv_counts: list, async_op: bool = False):
        offsets = np.concatenate([[0], np.cumsum(send_counts)]).astype(np.int64)

        def combine(data, me):
            pieces = [array[start[me]:start[me + 1]] for array, start in data]
            return np.concatenate(pieces) if pieces else np.zeros(0)
        out = self._world.collective(self.rank, (send.numpy().copy(), offsets), combine)
        if out.shape[0] != sum(recv_counts):
            raise RuntimeError(f"rank {self.rank} expected {sum(recv_counts)} elements, got {out.shape[0]}")
        recv = torch.from_numpy(np.ascontiguousarray(out))
        return (None, recv) if async_op else recv

    def all_gather(self, tensor: torch.Tensor, sizes: Optional[list] = None, dim: int = 0) -> torch.Tensor:
        out = self._world.collective(self.rank, tensor.numpy().copy(),
                                     lambda data, me: np.concatenate(data, axis=dim), shared=True)
        return torch.from_numpy(np.ascontiguousarray(out))

    def broadcast_object(self, obj, src: int = 0):
        return self._world.collective(self.rank, obj if self.rank == src else None,
                                      lambda data, me: copy.deepcopy(data[src]))

    def all_gather_object(self, obj) -> list:
        return self._world.collective(self.rank, obj, lambda data, me: copy.deepcopy(list(data)))


def simulate(fn: Callable, world_size: int, *args, trace_memory: bool = False, timing: Optional[dict] = None):
    """``fn(comm, *args)`` on ``world_size`` simulated ranks, taking turns. Returns the
    results in rank order and, with ``trace_memory``, each rank's peak bytes (numpy and
    Python allocations while it ran, less what it held at its start), else None.

    ``timing`` (a dict) receives ``cpu``: the seconds all ranks computed, and ``parallel``:
    the sum over the stretches between collectives of the slowest rank's stretch, what
    ranks on as many cores would take if communication were free."""
    world = _World(world_size, trace_memory)
    results: list = [None] * world_size

    def run(rank: int) -> None:
        try:
            world.begin(rank)
        except BaseException:
            return
        try:
            results[rank] = fn(SimulatedComm(world, rank), *args)
        except BaseException as error:  # stop the others, report the first
            world.end(rank, error)
            return
        world.end(rank)

    started = trace_memory and not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        threads = [threading.Thread(target=run, args=(rank,), daemon=True) for rank in range(world_size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        if started:
            tracemalloc.stop()
    if world.error is not None:
        raise world.error
    if timing is not None:
        longest = max(len(s) for s in world.segments)
        stretches = np.zeros((world_size, longest))
        for rank, segments in enumerate(world.segments):
            stretches[rank, :len(segments)] = segments
        timing.update(cpu=float(stretches.sum()), parallel=float(stretches.max(axis=0).sum()))
    return results, (list(world.peak) if trace_memory else None)

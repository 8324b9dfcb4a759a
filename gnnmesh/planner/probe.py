"""Measure the performance model's rates on this machine: SpMM, GEMM and elementwise costs on
one device and all-reduce bandwidth and latency between local processes.

Each probe times a handful of shapes (a second or two in all) and fits the model's linear
cost terms by non-negative least squares on relative error, so that small and large
operations weigh alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ..structured import loads_json
from .machine import ComputeRates, Network

# (rows, common, nonzeros per row): square blocks, a wide and a narrow common dimension,
# sparser rows, and a tiny block that exposes the fixed cost per call
SPMM_SHAPES = ((1 << 15, 1 << 15, 8), (1 << 12, 1 << 17, 16), (1 << 17, 1 << 13, 4),
               (1 << 15, 1 << 15, 2), (64, 64, 4))
SPMM_WIDTHS = (1, 4, 16, 64, 128)
GEMM_SHAPES = ((1 << 15, 128, 16), (1 << 15, 16, 128), (128, 1 << 15, 16), (1024, 256, 256), (16, 16, 16))
ELEMENTWISE_SIZES = tuple(1 << s for s in range(10, 25, 2))  # elements
DROPOUT_ROWS, DROPOUT_WIDTH = tuple(1 << s for s in range(8, 17, 2)), 64
ALLREDUCE_BYTES = tuple(1 << s for s in range(10, 25, 2))   # 1 KiB to 16 MiB


def _seconds(fn: Callable, sync: Callable, min_time: float = 0.02, max_reps: int = 50) -> float:
    """Fastest time of ``fn`` after one warm-up call: on a shared machine the other load
    only ever adds time."""
    fn()
    sync()
    times = []
    while len(times) < 3 or (sum(times) < min_time and len(times) < max_reps):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return min(times)


def _fit(columns: list, times: list) -> np.ndarray:
    from scipy.optimize import nnls
    a, t = np.asarray(columns, dtype=float), np.asarray(times, dtype=float)
    coef, _ = nnls(a / t[:, None], np.ones_like(t))
    return coef


def _random_adjacency(rows: int, common: int, per_row: int, seed: int):
    from ..graph import Adjacency
    import scipy.sparse as sp
    rng = np.random.default_rng(seed)
    r = np.repeat(np.arange(rows), per_row)
    c = rng.integers(0, common, size=r.size)
    mat = sp.csr_matrix((np.ones(r.size, dtype=np.float32), (r, c)), shape=(rows, common))
    mat.sum_duplicates()
    return Adjacency.from_scipy(mat)


def probe_compute(device: str = "cpu", threads: Optional[int] = None) -> ComputeRates:
    """SpMM, GEMM and elementwise costs of one rank with ``threads`` compute threads (default:
    torch's). SpMMs run both ways, as forward and backward passes do."""
    import torch
    from ..ops.spmm import multiply
    from ..view import GraphView

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        cols, times = [], []
        for i, (rows, common, per_row) in enumerate(SPMM_SHAPES):
            adj = _random_adjacency(rows, common, per_row, seed=i)
            values = adj.values.to(dev)
            for width in SPMM_WIDTHS:
                for transpose, (out, inner) in ((False, (rows, common)), (True, (common, rows))):
                    x = torch.rand(inner, width, device=dev)
                    times.append(_seconds(lambda: multiply(adj, values, x, transpose), sync))
                    cols.append([1.0, adj.nnz, adj.nnz * width, out * width, inner * width])
        spmm = _fit(cols, times)
        cols, times = [], []
        for m, k, n in GEMM_SHAPES:
            a, b = torch.rand(m, k, device=dev), torch.rand(k, n, device=dev)
            times.append(_seconds(lambda: a @ b, sync))
            cols.append([1.0, 2.0 * m * k * n])
        gemm = _fit(cols, times)
        cols, times = [], []
        for n in ELEMENTWISE_SIZES:
            a = torch.rand(n, device=dev)
            times.append(_seconds(lambda: torch.relu(a), sync))
            cols.append([1.0, n])
        elementwise = _fit(cols, times)
        cols, times = [], []
        for rows in DROPOUT_ROWS:   # the trainer's dropout: masks keyed by global row ids
            view = GraphView(_random_adjacency(rows, rows, 1, seed=rows))
            a = torch.rand(rows, DROPOUT_WIDTH, device=dev)
            times.append(_seconds(lambda: view.dropout(a, 0.5, True), sync))
            cols.append([1.0, a.numel()])
        dropout = _fit(cols, times)
    finally:
        torch.set_num_threads(before)
    label = f"probed ({device}, {threads or before} thread{'s' if (threads or before) > 1 else ''})"
    return ComputeRates(*(float(v) for v in spmm), gemm_call=float(gemm[0]),
                        gemm_flops=1.0 / max(float(gemm[1]), 1e-18), elementwise_call=float(elementwise[0]),
                        elementwise_per=float(elementwise[1]), dropout_per=float(dropout[1]), source=label)


def _allreduce_worker(rank: int, world: int, store: str, out: str, sizes: list) -> None:
    """One rank of the bandwidth probe; rank 0 writes the timings to ``out`` as JSON. The
    all-reduces are the ``Comm``'s that training uses."""
    import torch
    from .. import comm
    torch.set_num_threads(1)
    comm.init_local(store, rank, world)
    try:
        ranks = comm.Comm()
        timings = []
        for nbytes in sizes:
            buf = torch.zeros(max(1, nbytes // 4))
            ranks.barrier()
            ranks.all_reduce(buf)
            reps, best = 10 if nbytes < (1 << 20) else 4, float("inf")  # the same count on every rank
            for _ in range(reps):
                start = time.perf_counter()
                ranks.all_reduce(buf)
                best = min(best, time.perf_counter() - start)
            timings.append(best)
        if rank == 0:
            Path(out).write_text(json.dumps(timings))
        ranks.barrier()
    finally:
        comm.shutdown()


_WORKER = ("import json, sys; from gnnmesh.planner.probe import _allreduce_worker; "
           "_allreduce_worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], "
           "json.loads(sys.argv[5]))")


def probe_bandwidth(ranks: int = 2, sizes: tuple = ALLREDUCE_BYTES, timeout: float = 120.0) -> tuple:
    """(bandwidth in B/s, latency per ring step in s) of gloo all-reduces among ``ranks``
    local processes, fitted to the ring all-reduce cost. The ranks are fresh interpreters,
    so the probe works from any entry point."""
    with tempfile.TemporaryDirectory() as tmp:
        store, out = os.path.join(tmp, "store"), os.path.join(tmp, "times.json")
        procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(rank), str(ranks), store, out,
                                   json.dumps(list(sizes))]) for rank in range(ranks)]
        try:
            codes = [p.wait(timeout=timeout) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        if any(codes) or not os.path.exists(out):
            raise RuntimeError(f"bandwidth probe failed (exit codes {codes})")
        timings = loads_json(Path(out).read_text())
    steps = 2.0 * (ranks - 1)
    latency, per_byte = _fit([[steps, steps / ranks * s] for s in sizes], timings)
    return 1.0 / max(float(per_byte), 1e-18), float(latency)


def probe_host_bandwidth(device: str = "cpu", nbytes: int = 1 << 26) -> float:
    """Bytes per second copied from host memory to ``device`` (on CPU: from one buffer to
    another, what an out-of-core transfer costs there)."""
    import torch
    dev = torch.device(device)
    source = torch.empty(nbytes // 4).pin_memory() if dev.type == "cuda" else torch.empty(nbytes // 4)
    target = torch.empty_like(source, device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    return nbytes / _seconds(lambda: target.copy_(source, non_blocking=True), sync)


def probe_gather_bandwidth(nbytes: int = 1 << 26, width: int = 128) -> float:
    """Bytes per second of reading rows of ``width`` floats at sorted random positions from a
    host array larger than the caches: how a mini-batch's feature reads go."""
    import torch
    rows = nbytes // (4 * width)
    table = torch.zeros(2 * rows, width)
    ids = torch.from_numpy(np.sort(np.random.default_rng(0).choice(2 * rows, rows, replace=False)))
    return rows * width * 4 / _seconds(lambda: table.index_select(0, ids), lambda: None)


def probe_network(ranks: int = 2, device: str = "cpu") -> Network:
    """Both link kinds from ``ranks`` local processes: a one-machine job never leaves its node.
    Probe with the job's rank count where cores are shared: waiting for descheduled peers is
    then part of what is measured."""
    bandwidth, latency = probe_bandwidth(ranks)
    return Network(bandwidth, bandwidth, latency, latency, host_bw=probe_host_bandwidth(device),
                   gather_bw=probe_gather_bandwidth(), source=f"probed (gloo all-reduce, {ranks} local processes)")

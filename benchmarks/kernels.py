"""The sparse kernels side by side: each candidate implementation of every op on one graph,
its time (median and min-max over the repeats), effective bandwidth and share of the
machine's measured copy bandwidth.

Candidates: ``compiled`` (gnnmesh's CPU kernels: threads split by entries, every head in one
pass), ``torch`` (the same op without them, as it runs where numba is missing: torch's sparse
CSR product, MKL on x86, head by head for SpMM; indexing and scatter ops for the rest) and
``torch gather`` (SpMM from index_select and index_add over chunks of edges).

Effective bandwidth counts the bytes an ideal kernel moves (every input read once, every
output written once, a gathered row once per entry) over the measured time.

    python benchmarks/kernels.py                                   # 1M nodes, 10M edges
    python benchmarks/kernels.py --nodes 100000 --edges 1000000    # quick look
"""

from __future__ import annotations

import argparse
import time

import torch

from driver import Spread

_CHUNK = 1 << 22  # entries per chunk of the gather candidate


def copy_bandwidth_gbs(mib: int = 512) -> float:
    """Memory-copy bandwidth into an already touched buffer, counting read + write bytes
    (median of 5 copies)."""
    src = torch.rand(mib * 2**18)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / timed(lambda: dst.copy_(src), 5).median / 1e9


def timed(fn, repeats: int, sync=None) -> Spread:
    """Seconds of ``fn()`` over ``repeats`` calls after one warm-up call; ``sync`` (a GPU's
    synchronize) is called before each clock reading, so that the work is done, not queued."""
    sync = sync or (lambda: None)
    fn()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return Spread.of(times)


def spmm_bytes(nodes: int, entries: int, width: int, edge_values: int = 1) -> int:
    """Bytes an ideal SpMM moves: per entry a gathered row, its column index and its values;
    per row its output and its row pointer (float32, int32 indices)."""
    return entries * (width * 4 + 4 + edge_values * 4) + nodes * (width * 4 + 4)


def gather_spmm(adj, values, x):
    """``A @ x`` with torch's dense ops only: gather source rows, scale, add into the rows."""
    from gnnmesh.ops._index import cols, rows
    row, col = rows(adj, x.device), cols(adj, x.device)
    out = x.new_zeros((adj.shape[0],) + tuple(x.shape[1:]))
    for s in range(0, adj.nnz, _CHUNK):
        v = values[s:s + _CHUNK]
        part = x[col[s:s + _CHUNK]] * v.view(v.shape + (1,) * (x.dim() - v.dim()))
        out.index_add_(0, row[s:s + _CHUNK], part)
    return out


def kernel_cases(graph, features: int, heads: int):
    """``(op, bytes moved, {candidate: fn})`` for every kernel on ``graph``'s operators."""
    from gnnmesh.ops import compiled, edge_softmax, sddmm
    from gnnmesh.ops.spmm import edge_dot, multiply
    from gnnmesh.view import GraphView

    view = GraphView(graph.adj)
    gcn, loop = view.operator("gcn"), view.operator("loop")
    n, e, el = graph.num_nodes, gcn.nnz, 4  # both operators are the pattern of A + I
    x = torch.rand(n, features)
    values = gcn.values
    multi = torch.rand(n, heads, features // heads)
    attention = torch.rand(loop.nnz, heads)
    dst, src = torch.rand(n, heads), torch.rand(n, heads)
    scores = torch.rand(loop.nnz, heads, requires_grad=True)
    soft = edge_softmax(loop, scores)
    grad = torch.rand_like(soft)

    def softmax_backward():
        return torch.autograd.grad(soft, scores, grad, retain_graph=True)

    def both(fn):
        """The compiled kernel and the torch implementation of one public op."""
        def fallback():
            with compiled.disabled():
                return fn()
        return {"compiled": fn, "torch": fallback}

    def moved(width, edge_values=1):
        return spmm_bytes(n, e, width, edge_values)

    return [
        (f"SpMM fwd ({features} cols)", moved(features),
         {**both(lambda: multiply(gcn, values, x)), "torch gather": lambda: gather_spmm(gcn, values, x)}),
        (f"SpMM bwd (A^T, {features} cols)", moved(features),
         both(lambda: multiply(gcn, values, x, transpose=True))),
        (f"multi-head SpMM ({heads}x{features // heads})", moved(features, heads),
         {**both(lambda: multiply(loop, attention, multi)),
          "torch gather": lambda: gather_spmm(loop, attention, multi)}),
        (f"SDDMM dot ({features} cols)", moved(features),
         both(lambda: edge_dot(gcn, x, x))),
        (f"SDDMM add ({heads} heads)", e * (2 * heads * el + 4) + n * (heads * el + 4),
         both(lambda: sddmm(loop, dst, src, "add"))),
        (f"edge softmax fwd ({heads} heads)", 2 * e * heads * el + n * 4,
         both(lambda: edge_softmax(loop, scores.detach()))),
        (f"edge softmax bwd ({heads} heads)", 3 * e * heads * el + n * 4, both(softmax_backward)),
    ]


def kernel_table(graph, features: int, heads: int, repeats: int, bandwidth: float,
                 ops=None, candidates=None) -> list:
    """Rows ``(op, candidate, Spread of seconds, GB/s at the median)``, printed as a table;
    ``ops`` (name prefixes) and ``candidates`` select some of them. Outputs come from pooled
    memory, as in `gnnmesh train`, so that repeated calls time the kernel, not page faults."""
    from gnnmesh.ops import buffers
    buffers.pool(True)
    rows = []
    print(f"\n| op | candidate | ms, median (min-max) | GB/s effective | % of copy {bandwidth:.1f} GB/s |")
    print("|---|---|---|---|---|")
    for op, moved, fns in kernel_cases(graph, features, heads):
        if ops is not None and not op.startswith(tuple(ops)):
            continue
        for name, fn in fns.items():
            if candidates is not None and name not in candidates:
                continue
            t = timed(fn, repeats)
            gbs = moved / t.median / 1e9
            rows.append((op, name, t, gbs))
            print(f"| {op} | {name} | {t.format(1, 1e3)} | {gbs:.1f} | {gbs / bandwidth:.0%} |", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description="sparse kernels: every candidate side by side")
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=128, help="columns of the vertex data")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    from gnnmesh import datasets
    torch.set_num_threads(args.threads)
    graph = datasets.load(f"rmat:nodes={args.nodes},edges={args.edges},features=128,classes=16")
    print(f"graph: {graph!r}  threads: {args.threads}  torch {torch.__version__}")
    kernel_table(graph, args.features, args.heads, args.repeats, copy_bandwidth_gbs())


if __name__ == "__main__":
    main()

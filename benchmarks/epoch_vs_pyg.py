"""One GCN training epoch (forward, backward, Adam step), gnnmesh against PyG's GCNConv on
its fastest path here (torch CSR adjacency, cached normalization), same graph, same threads.

Each framework runs in its own fresh process so that its peak memory is its own; the
processes alternate (gnnmesh, PyG, gnnmesh, PyG, ...) and the medians are compared.
Also reports SpMM throughput against the machine's measured memory-copy bandwidth and the
effect of locality reordering on SpMM time.

    python benchmarks/epoch_vs_pyg.py                # 1M nodes, 10M edges, 128 features
    python benchmarks/epoch_vs_pyg.py --nodes 100000 --edges 1000000   # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load(spec: str):
    from gnnmesh import datasets
    return datasets.load(spec)


# -- workers: one framework per process ---------------------------------------------------------
def run_gnnmesh(graph, args):
    from gnnmesh.config import Config
    from gnnmesh.train import Trainer
    cfg = Config(model="gcn", hidden=args.hidden, layers=2, dropout=0.0, epochs=args.epochs)
    trainer = Trainer(cfg, graph)
    return trainer.train_step


def run_pyg(graph, args):
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv

    n = graph.num_nodes
    adj_t = torch.sparse_csr_tensor(graph.adj.indptr, graph.adj.indices, torch.ones(graph.num_edges),
                                    size=(n, n))
    x, y, mask = graph.x, graph.y, graph.train_mask

    class GCN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GCNConv(x.shape[1], args.hidden, cached=True)
            self.conv2 = GCNConv(args.hidden, graph.num_classes, cached=True)

        def forward(self):
            return self.conv2(torch.relu(self.conv1(x, adj_t)), adj_t)

    torch.manual_seed(0)
    model = GCN()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def step():
        out = model()
        loss = F.cross_entropy(out[mask], y[mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss)

    return step


def worker(args):
    torch.set_num_threads(args.threads)
    graph = load(args.spec)
    base = rss_mib()
    step = {"gnnmesh": run_gnnmesh, "pyg": run_pyg}[args.worker](graph, args)
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.epochs):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(json.dumps({"times": times, "peak_mib": peak_rss_mib(), "base_mib": base}))


# -- the driver ----------------------------------------------------------------------------------
def spawn(name, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", name, "--spec", args.spec, "--threads", str(args.threads),
           "--epochs", str(args.epochs), "--warmup", str(args.warmup), "--hidden", str(args.hidden)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def copy_bandwidth_gbs(mib: int = 512) -> float:
    """Memory-copy bandwidth into an already touched buffer, counting read + write bytes."""
    src = torch.rand(mib * 2**18)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(_timed(lambda: dst.copy_(src)) for _ in range(5))
    return 2 * src.numel() * 4 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def spmm_figures(graph, features: int) -> tuple[float, float, float]:
    """Seconds, GFLOP/s and effective GB/s of one forward SpMM with the GCN operator."""
    from gnnmesh.view import GraphView
    op = GraphView(graph.adj).operator("gcn")
    from gnnmesh.ops import spmm
    x = torch.rand(graph.num_nodes, features)
    spmm(op, x)
    seconds = min(_timed(lambda: spmm(op, x)) for _ in range(5))  # min: least disturbed by noise
    flops = 2 * op.nnz * features
    # bytes an ideal kernel moves: every stored entry reads a row of x, its index and value;
    # the output is written once; indptr is read once.
    moved = op.nnz * (features * 4 + 4 + 4) + graph.num_nodes * (features * 4 + 4)
    return seconds, flops / seconds / 1e9, moved / seconds / 1e9


def driver(args):
    print(f"graph: {args.spec}  threads: {args.threads}  torch {torch.__version__}")
    graph = load(args.spec)  # generate and cache once, so the workers only read the cache
    print(f"  {graph!r}")
    results = {"gnnmesh": [], "pyg": []}
    for _ in range(args.rounds):
        for name in results:
            results[name].append(spawn(name, args))
    med = {k: statistics.median(t for r in v for t in r["times"]) for k, v in results.items()}
    peak = {k: max(r["peak_mib"] for r in v) for k, v in results.items()}
    extra = {k: max(r["peak_mib"] - r["base_mib"] for r in v) for k, v in results.items()}
    print("\n| | epoch (s, median) | peak RSS (MiB) | peak above loaded graph (MiB) |")
    print("|---|---|---|---|")
    for k in results:
        print(f"| {k} | {med[k]:.3f} | {peak[k]:.0f} | {extra[k]:.0f} |")
    print(f"| **gnnmesh / PyG** | **{med['gnnmesh'] / med['pyg']:.2f}x** | **{peak['gnnmesh'] / peak['pyg']:.2f}x** "
          f"| {extra['gnnmesh'] / extra['pyg']:.2f}x |")

    torch.set_num_threads(args.threads)
    bandwidth = copy_bandwidth_gbs()
    seconds, gflops, gbs = spmm_figures(graph, args.hidden)
    print(f"\nSpMM (GCN operator, {args.hidden} columns): {seconds * 1e3:.0f} ms, {gflops:.2f} GFLOP/s, "
          f"{gbs:.1f} GB/s effective = {gbs / bandwidth:.0%} of measured copy bandwidth {bandwidth:.1f} GB/s")

    from gnnmesh.transforms import reorder
    print("\n| node order | SpMM (ms) | vs. given order |")
    print("|---|---|---|")
    base_ms = spmm_figures(graph, args.hidden)[0] * 1e3
    print(f"| as generated | {base_ms:.0f} | 1.00x |")
    for method in ("degree", "rcm"):
        start = time.perf_counter()
        g = reorder(graph, method)
        cost = time.perf_counter() - start
        ms = spmm_figures(g, args.hidden)[0] * 1e3
        print(f"| {method} | {ms:.0f} | {ms / base_ms:.2f}x (reordering took {cost:.1f}s) |")


def main():
    parser = argparse.ArgumentParser(description="GCN epoch: gnnmesh vs PyG")
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per process")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2, help="processes per framework")
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=["gnnmesh", "pyg"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.spec is None:
        args.spec = (f"rmat:nodes={args.nodes},edges={args.edges},features={args.features},"
                     f"classes={args.classes}")
    (worker if args.worker else driver)(args)


if __name__ == "__main__":
    main()

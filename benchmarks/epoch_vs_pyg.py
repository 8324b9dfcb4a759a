"""Training epochs of every model, gnnmesh against PyG on its fastest path here.

GCN, GraphSAGE (mean) and GAT (4 heads) epochs (forward, backward, Adam step; 2 layers, no
dropout) on an R-MAT graph, against PyG's ``GCNConv`` (``cached=True``), ``SAGEConv`` and
``GATConv``, all given the torch CSR adjacency; and Cora end to end (GCN recipe: hidden 16,
dropout 0.5; a training step and an evaluation per epoch). Same graph, same threads.

Each framework runs in its own fresh process, so that its peak memory and kernel (sys) time
are its own; processes alternate (gnnmesh, PyG, gnnmesh, ...). A process's figure is the
median of its timed epochs; the table gives the median over processes and their range, and
the kernel (sys) time, page faults mostly, from ``getrusage``. Then the SpMM kernels'
throughput against the machine's measured copy bandwidth (kernels.py).

    python benchmarks/epoch_vs_pyg.py --data-root DIR          # 1M nodes, 10M edges, 128 features
    python benchmarks/epoch_vs_pyg.py --nodes 100000 --edges 1000000 --data-root DIR   # quick look
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

from driver import Spread
from kernels import copy_bandwidth_gbs, kernel_table

FRAMEWORKS = ("gnnmesh", "pyg")
# case -> (gnnmesh model, hidden width per head, heads, dropout, evaluate every epoch)
CASES = {
    "gcn": ("gcn", 128, 1, 0.0, False),
    "sage": ("sage", 128, 1, 0.0, False),
    "gat": ("gat", 8, 4, 0.0, False),
    "cora": ("gcn", 16, 1, 0.5, True),
}


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load(args, case: str):
    from gnnmesh import datasets
    return datasets.load("cora" if case == "cora" else args.spec, root=args.data_root)


# -- workers: one framework and one case per process ------------------------------------------
def gnnmesh_epoch(graph, args):
    from gnnmesh.config import Config
    from gnnmesh.ops import buffers
    from gnnmesh.train import Trainer
    buffers.pool(True)  # as `gnnmesh train` runs it
    model, hidden, heads, dropout, evaluate = CASES[args.case]
    attention = {"heads": heads, "attn_dropout": 0.0} if model == "gat" else {}  # gat's own options
    cfg = Config.of(model=model, hidden=hidden, layers=2, dropout=dropout, lr=0.01, weight_decay=5e-4, **attention)
    trainer = Trainer(cfg, graph)
    if evaluate:
        return lambda: (trainer.train_step(), trainer.evaluate())
    return trainer.train_step


def pyg_model(case: str, in_dim: int, classes: int):
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv
    _, hidden, heads, dropout, _ = CASES[case]

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            if case == "gat":
                self.conv1 = GATConv(in_dim, hidden, heads=heads)
                self.conv2 = GATConv(hidden * heads, classes, heads=1, concat=False)
            elif case == "sage":
                self.conv1, self.conv2 = SAGEConv(in_dim, hidden), SAGEConv(hidden, classes)
            else:
                self.conv1 = GCNConv(in_dim, hidden, cached=True)
                self.conv2 = GCNConv(hidden, classes, cached=True)
            self.act = torch.nn.functional.elu if case == "gat" else torch.relu

        def forward(self, x, adj_t):
            x = torch.nn.functional.dropout(x, dropout, self.training)
            x = self.act(self.conv1(x, adj_t))
            return self.conv2(torch.nn.functional.dropout(x, dropout, self.training), adj_t)

    return Net()


def pyg_epoch(graph, args):
    import torch.nn.functional as F
    n = graph.num_nodes
    adj_t = torch.sparse_csr_tensor(graph.adj.indptr, graph.adj.indices, torch.ones(graph.num_edges),
                                    size=(n, n))
    x, y = graph.x, graph.y
    x = (x.to_dense() if x.layout != torch.strided else x).float()  # as gnnmesh's trainer takes them
    masks = (graph.train_mask, graph.val_mask, graph.test_mask)
    torch.manual_seed(0)
    model = pyg_model(args.case, x.shape[1], graph.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def train():
        model.train()
        out = model(x, adj_t)
        loss = F.cross_entropy(out[masks[0]], y[masks[0]])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss)

    @torch.no_grad()
    def evaluate():
        model.eval()
        correct = model(x, adj_t).argmax(dim=-1) == y
        return [float(correct[m].float().mean()) for m in masks]

    return (lambda: (train(), evaluate())) if CASES[args.case][4] else train


def worker(args):
    torch.set_num_threads(args.threads)
    graph = load(args, args.case)
    base = rss_mib()
    step = (pyg_epoch if args.worker == "pyg" else gnnmesh_epoch)(graph, args)
    for _ in range(args.warmup):
        step()
    times = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(args.epochs):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"epoch": statistics.median(times), "sys": (after.ru_stime - before.ru_stime) / args.epochs,
                      "peak_mib": peak_rss_mib(), "base_mib": base}))


# -- the driver ----------------------------------------------------------------------------------
def spawn(name: str, case: str, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", name, "--case", case, "--spec", args.spec,
           "--threads", str(args.threads), "--epochs", str(args.epochs), "--warmup", str(args.warmup)]
    if args.data_root:
        cmd += ["--data-root", args.data_root]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(case: str, args) -> dict:
    """``{framework: {figure: Spread over processes}}`` for one case, processes alternating."""
    runs = {name: [] for name in FRAMEWORKS}
    for _ in range(args.rounds):
        for name in runs:
            runs[name].append(spawn(name, case, args))
    return {name: {key: Spread.of(r[key] for r in records) for key in ("epoch", "sys", "peak_mib")}
            for name, records in runs.items()}


def driver(args):
    print(f"graph: {args.spec}  threads: {args.threads}  torch {torch.__version__}  "
          f"processes: {args.rounds} per framework and case, {args.epochs} timed epochs each")
    graph = load(args, "gcn")  # generate and cache once, so the workers only read the cache
    print(f"  {graph!r}")
    print("\n| case | framework | epoch s, median (min-max) | sys s per epoch | peak RSS MiB "
          "| gnnmesh / PyG: time | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for case in args.cases.split(","):
        fig = compare(case, args)
        for name, f in fig.items():
            ratio = ("", "") if name == "pyg" else (
                f"**{f['epoch'].median / fig['pyg']['epoch'].median:.2f}x**",
                f"**{f['peak_mib'].median / fig['pyg']['peak_mib'].median:.2f}x**")
            print(f"| {case} | {name} | {f['epoch'].format(3)} | {f['sys'].format(3)} | "
                  f"{f['peak_mib'].format(0)} | {ratio[0]} | {ratio[1]} |", flush=True)

    torch.set_num_threads(args.threads)
    kernel_table(graph, args.features, 4, args.repeats, copy_bandwidth_gbs(),
                 ops=("SpMM fwd", "SpMM bwd"), candidates=("compiled",))


def main():
    parser = argparse.ArgumentParser(description="training epochs of every model: gnnmesh vs PyG")
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--data-root", default=os.environ.get("GNNMESH_DATA"),
                        help="directory holding Cora (default: $GNNMESH_DATA)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per process")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="processes per framework and case")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per kernel")
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--case", choices=list(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.spec is None:
        args.spec = (f"rmat:nodes={args.nodes},edges={args.edges},features={args.features},"
                     f"classes={args.classes}")
    (worker if args.worker else driver)(args)


if __name__ == "__main__":
    main()

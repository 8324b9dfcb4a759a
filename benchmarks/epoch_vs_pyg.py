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
    python benchmarks/epoch_vs_pyg.py --cases gcn,sage --phases                        # and per phase

``--phases`` splits the timed epochs of every process by phase (``phases.py``: aggregation,
linear maps, elementwise ops, optimizer step, the rest; each with the sys time inside it).
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
from contextlib import nullcontext

import torch

from driver import Spread, epoch_header, epoch_row
from kernels import copy_bandwidth_gbs, kernel_table
from phases import PHASES, PhaseClock

FRAMEWORKS = ("gnnmesh", "pyg")
# case -> (gnnmesh model, hidden width per head, heads, dropout, evaluate every epoch)
CASES = {
    "gcn": ("gcn", 128, 1, 0.0, False),
    "sage": ("sage", 128, 1, 0.0, False),
    "gat": ("gat", 8, 4, 0.0, False),
    "cora": ("gcn", 16, 1, 0.5, True),
}
PYG_LAYERS = {"gcn": "GCNConv", "sage": "SAGEConv", "gat": "GATConv", "cora": "GCNConv"}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load(args, case: str):
    from gnnmesh import datasets
    return datasets.load("cora" if case == "cora" else args.spec, root=args.data_root)


# -- workers: one framework and one case per process ------------------------------------------
def gnnmesh_epoch(graph, args):
    model, hidden, heads, dropout, evaluate = CASES[args.case]
    attention = {"heads": heads, "attn_dropout": 0.0} if model == "gat" else {}  # gat's own options
    return gnnmesh_step(graph, evaluate, model=model, hidden=hidden, layers=2, dropout=dropout, lr=0.01,
                        weight_decay=5e-4, **attention)


def gnnmesh_step(graph, evaluate: bool, **fields):
    """A gnnmesh training epoch (and an evaluation with it when ``evaluate``) of the model
    ``fields`` configure, the buffer pool on as `gnnmesh train` runs it."""
    from gnnmesh.config import Config
    from gnnmesh.ops import buffers
    from gnnmesh.train import Trainer
    buffers.pool(True)
    trainer = Trainer(Config.of(**fields), graph)
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
    n = graph.num_nodes
    adj_t = torch.sparse_csr_tensor(graph.adj.indptr, graph.adj.indices, torch.ones(graph.num_edges),
                                    size=(n, n))
    x, y = graph.x, graph.y
    x = (x.to_dense() if x.layout != torch.strided else x).float()  # as gnnmesh's trainer takes them
    masks = (graph.train_mask, graph.val_mask, graph.test_mask)
    torch.manual_seed(0)
    model = pyg_model(args.case, x.shape[1], graph.num_classes)
    return pyg_step(model, lambda: model(x, adj_t), y, masks, CASES[args.case][4])


def pyg_step(model, forward, y, masks, evaluate: bool):
    """A PyG training epoch (Adam, lr 0.01, weight decay 5e-4, cross-entropy on ``masks[0]``)
    of ``model``, whose ``forward()`` gives the logits of the rows ``y`` labels; with an
    evaluation of every mask when ``evaluate``. Call it once before timing: a lazy module
    takes its shapes there, so the optimizer is built on the first call."""
    import torch.nn.functional as F
    opt = []

    def train():
        model.train()
        out = forward()
        loss = F.cross_entropy(out[masks[0]], y[masks[0]])
        if not opt:
            opt.append(torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4))
        opt[0].zero_grad(set_to_none=True)
        loss.backward()
        opt[0].step()
        return float(loss)

    @torch.no_grad()
    def evaluate_all():
        model.eval()
        correct = forward().argmax(dim=-1) == y
        return [float(correct[m].float().mean()) for m in masks]

    return (lambda: (train(), evaluate_all())) if evaluate else train


def worker(args):
    torch.set_num_threads(args.threads)
    graph = load(args, args.case)
    # PyG's GAT works on per-edge data, the graph's entries and a self loop per node
    edge_rows = (graph.num_edges, graph.num_edges + graph.num_nodes) if args.worker == "pyg" else ()
    measure(args, lambda: (pyg_epoch if args.worker == "pyg" else gnnmesh_epoch)(graph, args), edge_rows)


def measure(args, make_step, edge_rows=()):
    """Build the step (``make_step()``), run ``args.warmup`` epochs, time ``args.epochs``, and
    print this process's figures as one JSON line: the median epoch, the kernel (sys) time
    per epoch and the peak resident memory; with ``args.phases``, the timed epochs split by
    phase as well (``phases.PhaseClock``; ``edge_rows``: its rows of per-edge data)."""
    step = make_step()
    for _ in range(args.warmup):
        step()
    times = []
    clock = PhaseClock(edge_rows) if getattr(args, "phases", False) else nullcontext()
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(args.epochs):
        start = time.perf_counter()
        with clock:
            step()
        times.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    split = {"phases": clock.figures(args.epochs)} if isinstance(clock, PhaseClock) else {}
    print(json.dumps({"epoch": statistics.median(times), "sys": (after.ru_stime - before.ru_stime) / args.epochs,
                      "peak_mib": peak_rss_mib(), **split}))


# -- the driver ----------------------------------------------------------------------------------
def spawn(name: str, case: str, args, script: str = __file__) -> dict:
    """One worker process of ``script`` (this file, or a benchmark built on it, which takes
    the same flags) for one framework and case; its figures."""
    cmd = [sys.executable, script, "--worker", name, "--case", case, "--spec", args.spec,
           "--threads", str(args.threads), "--epochs", str(args.epochs), "--warmup", str(args.warmup)]
    if args.data_root:
        cmd += ["--data-root", args.data_root]
    if getattr(args, "phases", False):
        cmd += ["--phases"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        lines = out.stderr.strip().splitlines()
        raise SystemExit(f"{name} worker, case {case}: {lines[-1] if lines else f'exit status {out.returncode}'}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(case: str, args, script: str = __file__) -> dict:
    """``{framework: {figure: Spread over processes}}`` for one case, processes alternating;
    with ``--phases``, ``"phases"``: ``{phase: Spread}`` as well."""
    runs = {name: [] for name in FRAMEWORKS}
    for _ in range(args.rounds):
        for name in runs:
            runs[name].append(spawn(name, case, args, script))
    out = {}
    for name, records in runs.items():
        out[name] = {key: Spread.of(r[key] for r in records) for key in ("epoch", "sys", "peak_mib")}
        if "phases" in records[0]:
            out[name]["phases"] = {key: Spread.of(r["phases"][key] for r in records) for key in records[0]["phases"]}
    return out


def pyg_label(case: str, name: str) -> str:
    return name if name == "gnnmesh" else f"PyG {PYG_LAYERS[case]}"


def epoch_table(cases, args, script: str = __file__, label=pyg_label) -> dict:
    """The table of epoch time, sys time and peak memory of every case, each framework's row
    labelled ``label(case, framework)``, with the gnnmesh / PyG ratios on gnnmesh's row (the
    columns of ``driver.epoch_row``, as gpu.py prints them); ``{case: compare's figures}``."""
    epoch_header("RSS")
    figures = {}
    for case in cases:
        fig = figures[case] = compare(case, args, script)
        for name, f in fig.items():
            against = None if name == "pyg" else (fig["pyg"]["epoch"], fig["pyg"]["peak_mib"])
            epoch_row(case, label(case, name), f["epoch"], f["sys"], f["peak_mib"], against)
    return figures


def phase_table(figures: dict) -> None:
    """Each case's epoch split by phase (``phases.PhaseClock``), gnnmesh's row beside PyG's:
    every cell the phase's wall seconds per epoch, median over the processes, and the kernel
    (sys) seconds spent inside it."""
    print("\n| model | framework | epoch s | " + " | ".join(PHASES) + " |")
    print("|" + "---|" * (3 + len(PHASES)))
    for case, fig in figures.items():
        for name, f in fig.items():
            ph = f["phases"]
            cells = [f"{ph[p].median:.3f} (sys {ph[p + ' sys'].median:.3f})" for p in PHASES]
            print(f"| {case} | {pyg_label(case, name)} | {ph['epoch'].median:.3f} (sys {ph['epoch sys'].median:.3f}) | "
                  + " | ".join(cells) + " |", flush=True)


def driver(args):
    print(f"graph: {args.spec}  threads: {args.threads}  torch {torch.__version__}  "
          f"processes: {args.rounds} per framework and case, {args.epochs} timed epochs each")
    graph = load(args, "gcn")  # generate and cache once, so the workers only read the cache
    print(f"  {graph!r}")
    figures = epoch_table(args.cases.split(","), args)
    if args.phases:
        phase_table(figures)

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
    parser.add_argument("--phases", action="store_true",
                        help="split the timed epochs by phase (aggregate, linear maps, elementwise, optimizer)")
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

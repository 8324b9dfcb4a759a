"""Link prediction's training epoch, gnnmesh against PyG: time and peak memory, side by side.

The recipe both run (PyG's ``examples/link_pred.py``, full graph): a 2-layer GCN encoder
(features -> 128 -> 64, ReLU, no dropout), the dot-product decoder, binary cross-entropy
over every training positive and one negative per positive (its source kept, its
destination drawn uniformly over the nodes, afresh each epoch), Adam at 0.01. An epoch is
one optimizer step: the encoder over the graph of training edges, the decoder over all
pairs, backward and the step; no evaluation.

Both sides train on the same split (gnnmesh's ``split_edges``: 5% of the edges held out to
validate and 10% to test, drawn from the seed), so the graph the encoder runs on and the
positives it scores are the same: gnnmesh's ``LinkTrainer`` takes the split as given, PyG
runs ``GCNConv`` (``cached=True``) over the torch CSR adjacency of the training edges and
draws its negatives with ``torch.randint`` (``--pyg-negatives sampling``: PyG's
``negative_sampling``, which also avoids known edges, as the example does).

Each framework runs in its own fresh process, alternating (gnnmesh, PyG, gnnmesh, ...).
A process loads the graph and computes the split, then restarts its resident-memory
high-water mark (``/proc/self/clear_refs``): its "peak" is the highest resident memory
from there on (the trainer's setup and every epoch), its "base" the memory the loaded graph
and split already held. Warm-up epochs are dropped; a process's epoch time (wall clock) and
CPU time (``time.process_time``: every thread's, steadier than the wall clock on a machine
others share) are the medians of its timed epochs; the table gives the median over
processes and their range.

    python benchmarks/link_speed.py                                   # R-MAT 1M nodes, 10M edges
    python benchmarks/link_speed.py --nodes 100000 --edges 1000000    # a quick look
    python benchmarks/link_speed.py --partition 2                     # also gnnmesh partition, 2 ranks

``--partition P`` adds gnnmesh's partition strategy on P ranks (``gnnmesh train --task
link``, one process per rank): its epoch time, and the largest rank's peak over the whole run
(the split included, as ``gnnmesh train`` reports it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

from driver import Spread, TrainFailed, epochs, spread, train

FRAMEWORKS = ("gnnmesh", "pyg")
RECIPE = {"hidden": 128, "embedding_width": 64, "lr": 0.01}
LINK_SPLIT = "valid=0.05,test=0.10"
SEED = 0


def status_mib(field: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def restart_peak() -> None:
    """Restart this process's resident high-water mark (VmHWM) from its present size."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def load_split(args):
    from gnnmesh import datasets
    from gnnmesh.link.split import parse_fractions, split_edges
    graph = datasets.load(args.spec)
    return graph, split_edges(graph, parse_fractions(LINK_SPLIT), SEED, 1)


# -- workers: one framework per process ---------------------------------------------------------
def gnnmesh_epoch(graph, split, args):
    from gnnmesh.config import Config
    from gnnmesh.link.trainer import LinkTrainer
    from gnnmesh.ops import buffers
    buffers.pool(True)  # as `gnnmesh train` runs it
    config = Config.of(task="link", model="gcn", layers=2, dropout=0.0, weight_decay=0.0, seed=SEED,
                       negatives=1, decoder="dot", link_loss="bce", eval_negatives=1, link_split=LINK_SPLIT,
                       **RECIPE)
    trainer = LinkTrainer(config, graph, split=split)

    def step():
        trainer.epoch += 1
        return trainer.train_step()

    return step


def pyg_epoch(graph, split, args):
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv
    from torch_geometric.utils import negative_sampling

    g = split.graph
    n = g.num_nodes
    adj_t = torch.sparse_csr_tensor(g.adj.indptr, g.adj.indices, torch.ones(len(g.adj.indices)), size=(n, n))
    x = (g.x.to_dense() if g.x.layout != torch.strided else g.x).float()
    pos = split.train
    edge_index = torch.stack([g.adj.indices, g.adj.row()]) if args.pyg_negatives == "sampling" else None
    torch.manual_seed(SEED)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GCNConv(x.shape[1], RECIPE["hidden"], cached=True)
            self.conv2 = GCNConv(RECIPE["hidden"], RECIPE["embedding_width"], cached=True)

        def forward(self, x, adj_t):
            return self.conv2(self.conv1(x, adj_t).relu(), adj_t)

    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=RECIPE["lr"])

    def step():
        model.train()
        opt.zero_grad(set_to_none=True)
        if edge_index is None:
            neg = torch.stack([pos[0], torch.randint(n, (pos.shape[1],))])
        else:
            neg = negative_sampling(edge_index, num_nodes=n, num_neg_samples=pos.shape[1], method="sparse")
        z = model(x, adj_t)
        pairs = torch.cat([pos, neg], dim=1)
        scores = (z[pairs[0]] * z[pairs[1]]).sum(-1)
        labels = torch.cat([torch.ones(pos.shape[1]), torch.zeros(neg.shape[1])])
        loss = F.binary_cross_entropy_with_logits(scores, labels)
        loss.backward()
        opt.step()
        return float(loss)

    return step


def worker(args):
    torch.set_num_threads(args.threads)
    graph, split = load_split(args)
    base = status_mib("VmRSS")
    restart_peak()
    step = (pyg_epoch if args.worker == "pyg" else gnnmesh_epoch)(graph, split, args)
    for _ in range(args.warmup):
        step()
    times, cpu = [], []
    for _ in range(args.epochs):
        start, start_cpu = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    print(json.dumps({"epoch": statistics.median(times), "cpu": statistics.median(cpu),
                      "peak_mib": status_mib("VmHWM"), "base_mib": base}))


# -- the driver ----------------------------------------------------------------------------------
def spawn(name: str, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", name, "--spec", args.spec, "--threads", str(args.threads),
           "--epochs", str(args.epochs), "--warmup", str(args.warmup), "--pyg-negatives", args.pyg_negatives]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def partition_run(args) -> dict:
    """gnnmesh's partition strategy on ``args.partition`` ranks, one ``gnnmesh train`` run."""
    flags = ["--task", "link", "--dataset", args.spec, "--model", "gcn", "--layers", 2, "--dropout", 0,
             "--weight-decay", 0, "--seed", SEED, "--negatives", 1, "--decoder", "dot", "--link-loss", "bce",
             "--eval-negatives", 1, "--link-split", LINK_SPLIT, "--hidden", RECIPE["hidden"],
             "--embedding-width", RECIPE["embedding_width"], "--lr", RECIPE["lr"], "--strategy", "partition",
             "--nproc", args.partition, "--epochs", args.warmup + args.epochs, "--eval-every", 1000]
    records = epochs(train(flags), first=args.warmup)
    return {"epoch": spread(records, "epoch_time").median, "peak_mib": records[-1]["peak_rss_mib_max"]}


def driver(args):
    from gnnmesh import datasets
    print(f"graph: {args.spec}  threads: {args.threads}  torch {torch.__version__}  processes: {args.rounds} "
          f"per framework, {args.warmup} warm-up and {args.epochs} timed epochs each; PyG negatives: "
          f"{args.pyg_negatives}")
    print(f"  {datasets.load(args.spec)!r}")  # generate and cache once, so the workers only read the cache
    runs = {name: [] for name in FRAMEWORKS}
    names = list(FRAMEWORKS) + ([f"gnnmesh partition {args.partition}"] if args.partition else [])
    for name in names[len(FRAMEWORKS):]:
        runs[name] = []
    for _ in range(args.rounds):
        for name in names:
            try:
                runs[name].append(partition_run(args) if "partition" in name else spawn(name, args))
                print(f"  {name}: {json.dumps(runs[name][-1])}", file=sys.stderr, flush=True)
            except (TrainFailed, subprocess.CalledProcessError) as exc:
                print(f"  {name}: failed: {getattr(exc, 'stderr', None) or exc}", file=sys.stderr)
    fig = {name: {key: Spread.of(r.get(key, float("nan")) for r in records) for key in ("epoch", "cpu", "peak_mib")}
           for name, records in runs.items() if records}
    if "base_mib" in (runs["gnnmesh"] or [{}])[0]:
        print(f"  graph and split loaded: {runs['gnnmesh'][0]['base_mib']:,.0f} MiB resident (gnnmesh), "
              f"{runs['pyg'][0]['base_mib']:,.0f} MiB (PyG)" if runs["pyg"] else "")
    print("\n| framework | epoch s, median (min-max) | CPU s per epoch | peak RSS MiB | gnnmesh / PyG: time "
          "| CPU time | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for name, f in fig.items():
        ratio = ("", "", "") if name == "pyg" or "pyg" not in fig else tuple(
            f"**{f[key].median / fig['pyg'][key].median:.2f}x**" for key in ("epoch", "cpu", "peak_mib"))
        print(f"| {'PyG' if name == 'pyg' else name} | {f['epoch'].format(3)} | {f['cpu'].format(3)} | "
              f"{f['peak_mib'].format(0)} | {' | '.join(ratio)} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--epochs", type=int, default=5, help="timed epochs per process")
    parser.add_argument("--warmup", type=int, default=2, help="epochs run before timing, dropped")
    parser.add_argument("--rounds", type=int, default=3, help="processes per framework")
    parser.add_argument("--partition", type=int, default=0, metavar="P",
                        help="also gnnmesh's partition strategy on P ranks (default: not run)")
    parser.add_argument("--pyg-negatives", choices=("uniform", "sampling"), default="uniform",
                        help="PyG's negatives: torch.randint destinations (as gnnmesh draws them) or "
                             "negative_sampling (which also avoids the graph's edges)")
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.spec is None:
        args.spec = f"rmat:nodes={args.nodes},edges={args.edges},features={args.features}"
    (worker if args.worker else driver)(args)


if __name__ == "__main__":
    main()

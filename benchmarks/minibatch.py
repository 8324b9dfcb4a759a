"""Mini-batch training: sampling throughput, and accuracy against full-graph training.

    python benchmarks/minibatch.py --data-root ../shared/data \
        [--datasets github,facebook,rmat:nodes=1000000,edges=10000000] [--fanouts 25,10]
        [--batch-size 1024] [--batches 20] [--repeats 3] [--epochs 10] [--full-epochs 100]

* sampling: sampled edges per second of ``NeighborSampler`` over ``--batches`` batches of
  random training seeds, median (range) over ``--repeats``; PyG's ``NeighborLoader`` on the
  same graph, fanouts and batch size beside it where PyG can sample (it needs pyg-lib or
  torch-sparse);
* accuracy: GraphSAGE trained on mini-batches (``--epochs``) against full-graph GraphSAGE
  (``--full-epochs``), test accuracy at the best validation epoch, and the epoch times.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from driver import TrainFailed, split_specs, train  # noqa: E402

from gnnmesh import datasets  # noqa: E402
from gnnmesh.sampling import NeighborSampler, parse_fanouts  # noqa: E402
from gnnmesh.view import OPERATORS  # noqa: E402

DEFAULT = "github,facebook,rmat:nodes=1000000,edges=10000000"


def ours(graph, fanouts: list, batch_size: int, batches: int) -> float:
    """Sampled edges per second over ``batches`` batches of random training seeds."""
    sampler = NeighborSampler(OPERATORS["mean"](graph.adj), fanouts, seed=0)
    train = torch.nonzero(graph.train_mask).flatten().numpy()
    rng = np.random.default_rng(0)
    edges, start = 0, time.perf_counter()
    for step in range(batches):
        edges += sampler.sample(rng.choice(train, min(batch_size, len(train)), replace=False), 1, step).sampled_entries()
    return edges / (time.perf_counter() - start)


def pyg(graph, fanouts: list, batch_size: int, batches: int):
    """PyG's NeighborLoader on the same graph (sampled edges per second), or why it cannot run."""
    warnings.filterwarnings("ignore", message=".*pyg-lib.*")
    try:
        from torch_geometric.data import Data
        from torch_geometric.loader import NeighborLoader
        adj = graph.adj
        rows = torch.repeat_interleave(torch.arange(adj.shape[0]), adj.indptr.diff())
        data = Data(edge_index=torch.stack([adj.indices, rows]), num_nodes=graph.num_nodes)
        loader = NeighborLoader(data, num_neighbors=fanouts, batch_size=batch_size, shuffle=True,
                                input_nodes=torch.nonzero(graph.train_mask).flatten())
        edges, start = 0, time.perf_counter()
        for step, batch in enumerate(loader):
            if step == batches:
                break
            edges += batch.edge_index.shape[1]
        return edges / (time.perf_counter() - start)
    except ImportError as err:
        return f"unavailable ({err})"


def median_range(values: list) -> str:
    return f"{statistics.median(values) / 1e6:.2f} ({min(values) / 1e6:.2f}-{max(values) / 1e6:.2f})"


def accuracy(spec: str, root, fanouts: str, batch_size: int, epochs: int, full_epochs: int) -> str:
    common = ["--dataset", spec, "--model", "sage", "--threads", 2]
    try:
        mini = train(common + ["--minibatch", "--fanouts", fanouts, "--batch-size", batch_size, "--epochs", epochs],
                     data_root=root)
        full = train(common + ["--epochs", full_epochs], data_root=root)
    except TrainFailed as err:
        return f"failed: {err}"

    def best(records):
        top = max(records, key=lambda r: (r["val_acc"], -r["epoch"]))
        return top["test_acc"], statistics.median(r["epoch_time"] for r in records[1:] or records)

    (m_acc, m_time), (f_acc, f_time) = best(mini), best(full)
    return (f"{100 * m_acc:>9.1f} {100 * f_acc:>9.1f} {100 * (m_acc - f_acc):>+7.1f} {m_time:>11.2f} "
            f"{f_time:>11.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default=DEFAULT)
    ap.add_argument("--data-root", dest="root")
    ap.add_argument("--fanouts", default="25,10")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--full-epochs", type=int, default=100)
    ap.add_argument("--skip-accuracy", action="store_true")
    args = ap.parse_args()
    fanouts = parse_fanouts(args.fanouts)
    specs = split_specs(args.datasets)
    print(f"sampling: fanouts {args.fanouts}, batch {args.batch_size}, {args.batches} batches; "
          f"M sampled edges/s, median (range) over {args.repeats} runs")
    print(f"{'graph':<34} {'gnnmesh':>20} {'PyG NeighborLoader':>20}")
    for spec in specs:
        graph = datasets.load(spec, root=args.root)
        mine = [ours(graph, fanouts, args.batch_size, args.batches) for _ in range(args.repeats)]
        theirs = [pyg(graph, fanouts, args.batch_size, args.batches) for _ in range(args.repeats)]
        cell = median_range(theirs) if all(isinstance(t, float) for t in theirs) else theirs[0]
        print(f"{spec:<34} {median_range(mine):>20} {cell:>20}")
    if args.skip_accuracy:
        return
    print(f"\naccuracy: GraphSAGE, mini-batch ({args.epochs} epochs, fanouts {args.fanouts}, batch "
          f"{args.batch_size}) against full-graph ({args.full_epochs} epochs); test % at the best validation "
          f"epoch; median epoch time, s")
    print(f"{'graph':<34} {'mini-batch':>9} {'full':>9} {'diff':>7} {'mini s/ep':>11} {'full s/ep':>11}")
    for spec in specs:
        if spec.startswith("rmat"):
            continue  # random labels: accuracy means nothing
        print(f"{spec:<34} {accuracy(spec, args.root, args.fanouts, args.batch_size, args.epochs, args.full_epochs)}")


if __name__ == "__main__":
    main()

"""Mini-batch training: sampling throughput, accuracy against full-graph training, and APT's
four strategies side by side with the dry run's prediction.

    python benchmarks/minibatch.py --data-root ../shared/data \
        [--datasets github,facebook,rmat:nodes=1000000,edges=10000000] [--fanouts 25,10]
        [--batch-size 1024] [--batches 20] [--repeats 3] [--epochs 10] [--full-epochs 100]
        [--sections sampling,accuracy,strategies,hosts] [--strategy-datasets github,rmat:...]
        [--ranks 4] [--cache-memory 64MiB] [--partitioner gp] [--runs 1]

* sampling: sampled edges per second of ``NeighborSampler`` over ``--batches`` batches of
  random training seeds, median (range) over ``--repeats``; PyG's ``NeighborLoader`` on the
  same graph, fanouts and batch size beside it where PyG can sample (it needs pyg-lib or
  torch-sparse);
* accuracy: GraphSAGE trained on mini-batches (``--epochs``) against full-graph GraphSAGE
  (``--full-epochs``), test accuracy at the best validation epoch, and the epoch times;
* strategies: GraphSAGE on ``--ranks`` ranks with each of gdp, nfp, snp and dnp (one epoch,
  the one the dry run samples; evaluation only after it), then ``--strategy auto``: the epoch
  time, the bytes read from the feature store and sent (ids, hidden rows), the cache hit rate,
  and the dry run's predicted time of what the strategies do differently (reads and
  exchanges, the slowest rank's) beside the measured time of the same (reads plus the time
  blocked in the two exchanges, the slowest rank's); median (range) over ``--runs`` runs.
* hosts: each strategy on ``--ranks`` ranks as one host, then as two hosts of half the ranks
  (two torchrun agents on this machine, so the "network" is loopback): epoch time, the
  largest rank's peak memory, and the bytes read from the other host; median (range) over
  ``--runs`` runs.
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
from driver import TrainFailed, split_specs, train, train_on_hosts  # noqa: E402

from gnnmesh import datasets  # noqa: E402
from gnnmesh.config import Config  # noqa: E402
from gnnmesh.partition import partition  # noqa: E402
from gnnmesh.planner import rates as machine_rates  # noqa: E402
from gnnmesh.planner.minibatch import rank_routes  # noqa: E402
from gnnmesh.planner.trace import build  # noqa: E402
from gnnmesh.validate import parse_bytes  # noqa: E402
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


STRATEGIES = ("gdp", "nfp", "snp", "dnp")


def strategy_runs(spec: str, args) -> dict:
    """{strategy: [epoch-1 record of each run]}, and "auto": the strategies auto picked."""
    common = ["--dataset", spec, "--model", "sage", "--minibatch", "--fanouts", args.fanouts, "--batch-size",
              args.batch_size, "--nproc", args.ranks, "--threads", 1, "--epochs", 2, "--eval-every", 1000,
              "--cache-memory", args.cache_memory]
    out = {s: [] for s in STRATEGIES + ("auto",)}
    for _ in range(args.runs):
        for name in STRATEGIES + ("auto",):
            flags = common + ["--strategy", name] + (["--partitioner", args.partitioner] if name in ("snp", "dnp", "auto")
                                                     else [])
            out[name].append(train(flags, data_root=args.root)[0])
    return out


def differing_seconds(record: dict) -> float:
    """Measured time of what the strategies do differently: the slowest rank's feature reads,
    plus the most any rank waited in the id and row exchanges."""
    return max(record["rank_load_seconds"]) + record["graph_wait_max"] + record["shuffle_wait_max"]


def planned_seconds(spec: str, args) -> dict:
    """{strategy: seconds} as ``gnnmesh plan --allow-sampling`` predicts the same job in one
    process: the same counts as the job's dry run, priced with this machine's probed rates
    (the planner's cache of them) instead of the job's own link probes."""
    graph = datasets.load(spec, root=args.root)
    config = Config.of(dataset=spec, model="sage", minibatch=True, strategy="auto", nproc=args.ranks,
                    fanouts=args.fanouts, batch_size=args.batch_size).resolved()
    net = build((graph.num_features, config.model.hidden, graph.num_classes), "sage")
    rates, network = machine_rates.this_machine("cpu", 1, args.ranks)
    owner = partition(graph, args.ranks, args.partitioner, epsilon=config.partition.epsilon, seed=config.training.seed).assignment
    predictions = rank_routes(graph, args.ranks, net, rates, network, args.ranks, fanouts=args.fanouts,
                              batch_size=args.batch_size, owner=owner, seed=config.training.seed,
                              cache_bytes=parse_bytes(args.cache_memory, "cache_memory"))
    return {p.name: p.time for p in predictions}


def strategy_table(spec: str, args) -> list:
    runs = strategy_runs(spec, args)
    planned = planned_seconds(spec, args)
    lines = [f"{spec}: {args.ranks} ranks, sage, fanouts {args.fanouts}, batch {args.batch_size}, cache "
             f"{args.cache_memory} per rank, vertices by {args.partitioner}; median (range) over {args.runs} runs; "
             f"planned: 'gnnmesh plan --allow-sampling' for the same job",
             f"{'strategy':>8} {'epoch s':>18} {'predicted s':>18} {'planned s':>10} {'measured s':>18} {'error':>7} "
             f"{'load MiB':>9} {'ids MiB':>8} {'rows MiB':>9} {'hit rate':>8}"]
    medians = {}
    for name in STRATEGIES:
        recs = runs[name]
        predicted = [next(p for p in r["dry_run"] if p["strategy"] == name)["predicted_time"] for r in recs]
        measured = [differing_seconds(r) for r in recs]
        epoch = [r["epoch_time"] for r in recs]
        medians[name] = statistics.median(epoch)
        error = statistics.median((p - m) / m for p, m in zip(predicted, measured))
        r = recs[len(recs) // 2]
        hits = r["cache_hits"] / max(r["cache_hits"] + r["cache_misses"], 1)
        lines.append(f"{name:>8} {spread_text(epoch):>18} {spread_text(predicted):>18} {planned[name]:>10.2f} "
                     f"{spread_text(measured):>18} "
                     f"{error:>+7.0%} {r['load_bytes'] / 2**20:>9.1f} {r['graph_bytes'] / 2**20:>8.1f} "
                     f"{r['shuffle_bytes'] / 2**20:>9.1f} {hits:>8.1%}")
    picked = [r["dry_run"] and min(r["dry_run"], key=lambda p: p["predicted_time"])["strategy"] for r in runs["auto"]]
    best = min(medians, key=medians.get)
    lines.append(f"auto picked {', '.join(picked)} (epoch {spread_text([r['epoch_time'] for r in runs['auto']])} s); "
                 f"the plan picks {min(planned, key=planned.get)}; the measured fastest was {best} "
                 f"({medians[best]:.2f} s)")
    return lines


def hosts_table(spec: str, args) -> list:
    """Each strategy on one host and on two: what spreading the features over hosts costs and saves."""
    common = ["--dataset", spec, "--model", "sage", "--minibatch", "--fanouts", args.fanouts, "--batch-size",
              args.batch_size, "--threads", 1, "--epochs", 2, "--eval-every", 1000, "--cache-memory",
              args.cache_memory]
    half = args.ranks // 2
    lines = [f"{spec}: {args.ranks} ranks as 1 host and as 2 hosts of {half}, sage, fanouts {args.fanouts}, batch "
             f"{args.batch_size}, cache {args.cache_memory} per rank, vertices by {args.partitioner}; epoch 1, "
             f"median (range) over {args.runs} runs",
             f"{'strategy':>8} {'epoch s, 1 host':>18} {'2 hosts':>18} {'peak MiB, 1 host':>17} {'2 hosts':>17} "
             f"{'remote MiB':>11} {'sent MiB':>9}"]
    for name in STRATEGIES:
        flags = common + ["--strategy", name] + (["--partitioner", args.partitioner] if name in ("snp", "dnp") else [])
        one = [train(flags + ["--nproc", args.ranks], data_root=args.root)[0] for _ in range(args.runs)]
        two = [train_on_hosts(flags, 2, half, data_root=args.root)[0] for _ in range(args.runs)]
        r = two[len(two) // 2]
        lines.append(f"{name:>8} {spread_text([x['epoch_time'] for x in one]):>18} "
                     f"{spread_text([x['epoch_time'] for x in two]):>18} "
                     f"{spread_text([x['peak_rss_mib_max'] for x in one], 0):>17} "
                     f"{spread_text([x['peak_rss_mib_max'] for x in two], 0):>17} "
                     f"{r['remote_bytes'] / 2**20:>11.1f} {r['features_bytes'] / 2**20:>9.1f}")
    return lines


def spread_text(values: list, digits: int = 2) -> str:
    mid, low, high = statistics.median(values), min(values), max(values)
    return f"{mid:.{digits}f}" if len(values) == 1 else f"{mid:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


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
    ap.add_argument("--sections", default="sampling,accuracy,strategies")
    ap.add_argument("--strategy-datasets", dest="strategy_datasets", default="github,rmat:nodes=1000000,edges=10000000")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--cache-memory", dest="cache_memory", default="64MiB")
    ap.add_argument("--partitioner", default="gp")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    fanouts = parse_fanouts(args.fanouts)
    specs = split_specs(args.datasets)
    if "sampling" in sections:
        sampling(specs, fanouts, args)
    if "accuracy" in sections:
        accuracies(specs, args)
    for section, table in (("strategies", strategy_table), ("hosts", hosts_table)):
        if section in sections:
            for spec in split_specs(args.strategy_datasets):
                print()
                for line in table(spec, args):
                    print(line, flush=True)


def sampling(specs: list, fanouts: list, args) -> None:
    print(f"sampling: fanouts {args.fanouts}, batch {args.batch_size}, {args.batches} batches; "
          f"M sampled edges/s, median (range) over {args.repeats} runs")
    print(f"{'graph':<34} {'gnnmesh':>20} {'PyG NeighborLoader':>20}")
    for spec in specs:
        graph = datasets.load(spec, root=args.root)
        mine = [ours(graph, fanouts, args.batch_size, args.batches) for _ in range(args.repeats)]
        theirs = [pyg(graph, fanouts, args.batch_size, args.batches) for _ in range(args.repeats)]
        cell = median_range(theirs) if all(isinstance(t, float) for t in theirs) else theirs[0]
        print(f"{spec:<34} {median_range(mine):>20} {cell:>20}")


def accuracies(specs: list, args) -> None:
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

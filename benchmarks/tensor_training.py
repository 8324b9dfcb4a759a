"""Tensor parallelism against 1D partitioning, side by side at N ranks (NeutronTP's claims).

Each configuration is one ``gnnmesh train --nproc N`` run of a model under a strategy with
one schedule of its communication. Models: a 2-layer GCN, and its decoupled form
(``--decoupled --k 2``: the same 2-layer network on rows, then k = 2 propagation steps, as
many aggregations as the GCN has layers). Under ``--strategy tensor`` the GCN switches
layouts around every aggregation and the decoupled GCN once each way; either runs its
aggregation in chunks, one after the other or pipelined (``--pipeline``).

With ``--repeats R`` every configuration runs R times, the configurations taking turns, so
that a burst of load from elsewhere hits them alike. The table shows, over the measured
epochs of all its runs (first and last of each left out: warm-up and evaluation), the
median and min-max of the epoch time, of the compute time max/min across
ranks and of the time ranks were blocked on layout switches; the bytes moved per epoch and
the collective layout rounds per epoch (exact). For each pipelined run, "hidden" is the
share of the same model's unpipelined blocked time (medians) that pipelining removed.

    python benchmarks/tensor_training.py                          # R-MAT 10M edges, 4 ranks
    python benchmarks/tensor_training.py --dataset slashdot:random_labels=8 --data-root ../shared/data
    python benchmarks/tensor_training.py --only partition-rp,tensor-gcn,tensor-decoupled-gcn
"""

from __future__ import annotations

import argparse
import os
import sys

from driver import epochs, imbalance, spread, train
from gnnmesh import datasets


def configurations(chunks: int, nodes: int, k: int) -> dict:
    """{key: (strategy, model, schedule, flags)}."""
    tensor = ["--strategy", "tensor", "--chunk-size", str(max(1, -(-nodes // chunks)))]
    decoupled = ["--decoupled", "--k", str(k)]
    model, dmodel = "gcn", f"gcn --decoupled --k {k}"
    per_aggregation, once = "split + gather per aggregation", f"one split, {k} steps, one gather"
    return {
        "partition-rp": ("partition rp", model, "halo rows per layer", ["--strategy", "partition", "--partitioner", "rp"]),
        "partition-hp": ("partition hp", model, "halo rows per layer", ["--strategy", "partition", "--partitioner", "hp"]),
        "partition-rp-decoupled-gcn": ("partition rp", dmodel, "halo rows per step",
                                       ["--strategy", "partition", "--partitioner", "rp"] + decoupled),
        "tensor-gcn": ("tensor", model, per_aggregation, tensor + ["--no-pipeline"]),
        "tensor-gcn-pipelined": ("tensor", model, per_aggregation + ", pipelined", tensor + ["--pipeline"]),
        "tensor-decoupled-gcn": ("tensor", dmodel, once, tensor + decoupled + ["--no-pipeline"]),
        "tensor-decoupled-gcn-pipelined": ("tensor", dmodel, once + ", pipelined", tensor + decoupled + ["--pipeline"]),
    }


def summarize(kept: list) -> dict:
    return {"epoch": spread(kept, "epoch_time"), "mib": spread(kept, "bytes_total").median / 2**20,
            "rounds": spread(kept, "layout_rounds").median, "balance": spread(kept, imbalance),
            "blocked": spread(kept, "layout_wait_max"), "epochs": len(kept)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="rmat:nodes=1000000,edges=10000000,features=32")
    parser.add_argument("--data-root", default=os.environ.get("GNNMESH_DATA"))
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--k", type=int, default=2, help="propagation steps of the decoupled GCN")
    parser.add_argument("--chunks", type=int, default=8, help="aggregation chunks under --strategy tensor")
    parser.add_argument("--repeats", type=int, default=1, help="runs per configuration, taking turns")
    parser.add_argument("--only", help="comma-separated configurations to run, of: "
                                       + ", ".join(configurations(1, 1, 2)))
    args = parser.parse_args()

    graph = datasets.load(args.dataset, root=args.data_root)
    configs = configurations(args.chunks, graph.num_nodes, args.k)
    if args.only:
        keys = args.only.split(",")
        unknown = [key for key in keys if key not in configs]
        if unknown:
            parser.error(f"unknown configuration {unknown[0]!r}; choose from {', '.join(configs)}")
        configs = {key: configs[key] for key in keys}
    common = ["--dataset", args.dataset, "--nproc", args.nproc, "--epochs", args.epochs, "--model", "gcn",
              "--hidden", args.hidden, "--dropout", "0", "--eval-every", args.epochs, "--threads", "1"]
    kept = {key: [] for key in configs}
    for repeat in range(args.repeats):
        for key, (*_, flags) in configs.items():
            run = epochs(train(common + flags, data_root=args.data_root), first=1, last=1)
            kept[key] += run
            print(f"  run {repeat + 1}, {key}: {spread(run, 'epoch_time')} s/epoch", file=sys.stderr, flush=True)
    rows = {key: summarize(records) for key, records in kept.items()}

    first = next(iter(rows))
    base = rows[first]["epoch"].median
    runs = f"{args.repeats} runs taking turns, " if args.repeats > 1 else ""
    # a graph without features trains on its degree features: in-degree, and out-degree if directed
    width = graph.num_features if graph.x is not None else f"{1 + graph.directed} (degrees)"
    print(f"{args.dataset}: {graph.num_nodes} nodes, {graph.num_edges} edges; {args.nproc} ranks, one thread "
          f"each; GCN {width}-{args.hidden}-{graph.num_classes}, no dropout; {args.chunks} chunks; "
          f"{runs}{args.epochs} epochs each; median (min-max) of the {rows[first]['epochs']} epochs measured "
          f"(each run's first and last left out)\n")
    print(f"| strategy | model | schedule | epoch (s) | vs. {' '.join(configs[first][:2])} | MiB per epoch | "
          "layout rounds | "
          "compute max/min | blocked on layout (s) | hidden |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key, r in rows.items():
        strategy, model, schedule, _ = configs[key]
        hidden = "-"
        unpipelined = rows.get(key[:-len("-pipelined")]) if key.endswith("-pipelined") else None
        if unpipelined and unpipelined["blocked"].median > 0:
            hidden = f"{100 * (1 - r['blocked'].median / unpipelined['blocked'].median):.0f}%"
        rounds = f"{r['rounds']:.0f}" if r["rounds"] else "-"
        print(f"| {strategy} | {model} | {schedule} | {r['epoch']} | {r['epoch'].median / base:.2f}x | "
              f"{r['mib']:.1f} | {rounds} | {r['balance']} | {r['blocked']} | {hidden} |")


if __name__ == "__main__":
    main()

"""Tensor parallelism against 1D partitioning, side by side at N ranks (NeutronTP's claims).

Each configuration is one ``gnnmesh train --nproc N`` run; the table shows the median epoch
time (first and last epochs left out: warm-up and evaluation), bytes moved per epoch, the
collective layout rounds per epoch, compute time max/min across ranks, and the time ranks
spent blocked on layout switches. For each pipelined run, "hidden" is the share of the
same schedule's unpipelined blocked time that pipelining removed.

Naive strategies train a 2-layer GCN; ``tensor-decoupled`` trains its decoupled form with
k = 2 propagation steps (as many aggregations as the GCN has layers).

    python benchmarks/tensor_training.py                          # R-MAT 10M edges, 4 ranks
    python benchmarks/tensor_training.py --dataset slashdot --data-root ../shared/data
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gnnmesh import datasets


def configurations(chunks: int, nodes: int) -> list:
    size = str(max(1, -(-nodes // chunks)))
    tensor = ["--chunk-size", size]
    return [
        ("partition rp", ["--strategy", "partition", "--partitioner", "rp"]),
        ("partition hp", ["--strategy", "partition", "--partitioner", "hp"]),
        ("tensor", ["--strategy", "tensor", "--no-pipeline"] + tensor),
        ("tensor pipelined", ["--strategy", "tensor", "--pipeline"] + tensor),
        ("tensor-decoupled", ["--strategy", "tensor-decoupled", "--k", "2", "--no-pipeline"] + tensor),
        ("tensor-decoupled pipelined", ["--strategy", "tensor-decoupled", "--k", "2", "--pipeline"] + tensor),
    ]


def run(args, flags: list, metrics: Path) -> list:
    cmd = [sys.executable, "-m", "gnnmesh", "train", "--dataset", args.dataset, "--nproc", str(args.nproc),
           "--epochs", str(args.epochs), "--model", "gcn", "--hidden", str(args.hidden), "--dropout", "0",
           "--eval-every", str(args.epochs), "--threads", "1", "--metrics", str(metrics), "--quiet"] + flags
    if args.data_root:
        cmd += ["--data-root", args.data_root]
    subprocess.run(cmd, check=True)
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return records[1:-1] or records[-1:]


def summarize(records: list) -> dict:
    median = (lambda key: statistics.median(r.get(key, 0) for r in records))
    return {"epoch": median("epoch_time"), "mib": median("bytes_total") / 2**20,
            "rounds": median("layout_rounds"),
            "balance": statistics.median(r["compute_time_max"] / max(r["compute_time_min"], 1e-9) for r in records),
            "blocked": median("layout_wait_max")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="rmat:nodes=1000000,edges=10000000,features=32")
    parser.add_argument("--data-root", default=os.environ.get("GNNMESH_DATA"))
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--chunks", type=int, default=8, help="aggregation chunks for the tensor strategies")
    parser.add_argument("--only", help="comma-separated configuration names to run")
    args = parser.parse_args()

    graph = datasets.load(args.dataset, root=args.data_root)
    configs = configurations(args.chunks, graph.num_nodes)
    if args.only:
        keep = set(args.only.split(","))
        configs = [c for c in configs if c[0] in keep]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, flags) in enumerate(configs):
            rows[name] = summarize(run(args, flags, Path(tmp) / f"{i}.jsonl"))
            print(f"  {name}: {rows[name]['epoch']:.2f} s/epoch", file=sys.stderr, flush=True)

    base = next(iter(rows.values()))["epoch"]
    print(f"{args.dataset}: {graph.num_nodes} nodes, {graph.num_edges} edges; {args.nproc} ranks, "
          f"hidden {args.hidden}, {args.chunks} chunks, {args.epochs} epochs\n")
    print(f"| strategy | epoch (s) | vs. {next(iter(rows))} | MiB per epoch | layout rounds | "
          "compute max/min | blocked on layout (s) | hidden |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        hidden = "-"
        if name.endswith(" pipelined") and name[:-len(" pipelined")] in rows:
            serial = rows[name[:-len(" pipelined")]]["blocked"]
            hidden = f"{100 * (1 - r['blocked'] / serial):.0f}%" if serial > 0 else "-"
        rounds = f"{r['rounds']:.0f}" if r["rounds"] else "-"
        print(f"| {name} | {r['epoch']:.2f} | {r['epoch'] / base:.2f}x | {r['mib']:.1f} | {rounds} | "
              f"{r['balance']:.2f} | {r['blocked']:.2f} | {hidden} |")


if __name__ == "__main__":
    main()

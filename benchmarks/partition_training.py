"""Per-epoch training time at N ranks under each partitioner (RP, GP, HP), side by side.

Each configuration is one `gnnmesh train --nproc N --strategy partition` run; the table
shows the median epoch time, halo bytes per epoch and compute/communication time (min-max
over ranks), and each method's epoch time relative to RP.

    python benchmarks/partition_training.py                      # R-MAT, 2M edges, 4 ranks
    python benchmarks/partition_training.py --dataset facebook --data-root ../shared/data
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


def run(args, method: str, metrics: Path) -> list:
    cmd = [sys.executable, "-m", "gnnmesh", "train", "--dataset", args.dataset, "--nproc", str(args.nproc),
           "--strategy", "partition", "--partitioner", method, "--epochs", str(args.epochs),
           "--model", args.model, "--hidden", str(args.hidden), "--dropout", "0", "--eval-every",
           str(args.epochs), "--metrics", str(metrics), "--quiet"]
    if args.data_root:
        cmd += ["--data-root", args.data_root]
    subprocess.run(cmd, check=True)
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="rmat:nodes=200000,edges=2000000,features=64,classes=8")
    parser.add_argument("--data-root", default=os.environ.get("GNNMESH_DATA"))
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--model", default="gcn")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--methods", default="rp,gp,hp")
    args = parser.parse_args()

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in args.methods.split(","):
            records = run(args, method, Path(tmp) / f"{method}.jsonl")[1:]  # first epoch warms up
            rows[method] = {
                "epoch": statistics.median(r["epoch_time"] for r in records),
                "halo_mib": records[-1]["halo_bytes"] / 2**20,
                "compute": (min(r["compute_time_min"] for r in records), max(r["compute_time_max"] for r in records)),
                "comm": (min(r["comm_time_min"] for r in records), max(r["comm_time_max"] for r in records)),
            }
    base = rows.get("rp", next(iter(rows.values())))["epoch"]
    print(f"{args.dataset}, {args.nproc} ranks, {args.model} hidden {args.hidden}, {args.epochs} epochs "
          f"(median of all but the first)\n")
    print("| partitioner | epoch (s) | vs. RP | halo per epoch (MiB) | compute min-max (s) | comm min-max (s) |")
    print("|---|---|---|---|---|---|")
    for method, r in rows.items():
        print(f"| {method} | {r['epoch']:.3f} | {r['epoch'] / base:.2f}x | {r['halo_mib']:.1f} | "
              f"{r['compute'][0]:.3f}-{r['compute'][1]:.3f} | {r['comm'][0]:.3f}-{r['comm'][1]:.3f} |")


if __name__ == "__main__":
    main()

"""Per-epoch training time at N ranks under each partitioner (RP, GP, HP), side by side.

Each configuration is one `gnnmesh train --nproc N --strategy partition` run; the table
shows the epoch time (median and min-max over the epochs between the first, which warms up,
and the last, which also evaluates), halo bytes per training epoch, compute and
communication time (min-max over ranks and epochs), and each method's median epoch time
relative to RP's. With ``--repeats R`` every method runs R times, the methods
taking turns, and the figures cover the measured epochs of all its runs.

    python benchmarks/partition_training.py                      # R-MAT, 2M edges, 4 ranks
    python benchmarks/partition_training.py --dataset facebook --data-root ../shared/data
"""

from __future__ import annotations

import argparse
import os

from driver import epochs, spread, train


def run(args, method: str) -> list:
    return train(["--dataset", args.dataset, "--nproc", args.nproc, "--strategy", "partition",
                  "--partitioner", method, "--epochs", args.epochs, "--model", args.model, "--hidden",
                  args.hidden, "--dropout", "0", "--eval-every", args.epochs], data_root=args.data_root)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="rmat:nodes=200000,edges=2000000,features=64,classes=8")
    parser.add_argument("--data-root", default=os.environ.get("GNNMESH_DATA"))
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--model", default="gcn")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--methods", default="rp,gp,hp")
    parser.add_argument("--repeats", type=int, default=1, help="runs per method, taking turns")
    args = parser.parse_args()

    kept = {method: [] for method in args.methods.split(",")}
    for _ in range(args.repeats):
        for method in kept:
            kept[method] += epochs(run(args, method), first=1, last=1)
    rows = {}
    for method, records in kept.items():
        rows[method] = {
            "epoch": spread(records, "epoch_time"),
            "halo_mib": records[-1]["halo_bytes"] / 2**20,
            "compute": (min(r["compute_time_min"] for r in records), max(r["compute_time_max"] for r in records)),
            "comm": (min(r["comm_time_min"] for r in records), max(r["comm_time_max"] for r in records)),
        }
    base = rows.get("rp", next(iter(rows.values())))["epoch"].median
    runs = f"{args.repeats} runs each, taking turns, of " if args.repeats > 1 else ""
    print(f"{args.dataset}, {args.nproc} ranks, {args.model} hidden {args.hidden}, {runs}{args.epochs} epochs "
          f"(median and min-max of all but a run's first and last)\n")
    print("| partitioner | epoch (s) | vs. RP | halo per epoch (MiB) | compute min-max (s) | comm min-max (s) |")
    print("|---|---|---|---|---|---|")
    for method, r in rows.items():
        print(f"| {method} | {r['epoch'].format(3)} | {r['epoch'].median / base:.2f}x | {r['halo_mib']:.1f} | "
              f"{r['compute'][0]:.3f}-{r['compute'][1]:.3f} | {r['comm'][0]:.3f}-{r['comm'][1]:.3f} |")


if __name__ == "__main__":
    main()

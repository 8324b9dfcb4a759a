"""Peak memory per rank when every rank reads only its own part of the graph.

For each configuration: `gnnmesh partition ... --write-parts DIR` once (its time and peak
resident memory, measured by the kernel for that process), then `gnnmesh train --parts DIR
--nproc P` (each rank's peak resident memory from the per-epoch JSON lines). The single
process trains from the dataset. Each line shows the largest rank's peak, the sum over
ranks, both relative to the single process, the median epoch time, and the goal for 1D and
3D layouts: largest rank <= 1.25 x single / P + the halo rows it receives.

A process costs memory before it holds any data (the interpreter, torch's libraries, the
optimizer's code, the process group): the same run trains a 400-node graph from parts at
each P, and its largest rank is that start-up cost. The "net" columns subtract it (the
single process's from the single run, a rank's from the ranks'), which is the share of
memory that data and work take.

    python benchmarks/memory_scaling.py                                  # R-MAT 1M / 10M, 128 features
    python benchmarks/memory_scaling.py --ranks 4 --configs partition-gp,grid3d
    python benchmarks/memory_scaling.py --dataset rmat:nodes=100000,edges=1000000,features=64
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import driver
from driver import epochs, spread

CONFIGS = ("partition-rp", "partition-gp", "partition-hp", "tensor", "grid3d")


def measured(cmd: list) -> tuple:
    """Run ``cmd``; its wall time and its own peak resident memory in MiB (from wait4)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"failed (exit {proc.returncode}): {' '.join(cmd)}")
    return time.perf_counter() - start, usage.ru_maxrss / 1024  # ru_maxrss: KiB on Linux


def write_parts(args, config: str, ranks: int, out: Path) -> tuple:
    cmd = [sys.executable, "-m", "gnnmesh", "partition", "--dataset", args.dataset, "--write-parts", str(out)]
    if config == "grid3d":
        cmd += ["--strategy", "grid3d", "--grid", grid(ranks)]
    elif config == "tensor":
        cmd += ["--strategy", "tensor", "--parts", str(ranks)]
    else:
        cmd += ["--method", config.split("-")[1], "--parts", str(ranks)]
    return measured(cmd + data_root(args))


def grid(ranks: int) -> str:
    """The grid3d default: the most cubic grid."""
    from gnnmesh.layout.grid import most_cubic_grid
    dims = most_cubic_grid(ranks).dims()
    return ",".join(str(dims[a]) for a in "xyz")


def data_root(args) -> list:
    return ["--data-root", args.data_root] if args.data_root else []


def train(args, parts=None, strategy="single", ranks=1) -> list:
    flags = ["--epochs", args.epochs, "--hidden", args.hidden, "--eval-every", args.epochs]
    if parts is None:
        return driver.train(flags + ["--dataset", args.dataset], data_root=args.data_root)
    flags += ["--parts", parts, "--strategy", strategy, "--nproc", ranks]
    if strategy == "grid3d":
        flags += ["--grid", grid(ranks)]
    return driver.train(flags)


def halo_rows(parts: Path) -> int:
    """The most halo rows any rank of 1D parts receives per exchange (0 for other kinds)."""
    manifest = json.loads((parts / "manifest.json").read_text())
    if manifest["kind"] != "partition":
        return 0
    counts = manifest["structures"][manifest["operators"]["gcn"]["structure"]]["send_counts"]
    return max(sum(row[m] for row in counts) for m in range(len(counts)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="rmat:nodes=1000000,edges=10000000,features=128")
    parser.add_argument("--data-root", default=os.environ.get("GNNMESH_DATA"))
    parser.add_argument("--ranks", default="2,4,8")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        records = train(args)
        single = records[-1]["peak_rss_mib_max"]
        startup = {1: startup_cost(args, tmp, 1)}
        rows = [("single", 1, single, single, median_epoch(records), None, None, None)]
        features = None
        for ranks in map(int, args.ranks.split(",")):
            startup[ranks] = startup_cost(args, tmp, ranks)
            for config in args.configs.split(","):
                parts = tmp / f"{config}-{ranks}"
                seconds, prep_peak = write_parts(args, config, ranks, parts)
                strategy = config.split("-")[0]
                records = train(args, parts, strategy, ranks)
                features = features or json.loads((parts / "manifest.json").read_text())["num_features"]
                # each layer keeps the halo rows it received (input width, then hidden) for backward
                halo_mib = halo_rows(parts) * 4 * (features + args.hidden) / 2**20
                bound = 1.25 * single / ranks + halo_mib if strategy in ("partition", "grid3d") else None
                rows.append((config, ranks, records[-1]["peak_rss_mib_max"], records[-1]["peak_rss_mib_sum"],
                             median_epoch(records), seconds, prep_peak, bound))
                print(f"  done: {config} at {ranks} ranks", file=sys.stderr, flush=True)
    print(f"{args.dataset}, gcn hidden {args.hidden}, {args.epochs} epochs (epoch time: median of all "
          f"but the first); peaks are resident memory (VmHWM)\n")
    print("start-up cost of a process (largest rank training a 400-node graph): "
          + ", ".join(f"{startup[r]:,.0f} MiB at {r} rank{'s' if r > 1 else ''}" for r in sorted(startup)) + "\n")
    print("| run | ranks | largest rank (MiB) | vs. single | net vs. single | all ranks (MiB) | vs. single | "
          "epoch (s) | preprocessing (s) | preprocessing peak (MiB) | goal (MiB) | net goal (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    net_single = single - startup[1]
    for config, ranks, peak, total, epoch, seconds, prep, bound in rows:
        net = peak - startup[ranks]
        goal = "-" if bound is None else f"{bound:,.0f} ({'met' if peak <= bound else 'missed'})"
        net_bound = None if bound is None else bound - 1.25 * single / ranks + 1.25 * net_single / ranks
        net_goal = "-" if bound is None else f"{net_bound:,.0f} ({'met' if net <= net_bound else 'missed'})"
        prep_text = "-" if seconds is None else f"{seconds:.1f}"
        prep_peak = "-" if prep is None else f"{prep:,.0f}"
        print(f"| {config} | {ranks} | {peak:,.0f} | {peak / single:.2f}x | {net / net_single:.2f}x | "
              f"{total:,.0f} | {total / single:.2f}x | {epoch:.2f} | {prep_text} | {prep_peak} | {goal} | {net_goal} |")


def startup_cost(args, tmp: Path, ranks: int) -> float:
    """The largest rank's peak when the data is negligible: what a process costs by itself."""
    spec = "sbm:nodes=400,classes=3,features=8"
    if ranks == 1:
        small = argparse.Namespace(**{**vars(args), "dataset": spec, "data_root": None})
        return train(small)[-1]["peak_rss_mib_max"]
    parts = tmp / f"startup-{ranks}"
    measured([sys.executable, "-m", "gnnmesh", "partition", "--dataset", spec, "--method", "rp",
              "--parts", str(ranks), "--write-parts", str(parts)])
    return train(args, parts, "partition", ranks)[-1]["peak_rss_mib_max"]


def median_epoch(records: list) -> float:
    return spread(epochs(records, first=1), "epoch_time").median


if __name__ == "__main__":
    main()

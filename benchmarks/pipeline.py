"""From raw shards to a trained model with no process holding the whole graph, measured.

One run, on an R-MAT graph:

1. ``gnnmesh datasets --shard rmat:... --out g/ --shards S``   (one process)
2. ``gnnmesh partition --nproc P --input g/ --write-parts parts/ --partitioner M``
3. ``gnnmesh train --parts parts/ --nproc P``                  (GCN, from the parts)
4. ``gnnmesh train --dataset rmat:...``                          (the single process, the reference)

Every process's peak resident memory at every stage (the kernel's, for the one-process
stages; each rank's own, reported by gnnmesh, for the ranks), beside the single-process
training peak, and whether training from the parts matched the single process's losses.
``--scaling`` adds the preprocessing stages alone at growing edge counts (10 edges a node).

    python benchmarks/pipeline.py                                        # 2M nodes, 20M edges, P = 4
    python benchmarks/pipeline.py --nodes 200000 --edges 2000000         # a quick run
    python benchmarks/pipeline.py --scaling 1000000,2000000,4000000,8000000,16000000 --no-train
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import driver
from memory_scaling import measured

GOAL = 0.35  # no process above this fraction of the single-process training peak


def gnnmesh(*args) -> list:
    return [sys.executable, "-m", "gnnmesh", *map(str, args)]


def rank_peaks(cmd: list) -> tuple:
    """Run a ``partition --input`` command: its time and the peak of every rank (MiB)."""
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"failed (exit {out.returncode}): {' '.join(cmd)}\n{out.stderr}")
    line = next(line for line in out.stdout.splitlines() if "peak memory per rank" in line)
    peaks = [_mib(value, unit) for value, unit in re.findall(r"([\d,.]+) (B|KiB|MiB|GiB)", line.split("per rank")[1])]
    return time.perf_counter() - start, peaks


def _mib(value: str, unit: str) -> float:
    return float(value.replace(",", "")) * {"B": 2**-20, "KiB": 2**-10, "MiB": 1, "GiB": 1024}[unit]


def preprocess(args, spec: str, work: Path) -> list:
    """(stage, seconds, [peak MiB of each process]) of sharding and partitioning ``spec``."""
    shards, parts = work / "shards", work / "parts"
    shutil.rmtree(shards, ignore_errors=True)
    shutil.rmtree(parts, ignore_errors=True)
    seconds, peak = measured(gnnmesh("datasets", "--shard", spec, "--out", shards, "--shards", args.shards))
    stages = [("shard", seconds, [peak])]
    seconds, peaks = rank_peaks(gnnmesh("partition", "--nproc", args.ranks, "--input", shards,
                                        "--partitioner", args.partitioner, "--write-parts", parts))
    stages.append((f"partition ({args.partitioner})", seconds, peaks))
    return stages


def losses(records: list) -> list:
    return [r["loss"] for r in driver.epochs(records)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2_000_000)
    parser.add_argument("--edges", type=int, default=20_000_000)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--partitioner", default="lp", choices=("rp", "contiguous", "lp"))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--scaling", help="edge counts (comma-separated) to preprocess at P = --ranks")
    parser.add_argument("--no-train", dest="train", action="store_false", help="preprocessing stages only")
    args = parser.parse_args()

    spec = f"rmat:nodes={args.nodes},edges={args.edges},features={args.features}"
    flags = ["--epochs", args.epochs, "--hidden", args.hidden, "--eval-every", args.epochs, "--model", "gcn"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.train:
            stages = preprocess(args, spec, work)
            start = time.perf_counter()
            ranked = driver.train(flags + ["--parts", work / "parts", "--nproc", args.ranks, "--strategy", "partition"])
            stages.append(("train from parts", time.perf_counter() - start,
                           [max(r["peak_rss_mib_max"] for r in ranked)]))
            start = time.perf_counter()
            single = driver.train(flags + ["--dataset", spec])
            single_seconds = time.perf_counter() - start
            reference = max(r["peak_rss_mib_max"] for r in single)
            gap = max(abs(a - b) for a, b in zip(losses(ranked), losses(single)))
            print(f"{spec}, P = {args.ranks}, {args.shards} shards, partitioner {args.partitioner}; GCN hidden "
                  f"{args.hidden}, {args.epochs} epochs. Peaks are resident memory (VmHWM).\n")
            print(f"single-process training: {single_seconds:.1f} s, peak {reference:,.0f} MiB "
                  f"(the reference); goal: every process <= {GOAL} x = {GOAL * reference:,.0f} MiB\n")
            print("| stage | seconds | processes | largest peak (MiB) | vs. single training | goal |")
            print("|---|---|---|---|---|---|")
            for stage, seconds, peaks in stages:
                top = max(peaks)
                print(f"| {stage} | {seconds:.1f} | {len(peaks) if 'train' not in stage else args.ranks} | "
                      f"{top:,.0f} | {top / reference:.2f}x | {'met' if top <= GOAL * reference else 'missed'} |")
            print(f"\nper-rank partition peaks (MiB): {', '.join(f'{p:,.0f}' for p in stages[1][2])}")
            print(f"largest loss difference, parts vs. single process, over {args.epochs} epochs: {gap:.2e}")
        if args.scaling:
            print(f"\npreprocessing at P = {args.ranks} ({args.features} features, 10 edges a node)\n")
            print("| edges | shard (s) | shard peak (MiB) | partition (s) | largest rank (MiB) |")
            print("|---|---|---|---|---|")
            for edges in map(int, args.scaling.split(",")):
                size = f"rmat:nodes={edges // 10},edges={edges},features={args.features}"
                (_, s_sec, s_peak), (_, p_sec, p_peaks) = preprocess(args, size, work)
                print(f"| {edges:,} | {s_sec:.1f} | {s_peak[0]:,.0f} | {p_sec:.1f} | {max(p_peaks):,.0f} |", flush=True)


if __name__ == "__main__":
    main()

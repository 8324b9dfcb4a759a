"""From raw shards to a trained model with no process holding the whole graph, measured.

One run, on an R-MAT graph:

1. ``gnnmesh datasets --shard rmat:... --out g/ --shards S``   (one process)
2. ``gnnmesh partition --nproc P --input g/ --write-parts parts/ --partitioner M``
3. ``gnnmesh train --parts parts/ --nproc P``                  (GCN, from the parts)
4. ``gnnmesh train --dataset rmat:...``                          (the single process, the reference)

Every process's peak resident memory at every stage (the kernel's, for the one-process
stages; each rank's own, reported by gnnmesh, for the ranks), beside the single-process
training peak, and whether training from the parts matched the single process's losses.
The reference is left out (``--reference auto``) where its estimated peak exceeds the
memory available, as at 100M edges on a 24 GiB machine.

``--scaling`` measures every stage (the reference aside) at growing edge counts, 10 edges a
node, each rank's peak and their sum, and projects each stage's sum over the ranks to
``--project`` edges by a straight line through the two largest runs. ``--flat-ranks`` keeps
the nodes and edges per rank fixed (``--nodes-per-rank``, ``--edges-per-rank``) and grows
the graph with the ranks: a rank's peak at partitioning and at training from the parts
stays flat, as no rank holds a vector over all nodes. ``--record FILE`` appends each run's
stages to FILE; ``--fit FILE`` fits each stage's largest rank to the edges a rank holds
over those runs and extrapolates it to ``--fit-to`` EDGES:RANKS (1B edges on 256 ranks).

    python benchmarks/pipeline.py                                        # 2M nodes, 20M edges, P = 4
    python benchmarks/pipeline.py --nodes 200000 --edges 2000000         # a quick run
    python benchmarks/pipeline.py --scaling 1000000,2000000,4000000,8000000,16000000 --no-train
    python benchmarks/pipeline.py --scaling 1000000,3000000,10000000 --ranks 8 --features 64 --epochs 2
    python benchmarks/pipeline.py --flat-ranks 2,4,8 --features 8 --hidden 32 --epochs 2
    python benchmarks/pipeline.py --nodes 10000000 --edges 100000000 --features 64 --ranks 8 --epochs 2 \
        --partitioner rp --hidden 32 --work runs/pipeline --record runs/fit.jsonl
    python benchmarks/pipeline.py --fit runs/fit.jsonl --fit-to 1000000000:256
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import driver
from memory_scaling import measured

GOAL = 0.35  # no process above this fraction of the single-process training peak
# The single process's training peak, roughly (fitted to R-MAT 1M-2M nodes, 10M-20M edges,
# 128 features: 7.7 GiB at 2M / 20M): the start-up, the edges, four copies of the features.
BASE_MIB, EDGE_BYTES, FEATURE_COPIES = 340, 170, 4


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


def record(args, nodes: int, edges: int, stages: list) -> None:
    """Append one run's stages to ``--record`` (a JSON object a line), for ``--fit``."""
    if not args.record:
        return
    run = {"nodes": nodes, "edges": edges, "ranks": args.ranks, "features": args.features,
           "partitioner": args.partitioner, "hidden": args.hidden if args.train else None,
           "stages": [{"stage": stage, "seconds": round(seconds, 2), "peaks_mib": [round(p, 1) for p in peaks]}
                      for stage, seconds, peaks in stages]}
    with open(args.record, "a") as out:
        out.write(json.dumps(run) + "\n")


def losses(records: list) -> list:
    return [r["loss"] for r in driver.epochs(records)]


def train_flags(args) -> list:
    return ["--epochs", args.epochs, "--hidden", args.hidden, "--eval-every", args.epochs, "--model", "gcn"]


def train_parts(args, work: Path) -> tuple:
    """(records, seconds, [peak MiB of each rank]) of training from ``work/parts``."""
    start = time.perf_counter()
    ranked = driver.train(train_flags(args) + ["--parts", work / "parts", "--nproc", args.ranks,
                                                "--strategy", "partition"] + args.train_flag)
    return ranked, time.perf_counter() - start, [max(r["rank_peak_rss_mib"][k] for r in ranked)
                                                 for k in range(args.ranks)]


def available_mib() -> float:
    """MemAvailable of this machine (MiB); infinite where /proc/meminfo is absent."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return float("inf")
    return int(re.search(r"MemAvailable:\s+(\d+) kB", text).group(1)) / 1024


def reference_estimate(nodes: int, edges: int, features: int) -> float:
    """The single process's training peak, roughly (MiB)."""
    return BASE_MIB + (edges * EDGE_BYTES + nodes * features * 4 * FEATURE_COPIES) / 2**20


def one_run(args, spec: str, work: Path) -> None:
    """The stages of one graph, with the single process as the reference where it fits."""
    stages = preprocess(args, spec, work)
    if args.train:
        ranked, seconds, peaks = train_parts(args, work)
        stages.append(("train from parts", seconds, peaks))
    record(args, args.nodes, args.edges, stages)
    estimate = reference_estimate(args.nodes, args.edges, args.features)
    reference = None
    if args.train and (args.reference == "yes" or (args.reference == "auto" and estimate < 0.9 * available_mib())):
        start = time.perf_counter()
        single = driver.train(train_flags(args) + ["--dataset", spec])
        single_seconds = time.perf_counter() - start
        reference = max(r["peak_rss_mib_max"] for r in single)
        gap = max(abs(a - b) for a, b in zip(losses(ranked), losses(single)))
    print(f"{spec}, P = {args.ranks}, {args.shards} shards, partitioner {args.partitioner}; GCN hidden "
          f"{args.hidden}, {args.epochs} epochs. Peaks are resident memory (VmHWM).\n")
    if reference is None and args.train:
        print(f"single-process training: left out (estimated peak {estimate:,.0f} MiB, "
              f"{available_mib():,.0f} MiB available)\n")
    if reference is None:
        print("| stage | seconds | processes | largest peak (MiB) | sum of peaks (MiB) |")
        print("|---|---|---|---|---|")
        for stage, seconds, peaks in stages:
            print(f"| {stage} | {seconds:.1f} | {len(peaks)} | {max(peaks):,.0f} | {sum(peaks):,.0f} |")
    else:
        print(f"single-process training: {single_seconds:.1f} s, peak {reference:,.0f} MiB "
              f"(the reference); goal: every process <= {GOAL} x = {GOAL * reference:,.0f} MiB\n")
        print("| stage | seconds | processes | largest peak (MiB) | vs. single training | goal |")
        print("|---|---|---|---|---|---|")
        for stage, seconds, peaks in stages:
            top = max(peaks)
            print(f"| {stage} | {seconds:.1f} | {len(peaks)} | {top:,.0f} | {top / reference:.2f}x | "
                  f"{'met' if top <= GOAL * reference else 'missed'} |")
    for stage, _, peaks in stages[1:]:
        print(f"\nper-rank {stage} peaks (MiB): {', '.join(f'{p:,.0f}' for p in peaks)}", end="")
    print()
    if reference is not None:
        print(f"largest loss difference, parts vs. single process, over {args.epochs} epochs: {gap:.2e}")


def scaling(args, work: Path) -> None:
    """Every stage at growing edges (10 a node): each stage's largest process and its sum
    over the processes, and that sum projected to ``--project`` edges."""
    print(f"\nevery stage at P = {args.ranks} ({args.features} features, 10 edges a node, {args.partitioner}"
          + (f", GCN hidden {args.hidden}, {args.epochs} epochs" if args.train else "") + ")\n")
    names = ["shard", "partition"] + (["train from parts"] if args.train else [])
    print("| edges | " + " | ".join(f"{n} (s) | {n}: largest (MiB) | {n}: sum (MiB)" for n in names) + " |")
    print("|---" * (1 + 3 * len(names)) + "|")
    sums = []
    for edges in map(int, args.scaling.split(",")):
        size = f"rmat:nodes={edges // 10},edges={edges},features={args.features}"
        stages = preprocess(args, size, work)
        if args.train:
            stages.append(("train from parts",) + train_parts(args, work)[1:])
        record(args, edges // 10, edges, stages)
        sums.append((edges, [sum(peaks) for _, _, peaks in stages], [max(peaks) for _, _, peaks in stages]))
        print(f"| {edges:,} | " + " | ".join(f"{sec:.1f} | {max(peaks):,.0f} | {sum(peaks):,.0f}"
                                             for _, sec, peaks in stages) + " |", flush=True)
    if len(sums) > 1:
        (e0, s0, m0), (e1, s1, m1) = sums[-2:]
        at = lambda a, b: b + (b - a) * (args.project - e1) / (e1 - e0)  # noqa: E731
        print(f"| {args.project:,} (projected) | " + " | ".join(f"- | {at(a, b):,.0f} | {at(c, d):,.0f}"
                                                                 for a, b, c, d in zip(m0, m1, s0, s1)) + " |")


def flat(args, work: Path) -> None:
    """A rank's peak against the node count, at fixed nodes and edges per rank (the ranks
    grow with the graph): what a rank holds of its own share stays the same, so its peak
    stays flat unless something it holds grows with the whole graph's nodes."""
    print(f"\na rank's peak against the nodes: {args.nodes_per_rank:,} nodes and {args.edges_per_rank:,} edges "
          f"a rank ({args.features} features, {args.partitioner}"
          + (f", GCN hidden {args.hidden}, {args.epochs} epochs" if args.train else "") + ")\n")
    print("| ranks | nodes | edges | partition: largest rank (MiB) | per rank (MiB)"
          + (" | train from parts: largest rank (MiB) | per rank (MiB)" if args.train else "") + " |")
    print("|---" * (5 + 2 * args.train) + "|")
    for ranks in map(int, args.flat_ranks.split(",")):
        nodes, edges = ranks * args.nodes_per_rank, ranks * args.edges_per_rank
        args.ranks = ranks
        stages = preprocess(args, f"rmat:nodes={nodes},edges={edges},features={args.features}", work)
        if args.train:
            stages.append(("train from parts",) + train_parts(args, work)[1:])
        print(f"| {ranks} | {nodes:,} | {edges:,} | " + " | ".join(
            f"{max(peaks):,.0f} | {', '.join(f'{p:,.0f}' for p in peaks)}" for _, _, peaks in stages[1:]) + " |",
            flush=True)


def fit(args) -> None:
    """Each stage's largest rank, fitted to the edges a rank holds over the runs in ``--fit``
    (least squares, a straight line), and extrapolated to ``--fit-to`` EDGES:RANKS.

    The stages run by the ranks are fitted; writing the shards, one process over the whole
    graph, is not. A rank's peak depends on its own share only (``--flat-ranks`` shows it flat against the
    whole graph's nodes), and these graphs keep 10 edges a node, so the edges a rank holds
    stand for its nodes too. Its time is the stage's wall time times the cores the ranks
    shared over the ranks: a rank's time on a core of its own, collectives over this host's
    loopback included, the network's latency at many machines not."""
    edges_to, ranks_to = map(int, args.fit_to.split(":"))
    try:
        runs = [json.loads(line) for line in Path(args.fit).read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as err:
        raise SystemExit(f"{args.fit}: {err}")
    if len(runs) < 2:
        raise SystemExit(f"{args.fit}: {len(runs)} run(s) recorded; a fit needs two or more")
    cores = len(os.sched_getaffinity(0))
    print(f"\n{len(runs)} runs from {args.fit}, each stage's largest rank against the edges a rank holds "
          f"(M = millions), extrapolated to {edges_to:,} edges on {ranks_to} ranks "
          f"({edges_to / ranks_to / 1e6:.2f} M edges a rank); time on a core of its own = wall time x "
          f"{cores} cores / ranks\n")
    print("| stage | fit: largest rank (MiB) | " + " | ".join(
        f"{r['edges'] / 1e6:g}M edges / {r['ranks']}: measured, fitted (MiB)" for r in runs)
        + f" | {edges_to / 1e6:g}M / {ranks_to} (MiB) | fit: a rank's time (s) | {edges_to / 1e6:g}M / {ranks_to} (s) |")
    print("|---" * (5 + len(runs)) + "|")
    share = np.array([r["edges"] / r["ranks"] / 1e6 for r in runs])
    for k, stage in enumerate(s["stage"] for s in runs[0]["stages"]):
        if len(runs[0]["stages"][k]["peaks_mib"]) != runs[0]["ranks"]:
            continue  # one process over the whole graph (writing the shards): no rank's share
        top = np.array([max(r["stages"][k]["peaks_mib"]) for r in runs])
        seconds = np.array([r["stages"][k]["seconds"] * min(cores, len(r["stages"][k]["peaks_mib"]))
                            / len(r["stages"][k]["peaks_mib"]) for r in runs])
        slope, base = np.polyfit(share, top, 1)
        tslope, tbase = np.polyfit(share, seconds, 1)
        at = edges_to / ranks_to / 1e6
        print(f"| {stage} | {base:,.0f} + {slope:,.1f} x M | "
              + " | ".join(f"{m:,.0f}, {base + slope * x:,.0f}" for m, x in zip(top, share))
              + f" | {base + slope * at:,.0f} | {tbase:,.1f} + {tslope:,.1f} x M | {tbase + tslope * at:,.0f} |")


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
    parser.add_argument("--reference", default="auto", choices=("auto", "yes", "no"),
                        help="train the single process too (auto: where its estimated peak fits in memory)")
    parser.add_argument("--train-flag", action="append", default=[],
                        help="one more flag for training from the parts (repeatable)")
    parser.add_argument("--scaling", help="edge counts (comma-separated) to run every stage at, P = --ranks")
    parser.add_argument("--project", type=int, default=100_000_000, help="edges to project --scaling's sums to")
    parser.add_argument("--flat-ranks", help="rank counts (comma-separated) to run at --nodes-per-rank and "
                        "--edges-per-rank: a rank's peak against the graph's nodes")
    parser.add_argument("--nodes-per-rank", type=int, default=250_000)
    parser.add_argument("--edges-per-rank", type=int, default=1_000_000)
    parser.add_argument("--no-train", dest="train", action="store_false", help="preprocessing stages only")
    parser.add_argument("--record", help="append each run's stages to this file (a JSON object a line)")
    parser.add_argument("--fit", help="fit each stage's largest rank to the edges a rank holds over the runs "
                        "recorded in this file (--record) and extrapolate to --fit-to; runs nothing")
    parser.add_argument("--fit-to", default="1000000000:256", help="EDGES:RANKS to extrapolate --fit to")
    parser.add_argument("--work", help="where the shards and parts go (default: the system's temporary folder)")
    args = parser.parse_args()

    if args.fit:
        return fit(args)
    if args.work:
        Path(args.work).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        if args.scaling:
            scaling(args, work)
        if args.flat_ranks:
            flat(args, work)
        if not args.scaling and not args.flat_ranks:
            one_run(args, f"rmat:nodes={args.nodes},edges={args.edges},features={args.features}", work)


if __name__ == "__main__":
    main()

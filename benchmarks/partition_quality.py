"""Partition quality of HP and GP normalized to RP: the metrics of Demirci et al.'s Table 2
(average and maximum volume sent by a rank, average and maximum messages sent by a rank,
per layer), plus HP/GP ratios and partitioning time.

    python benchmarks/partition_quality.py --data-root ../shared/data [--parts 16,64,512]
        [--graphs cora github 'rmat:nodes=1000,edges=8000' | all] [--time-limit 120]
        [--output table.md]

Partitions are cached (``$GNNMESH_CACHE/partitions``), so a rerun only computes what is
missing and reports each partition's original time. A partitioning whose estimated time
(its time at the previous P, doubled) exceeds ``--time-limit`` is skipped and listed.
Goals checked at the end: HP <= GP in average and maximum volume on every graph, and HP's
average volume <= 0.3x RP's on every graph and in geometric mean.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

from gnnmesh import datasets
from gnnmesh.datasets.registry import REGISTRY
from gnnmesh.partition import partition, quality
from gnnmesh.partition.base import graph_key
from gnnmesh.partition.store import entry_path, is_current, store_dir

DEFAULT_GRAPHS = ["cora", "citeseer", "facebook", "github", "twitch-de", "email-eu-core",
                  "slashdot", "luxembourg-osm", "gemat11", "rmat:nodes=100000,edges=1000000,features=0"]
METRICS = [("vol avg", "volume_avg"), ("vol max", "send_volume_max"),
           ("msg avg", "messages_avg"), ("msg max", "messages_max")]
GROWTH = 2.0  # assumed time growth from one P to the next, for the skip estimate


def load_graph(name: str, root):
    dataset = REGISTRY.get(name.split(":")[0])
    options = {}
    if dataset is not None and getattr(dataset.options.get("features"), "type", None) is str:
        options["features"] = "none"  # structure only: skip building feature matrices
    return datasets.load(name, root=root, **options)


def real_graphs(root) -> list:
    """Every registered dataset with files (not a generator) present under ``root``."""
    present = {info.name for info in datasets.available(root) if info.present}
    return [name for name in datasets.names() if REGISTRY[name].files and name in present]


def run_case(graph, key, parts, method, args, estimate, skipped):
    """Partition (or reuse the cached result) unless it is predicted to take too long."""
    cached = is_current(entry_path(store_dir(args.cache_dir), key, method, parts, args.epsilon,
                                   args.seed), method)
    if not cached and estimate is not None and estimate > args.time_limit:
        skipped.append(f"{graph.name} {method} P={parts} (estimated {estimate:.0f} s > "
                       f"--time-limit {args.time_limit:.0f} s)")
        return None
    part = partition(graph, parts, method, epsilon=args.epsilon, seed=args.seed,
                     cache_dir=args.cache_dir)
    return quality(graph.adj, part)


def ratio(a, b) -> float:
    if b == 0:
        return 1.0 if a == 0 else math.inf
    return a / b


def geomean(values) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_root = os.environ.get("GNNMESH_DATA") or str(Path(__file__).resolve().parents[2] / "shared/data")
    parser.add_argument("--data-root", default=default_root)
    parser.add_argument("--parts", default="16,64,512")
    parser.add_argument("--graphs", nargs="+", default=DEFAULT_GRAPHS,
                        help="names or generator specs (specs contain commas, so the list is "
                             "space-separated); 'all' = every real graph present, plus R-MAT")
    parser.add_argument("--methods", default="rp,gp,hp")
    parser.add_argument("--epsilon", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=120.0,
                        help="skip a partitioning estimated to take longer than this (seconds)")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--output", help="also write the markdown to this file")
    args = parser.parse_args()
    part_counts = [int(p) for p in args.parts.split(",")]
    methods = args.methods.split(",")
    names = (real_graphs(args.data_root) + [DEFAULT_GRAPHS[-1]] if args.graphs == ["all"]
             else args.graphs)

    out, skipped, goals = [], [], []
    hp_rp_avg = {p: [] for p in part_counts}

    def emit(line=""):
        print(line, flush=True)
        out.append(line)

    emit(f"Partition quality, epsilon={args.epsilon}, seed={args.seed}; HP and GP normalized to RP "
         f"(lower is better). Volume: rows sent per rank per layer; messages: sent per rank per layer.")
    emit()
    emit("| graph | P | method | vol avg | vol max | msg avg | msg max | imbalance | seconds |")
    emit("|---|---|---|---|---|---|---|---|---|")
    start_all = time.perf_counter()
    for name in names:
        graph = load_graph(name, args.data_root)
        key = graph_key(graph.adj)
        times = {}  # method -> seconds at the previous P
        for parts in part_counts:
            if parts > graph.num_nodes:
                skipped.append(f"{graph.name} P={parts} (only {graph.num_nodes} nodes)")
                continue
            results = {}
            for method in methods:
                q = run_case(graph, key, parts, method, args,
                             None if method not in times else GROWTH * times[method], skipped)
                if q is not None:
                    results[method] = q
                    times[method] = q["seconds"]
            if "rp" not in results:
                continue
            rp = results["rp"]
            label = f"{graph.name} ({graph.num_nodes:,} n, {graph.num_edges:,} nnz)"
            emit(f"| {label} | {parts} | RP (absolute) | {rp['volume_avg']:,.1f} | "
                 f"{rp['send_volume_max']:,} | {rp['messages_avg']:.1f} | {rp['messages_max']} | "
                 f"{100 * rp['compute_imbalance']:.1f}% | {rp['seconds']:.2f} |")
            for method in ("gp", "hp"):
                if method in results:
                    q = results[method]
                    cells = " | ".join(f"{ratio(q[k], rp[k]):.3f}" for _, k in METRICS)
                    emit(f"| | {parts} | {method.upper()} | {cells} | {100 * q['compute_imbalance']:.1f}% | "
                         f"{q['seconds']:.2f} |")
            if "hp" in results and "gp" in results:
                hp, gp = results["hp"], results["gp"]
                cells = " | ".join(f"{ratio(hp[k], gp[k]):.3f}" for _, k in METRICS)
                emit(f"| | {parts} | HP/GP | {cells} | | |")
                for label_, k in METRICS[:2]:
                    if hp[k] > gp[k]:
                        goals.append(f"HP > GP in {label_} on {graph.name} P={parts} "
                                     f"(HP/GP {ratio(hp[k], gp[k]):.3f})")
            if "hp" in results:
                r = ratio(results["hp"]["volume_avg"], rp["volume_avg"])
                hp_rp_avg[parts].append(r)
                if r > 0.3:
                    goals.append(f"HP avg volume {r:.3f}x RP on {graph.name} P={parts} (goal <= 0.3)")
    emit()
    for parts in part_counts:
        if hp_rp_avg[parts]:
            g = geomean(hp_rp_avg[parts])
            emit(f"P={parts}: geometric mean of HP/RP average volume over {len(hp_rp_avg[parts])} graphs: "
                 f"{g:.3f} (goal <= 0.3: {'met' if g <= 0.3 else 'NOT met'})")
            if g > 0.3:
                goals.append(f"geometric mean HP/RP average volume {g:.3f} at P={parts}")
    for line in skipped:
        emit(f"skipped: {line}")
    emit(f"summary: {'all goals met' if not goals else str(len(goals)) + ' goal(s) missed'} "
         f"(HP <= GP in avg and max volume on every graph; HP avg volume <= 0.3x RP per graph and "
         f"in geometric mean); {time.perf_counter() - start_all:.0f} s")
    for line in goals:
        emit(f"  missed: {line}")
    if args.output:
        Path(args.output).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()

"""Where 'hp' partitioning spends its time, and what its settings cost in volume: building the
column-net hypergraph, mt-KaHyPar (per preset, thread count and largest net kept) and the
max-send refinement, with the exact volume on the full graph, beside METIS ('gp').

    python benchmarks/hp_speed.py --graph rmat:nodes=300000,edges=3000000,features=0 --parts 4,16,64 \\
        [--presets default,large_k] [--threads 1,2] [--max-pins 0,25,50] [--gp] \\
        [--repeat 3] [--output table.md]

``--max-pins 0`` keeps every net. Nothing is cached: every row is computed. Each row also
gives the 1-minute load average when it ended; on a shared machine compare rows only at
similar loads, and with ``--repeat`` read the median and the spread, not the best.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from gnnmesh import datasets
from gnnmesh.partition import methods, partition, quality
from gnnmesh.partition.base import vertex_weights
from gnnmesh.partition.refine import reduce_max_send


def hp_once(adj, parts, preset, threads, max_pins, epsilon, seed) -> dict:
    n = adj.shape[0]
    start = time.perf_counter()
    starts, pins, dropped = methods.column_nets(adj, max_pins=max_pins or None)
    weights = vertex_weights(adj)
    built = time.perf_counter()
    assignment = methods.run_mtkahypar(n, starts, pins, weights, parts, epsilon, preset, threads, seed)
    solved = time.perf_counter()
    before = quality(adj, assignment)
    refined_at = time.perf_counter()
    assignment = reduce_max_send(adj, assignment, parts, weights, epsilon)
    end = time.perf_counter()
    q = quality(adj, assignment)
    return {"nets": starts.shape[0] - 1, "pins": pins.shape[0], "dropped": dropped,
            "build": built - start, "mtkahypar": solved - built, "refine": end - refined_at,
            "total": (built - start) + (solved - built) + (end - refined_at),
            "volume_before": before["volume_total"], "volume": q["volume_total"],
            "max_send": q["send_volume_max"], "imbalance": q["compute_imbalance"],
            "nodes": q["node_imbalance"],
            "load": os.getloadavg()[0]}


def spread(values, fmt="{:.1f}") -> str:
    """Median, and the range when there is more than one value."""
    med = fmt.format(statistics.median(values))
    return med if len(values) == 1 else f"{med} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="rmat:nodes=300000,edges=3000000,features=0")
    parser.add_argument("--data-root", default=os.environ.get("GNNMESH_DATA"))
    parser.add_argument("--parts", default="4,16,64")
    parser.add_argument("--presets", default=methods.HP_PRESET)
    parser.add_argument("--threads", default="1")
    parser.add_argument("--max-pins", default=str(methods.MAX_NET_PINS))
    parser.add_argument("--gp", action="store_true", help="also run METIS")
    parser.add_argument("--epsilon", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--output", help="also write the markdown to this file")
    args = parser.parse_args()
    graph = datasets.load(args.graph, root=args.data_root)
    adj = graph.adj
    out = []

    def emit(line=""):
        print(line, flush=True)
        out.append(line)

    emit(f"{graph.name}: {graph.num_nodes:,} nodes, {graph.num_edges:,} entries; epsilon "
         f"{args.epsilon}, seed {args.seed}, {args.repeat} run(s) per row: median (min-max)")
    emit()
    emit("| P | method | preset | threads | max pins | nets kept (left out) | build s | "
         "mt-KaHyPar s | refine s | total s | volume | max send | vs GP | nodes max/avg | load |")
    emit("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for parts in (int(p) for p in args.parts.split(",")):
        gp_volume = None
        if args.gp:
            runs = []
            for _ in range(args.repeat):
                part = partition(adj, parts, "gp", epsilon=args.epsilon, seed=args.seed, cache=False)
                runs.append((part.seconds, quality(adj, part), os.getloadavg()[0]))
            gp_volume = runs[0][1]["volume_total"]  # METIS is deterministic per seed
            emit(f"| {parts} | gp | | | | | | | | {spread([r[0] for r in runs])} | {gp_volume:,} | "
                 f"{runs[0][1]['send_volume_max']:,} | 1.000 | {1 + runs[0][1]['node_imbalance']:.2f} | "
                 f"{spread([r[2] for r in runs], '{:.1f}')} |")
        for preset in args.presets.split(","):
            for threads in (int(t) for t in args.threads.split(",")):
                for max_pins in (int(m) for m in args.max_pins.split(",")):
                    runs = [hp_once(adj, parts, preset, threads, max_pins, args.epsilon, args.seed)
                            for _ in range(args.repeat)]
                    vols = [r["volume"] for r in runs]
                    vs = "" if gp_volume is None else spread([v / gp_volume for v in vols], "{:.3f}")
                    emit(f"| {parts} | hp | {preset} | {threads} | {max_pins or 'all'} | "
                         f"{runs[0]['nets']:,} ({runs[0]['dropped']:,}) | "
                         + " | ".join(spread([r[k] for r in runs]) for k in ("build", "mtkahypar", "refine", "total"))
                         + f" | {spread(vols, '{:,.0f}')} | {spread([r['max_send'] for r in runs], '{:,.0f}')} | "
                         f"{vs} | {spread([1 + r['nodes'] for r in runs], '{:.2f}')} | "
                         f"{spread([r['load'] for r in runs])} |")
    if args.output:
        Path(args.output).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()

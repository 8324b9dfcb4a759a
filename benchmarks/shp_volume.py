"""Mini-batch communication of 'shp' against 'hp' (Demirci et al.'s Figure 5): the rows a
sampled batch moves (all its layers, one direction) under each partition, on held-out
batches, and the time each partition took.

    python benchmarks/shp_volume.py --data-root ../shared/data [--graphs github facebook]
        [--parts 3,9,27] [--fanouts 10,5] [--batch-size 1024] [--epochs 2]
        [--theta 0.1] [--delta 0.5] [--output table.md]

Seeds come from the training nodes (every node where a graph has no split), drawn as
mini-batch training draws them. Held-out batches are those of the ``--epochs`` epochs after
the last one shp was built from. The CI is a 95% t-interval of the per-batch difference
shp - hp. "Hoeffding only" is shp with ``min_batches=1``, the paper's rule alone: as few
batches as reach the Hoeffding count of nets. Nothing is cached: every partition is computed.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from scipy import stats

from gnnmesh.partition import batch_volumes, partition, stochastic_partition
from gnnmesh.partition.stochastic import held_out_epoch
from partition_quality import load_graph


def timed(make):
    start = time.perf_counter()
    return make(), time.perf_counter() - start


def held_out(graph, parts: list, args, pool) -> np.ndarray:
    """Rows per batch [partition, batch] over ``args.epochs`` held-out epochs."""
    first = held_out_epoch(parts)
    return np.concatenate([batch_volumes(graph, parts, args.fanouts, args.batch_size, seeds_pool=pool,
                                         seed=args.seed, epoch=first + e) for e in range(args.epochs)], axis=1)


def interval(diff: np.ndarray) -> tuple:
    """Mean and 95% t-interval half-width of per-batch differences."""
    half = stats.t.ppf(0.975, diff.shape[0] - 1) * diff.std(ddof=1) / np.sqrt(diff.shape[0])
    return float(diff.mean()), float(half)


def row(graph, parts: int, args, pool) -> str:
    options = dict(seeds_pool=pool, theta=args.theta, delta=args.delta, seed=args.seed, cache=False)
    hp, hp_s = timed(lambda: partition(graph, parts, "hp", seed=args.seed, cache=False))
    shp, shp_s = timed(lambda: stochastic_partition(graph, parts, args.fanouts, args.batch_size, **options))
    paper = stochastic_partition(graph, parts, args.fanouts, args.batch_size, min_batches=1, **options)
    vol = held_out(graph, [hp, shp, paper], args, pool)
    mean, half = interval(vol[1] - vol[0])
    s, h = shp.sampling, paper.sampling
    return (f"| {graph.name} | {parts} | {vol.shape[1]} | {vol[0].mean():,.0f} | {vol[1].mean():,.0f} | "
            f"{vol[1].mean() / vol[0].mean():.3f} | {mean:,.0f} ± {half:,.0f} | {hp_s:.1f} | {shp_s:.1f} | "
            f"{s['batches']} / {s['nets']:,} ({s['stop']}) | {vol[2].mean() / vol[0].mean():.3f} "
            f"({h['batches']} / {h['nets']:,}) |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_root = os.environ.get("GNNMESH_DATA") or str(Path(__file__).resolve().parents[2] / "shared/data")
    parser.add_argument("--data-root", default=default_root)
    parser.add_argument("--graphs", nargs="+", default=["github", "facebook"])
    parser.add_argument("--parts", default="3,9,27")
    parser.add_argument("--fanouts", default="10,5")
    parser.add_argument("--batch-size", dest="batch_size", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=2, help="held-out epochs to measure on")
    parser.add_argument("--theta", type=float, default=0.1)
    parser.add_argument("--delta", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="also write the markdown to this file")
    args = parser.parse_args()
    out = []

    def emit(line=""):
        print(line, flush=True)
        out.append(line)

    emit(f"Rows moved per sampled batch (all layers, one direction), held-out batches; fanouts "
         f"{args.fanouts}, batch size {args.batch_size}, theta {args.theta:g}, delta {args.delta:g}, "
         f"epsilon 0.01, seed {args.seed}. CI: 95% of the per-batch difference shp - hp.")
    emit()
    emit("| graph | P | batches | hp vol | shp vol | shp/hp | shp - hp (95% CI) | hp s | shp s | "
         "shp built from (batches / nets) | Hoeffding only: shp/hp (batches / nets) |")
    emit("|---|---|---|---|---|---|---|---|---|---|---|")
    start = time.perf_counter()
    for name in args.graphs:
        graph = load_graph(name, args.data_root)
        mask = graph.train_mask
        pool = mask if mask is not None and bool(mask.any()) else None
        for parts in (int(p) for p in args.parts.split(",")):
            emit(row(graph, parts, args, pool))
    emit()
    emit(f"{time.perf_counter() - start:.0f} s")
    if args.output:
        Path(args.output).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()

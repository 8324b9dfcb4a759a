"""Full-ranking link evaluation (``--rank-all``) on P = 1, 2, 4 ranks: the MRR of Q held-out
positives, each ranked against every node of an R-MAT graph, its time and each rank's peak
memory.

The ranks (gloo, on this machine) each own a contiguous share of the node ids and hold those
nodes' embeddings alone: rows of ``--width`` floats drawn from a counter keyed on the node id,
so every P ranks the same embeddings, and the MRR must agree across P. The positives are Q of
the graph's edges, chosen by the seed; every edge of the graph counts as a known positive,
filtered out as ``--rank-all`` does (``gnnmesh.link.full_ranking``), under the dot decoder.
Each rank loads the graph (as a ``--task link`` rank does), then draws its embeddings and
ranks its positives.

Per P, the figures are the median over repeats and their range: "rank s" is the slowest
rank's time to gather the filter and rank (``FullRanking`` and its metrics); "peak MiB" the
largest rank's resident high-water mark over the whole process; "after load" the largest
rank's peak above its resident memory once the graph is loaded (the embeddings, the row
directory and the ranking: what this evaluation adds to a rank). Rounds alternate the rank
counts (1, 2, 4, 1, ...), side by side in one run.

    python benchmarks/link_ranking.py                                       # 1M nodes, 10M edges, 10,000 queries
    python benchmarks/link_ranking.py --nodes 100000 --edges 1000000 --queries 2000   # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torch.multiprocessing as mp

from driver import Spread

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

SEED = 0
EMBEDDING_KEY, QUERY_KEY = 11, 12


def dataset(args) -> str:
    return f"rmat:nodes={args.nodes},edges={args.edges},features=1,undirected=true,seed={SEED}"


def worker(rank: int, world: int, args, rendezvous: str, out_dir: str) -> None:
    torch.set_num_threads(args.threads)
    from gnnmesh import comm, datasets, memory
    from gnnmesh.link import counter
    from gnnmesh.link.decoders import Dot
    from gnnmesh.link.full_ranking import FullRanking
    from gnnmesh.link.rows import RowDirectory
    from gnnmesh.link.split import LinkSplit

    comm.init_local(rendezvous, rank, world)
    group = comm.Comm()
    graph = datasets.load(dataset(args))
    n = graph.num_nodes
    memory.release_freed(collect=True)  # what loading freed, returned: the baseline is the graph itself
    before = memory.restart_peaks("cpu")
    start = time.perf_counter()
    lo, hi = rank * n // world, (rank + 1) * n // world
    ids = np.arange(lo, hi)
    z = torch.from_numpy((counter.uniform(SEED, EMBEDDING_KEY, ids[:, None], np.arange(args.width)[None])
                          - 0.5).astype(np.float32))
    directory = RowDirectory(torch.from_numpy(ids), n, group)
    src, dst = graph.adj.indices, graph.adj.row()  # an edge runs column -> row
    chosen = np.sort(np.argsort(counter.uniform(SEED, QUERY_KEY, np.arange(len(src))), kind="stable")[:args.queries])
    positives = torch.stack([src[chosen], dst[chosen]])
    none = torch.zeros(2, 0, dtype=torch.int64)
    split = LinkSplit(graph, none, positives, none, torch.zeros(args.queries, 0, dtype=torch.int64),
                      torch.zeros(0, 0, dtype=torch.int64))
    group.barrier()
    ranked = time.perf_counter()
    held = FullRanking(split, directory)
    got = held.metrics(Dot(args.width), z, "valid", (1, 10, 100), group.all_reduce)
    seconds = time.perf_counter() - ranked
    record = {"rank": rank, "seconds": seconds, "setup": ranked - start, "peak": memory.peak_rss_mib(),
              "after_load": memory.peaks_since_restart("cpu") / 2**20 - before, **got}
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as fh:
        json.dump(record, fh)
    comm.shutdown(clean=True)


def run(world: int, args) -> list:
    with tempfile.TemporaryDirectory() as out_dir:
        rendezvous = os.path.join(out_dir, "rendezvous")
        mp.start_processes(worker, args=(world, args, rendezvous, out_dir), nprocs=world, start_method="spawn")
        return [json.load(open(os.path.join(out_dir, f"{r}.json"))) for r in range(world)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=10_000_000, help="undirected edges")
    parser.add_argument("--queries", type=int, default=10_000, help="held-out positives ranked")
    parser.add_argument("--width", type=int, default=64, help="embedding width")
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    args = parser.parse_args()
    from gnnmesh import datasets
    datasets.load(dataset(args))  # generated and cached once, before any timing
    worlds = [int(p) for p in args.ranks.split(",")]
    runs = {p: [] for p in worlds}
    for _ in range(args.repeats):
        for p in worlds:
            runs[p].append(run(p, args))
    print(f"{dataset(args)}: {args.queries:,} queries against every node, width {args.width}, "
          f"{args.threads} thread(s) per rank; median (range) over {args.repeats} repeats")
    print(f"{'P':>2}  {'MRR':>10}  {'hits@10':>8}  {'rank s':>18}  {'peak MiB (largest rank)':>24}  "
          f"{'after load MiB':>20}")
    for p in worlds:
        mrr = {round(r[0]["mrr"], 9) for r in runs[p]}
        hits = runs[p][0][0]["hits@10"]
        seconds = Spread.of(max(x["seconds"] for x in r) for r in runs[p])
        peak = Spread.of(max(x["peak"] for x in r) for r in runs[p])
        after = Spread.of(max(x["after_load"] for x in r) for r in runs[p])
        print(f"{p:>2}  {'/'.join(f'{m:.6f}' for m in sorted(mrr)):>10}  {hits:>8.4f}  {seconds.format(1):>18}  "
              f"{peak.format(0):>24}  {after.format(0):>20}")


if __name__ == "__main__":
    main()

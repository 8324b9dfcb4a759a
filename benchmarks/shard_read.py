"""Memory a reader of 2D block files needs: the growth of a fresh process's peak resident
memory (VmHWM) while it reads and merges some blocks of a set of them, against the size of
the whole graph's CSR (int64 row pointers and column ids).

The block files are written once (``write_block_files``, the writer behind ``gnnmesh partition
--method permute2 --write-shards DIR``); each reading is a new interpreter that imports
gnnmesh and opens the manifest, then reads: one block, one row of blocks, every block. The
readings alternate within each repeat; the table shows median (min-max) over the repeats.

    python benchmarks/shard_read.py          # R-MAT 250k nodes / 4M edges, 4 x 4 blocks, 5 repeats
    python benchmarks/shard_read.py --dataset rmat:nodes=1000000,edges=10000000,features=0 --grid 8,8
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from driver import Spread
from gnnmesh import datasets
from gnnmesh.parallel.grid3d.block_files import read_cost, write_block_files


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="rmat:nodes=250000,edges=4000000,features=0")
    parser.add_argument("--data-root", default=os.environ.get("GNNMESH_DATA"))
    parser.add_argument("--grid", default="4,4", help="blocks R,C")
    parser.add_argument("--seed", type=int, default=0, help="permutation seed of the block files")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows, cols = map(int, args.grid.split(","))

    graph = datasets.load(args.dataset, root=args.data_root)
    whole = graph.adj.indptr.numel() * 8 + graph.adj.indices.numel() * 8
    cases = {"one block": "(0, 0)", "one row of blocks": f"(0, (0, {cols}))",
             "every block": f"((0, {rows}), (0, {cols}))"}
    got = {name: [] for name in cases}
    with tempfile.TemporaryDirectory() as tmp:
        path = write_block_files(graph.replace(y=None, train_mask=None, val_mask=None, test_mask=None),
                            Path(tmp) / "shards", (rows, cols), seed=args.seed)
        del graph
        for _ in range(args.repeats):
            for name, blocks in cases.items():
                got[name].append(read_cost(path, blocks))
    print(f"{args.dataset}: {rows} x {cols} blocks, whole graph's CSR {whole / 2**20:.1f} MiB; growth of a "
          f"reader's peak RSS, median (min-max) of {args.repeats} fresh processes\n")
    print("| read | nonzeros | share of nonzeros | peak RSS growth (MiB) | vs. whole graph |")
    print("|---|---|---|---|---|")
    total = got["every block"][0][1]
    for name, runs in got.items():
        nnz = runs[0][1]
        grown = Spread.of(g for g, _ in runs)
        print(f"| {name} | {nnz:,} | {nnz / total:.3f} | {grown.format(1, 1 / 2**20)} | "
              f"{grown.format(2, 1 / whole)} |")


if __name__ == "__main__":
    main()

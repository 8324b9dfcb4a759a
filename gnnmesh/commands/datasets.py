"""``gnnmesh datasets``: the registered datasets with their sizes and whether their files are
here, ``--fetch NAME`` to download one, or ``--shard SOURCE --out DIR`` to write a dataset
as a shard set (docs/guides/sharded.md)."""

from __future__ import annotations

import argparse
import os
import time

from ..errors import ConfigError
from .flags import add_config_flags


def add_parser(subparsers) -> argparse.ArgumentParser:
    cmd = subparsers.add_parser("datasets", help="list the datasets and their sizes, or download one")
    add_config_flags(cmd, only=("data_root",))
    cmd.add_argument("--fetch", metavar="NAME",
                     help="download dataset NAME's public upstream files into the data root, "
                          "checked against their pinned sha256 ($GNNMESH_MIRROR replaces "
                          "https://raw.githubusercontent.com in their URLs)")
    cmd.add_argument("--shard", metavar="SOURCE",
                     help="write dataset SOURCE (any --dataset spec) as a shard set into --out: "
                          "edges and node rows in many .npy files that no reader needs all of "
                          "(generators, edge lists, .mtx files and OGB directories stream with "
                          "bounded memory)")
    cmd.add_argument("--out", metavar="DIR", help="the shard set's directory (with --shard); an "
                                                  "earlier shard set there is replaced once the new one is complete")
    cmd.add_argument("--shards", metavar="K", type=int, default=8,
                     help="edge shards, and node shards, to write (with --shard; default 8)")
    return cmd


def run(args, argv) -> int:
    from .. import datasets
    if args.shard is not None or args.out is not None:
        return _shard(args)
    if args.fetch:
        from ..datasets.fetch import fetch
        print(fetch(args.fetch, args.data_root))
        return 0
    root = args.data_root or os.environ.get("GNNMESH_DATA")
    if args.data_root and not os.path.isdir(args.data_root):
        raise ConfigError(f"--data-root {args.data_root}: no such directory")
    rows = datasets.available(root)
    print(f"{'name':<16} {'nodes':>10} {'edges':>11} {'features':>9} {'classes':>8}  {'here':<5} description")
    for row in rows:
        here = "yes" if row.present else ("-" if row.present is None else "no")
        print(f"{row.name:<16} {_num(row.nodes):>10} {_num(row.edges):>11} {_num(row.features):>9} "
              f"{_num(row.classes):>8}  {here:<5} {row.description}")
    if root is None:
        print("(no data root: pass --data-root or set GNNMESH_DATA to see which files are present)")
    elif not os.path.isdir(root):
        print(f"(the data root {root} from GNNMESH_DATA does not exist: no files are present)")
    return 0


def _num(value) -> str:
    return "-" if value is None else f"{value:,}"


def _shard(args) -> int:
    if args.shard is None:
        raise ConfigError("--out DIR goes with --shard SOURCE (the dataset to write as a shard set)")
    if args.out is None:
        raise ConfigError("--shard SOURCE needs --out DIR (where to write the shard set)")
    if args.fetch:
        raise ConfigError("--fetch and --shard are separate commands; run one, then the other")
    if args.data_root and not os.path.isdir(args.data_root):
        raise ConfigError(f"--data-root {args.data_root}: no such directory")
    from ..datasets.sharding import write_shards
    began = time.perf_counter()
    shards = write_shards(args.shard, args.out, args.shards, root=args.data_root)
    print(f"wrote {shards.directory}: {shards.num_nodes:,} nodes, {shards.num_edges:,} edges, "
          f"{args.shards} shards in {time.perf_counter() - began:.1f} s")
    return 0

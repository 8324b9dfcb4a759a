"""``gnnmesh datasets``: the registered datasets with their sizes and whether their files are
here, or ``--fetch NAME`` to download one."""

from __future__ import annotations

import argparse
import os

from ..errors import ConfigError
from .flags import add_config_flags


def add_parser(subparsers) -> argparse.ArgumentParser:
    cmd = subparsers.add_parser("datasets", help="list the datasets and their sizes, or download one")
    add_config_flags(cmd, only=("data_root",))
    cmd.add_argument("--fetch", metavar="NAME",
                     help="download dataset NAME's public upstream files into the data root, "
                          "checked against their pinned sha256 ($GNNMESH_MIRROR replaces "
                          "https://raw.githubusercontent.com in their URLs)")
    return cmd


def run(args, argv) -> int:
    from .. import datasets
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

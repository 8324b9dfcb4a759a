"""Node-property datasets in the OGB directory layout (ogbn-arxiv, ogbn-products, ...),
read from disk as they are:

    <dir>/raw/edge.csv.gz            'src,dst' per edge, 0-based node ids
    <dir>/raw/node-feat.csv.gz       one row of floats per node (optional)
    <dir>/raw/node-label.csv.gz      one class id per node; empty or NaN: unlabeled; or T
                                     numbers per node (ogbn-proteins: 112 binary targets)
    <dir>/raw/num-node-list.csv.gz   the node count
    <dir>/raw/num-edge-list.csv.gz   the edge count
    <dir>/split/<name>/{train,valid,test}.csv.gz   node ids of each set

Every file may also be stored uncompressed (``.csv``). The split folder becomes the
train/val/test masks; with several folders the ``split`` option names one.

Direction: the layout keeps one direction per edge even for undirected graphs (their
reverse edges are added when loading), so ``directed`` defaults to False here, which
adds every reverse edge, as usually done for ogbn-arxiv too. ``directed=true`` keeps the
file's edges and marks the graph directed; ``directed=none`` keeps them and calls the
graph undirected only if they are symmetric (the graph files' default).

Unlabeled nodes get label 0 and belong to no set; a split that lists one is an error.

A link-prediction directory (ogbl-collab, ogbl-ddi, ogbl-citation2, ...) has the same raw/
files, node-label.csv.gz not needed, and ``split/<name>/{train,valid,test}.pt`` instead: it
loads as a graph without labels or masks whose ``meta['split']`` names the split folder
(``kind`` "ogb-link", ``dir``), which ``--task link`` reads (``gnnmesh.link.sources``).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..errors import GraphError
from ..graph import Graph
from ._build import MASKS, adjacency_from_edges, index_mask
from ._io import file_stat, read_bytes
from ._text import Table, parse_table
from .files import FILE_OPTIONS, check_ids
from .options import Option

LOADER_VERSION = 1
LAYOUT = "raw/edge.csv.gz, raw/node-label.csv.gz, raw/num-node-list.csv.gz, " \
         "raw/num-edge-list.csv.gz, split/<name>/{train,valid,test}.csv.gz"
SETS = ("train", "valid", "test")  # file names, in the order of MASKS

OPTIONS = {
    "split": Option(None, str, "folder under split/ to use (needed when there are several)",
                    optional=True),
    "directed": replace(FILE_OPTIONS["directed"], default=False),
    "remove_self_loops": FILE_OPTIONS["remove_self_loops"],
}


def is_ogb_dir(path: Path) -> bool:
    """A directory with a ``raw`` folder: loaded as this layout, whose files are then
    required (a missing one is named in the error)."""
    return (Path(path) / "raw").is_dir()


def link_split_folders(root: Path) -> list:
    """The folders under ``root/split`` that hold a link-prediction split (train.pt)."""
    return sorted(p.parent for p in Path(root).glob("split/*/train.pt"))


def dataset_name(root: Path) -> str:
    return Path(root).resolve().name or "ogb"


def source_files(root: Path) -> list:
    """Cache-key stamps of every file of the layout, so that editing any one of them
    (or adding a split) makes a new cache entry."""
    root = Path(root)
    files = sorted(root.glob("raw/*.csv*")) + sorted(root.glob("split/*/*.csv*")) + sorted(root.glob("split/*/*.pt"))
    return [file_stat(p) for p in files if p.is_file()]


def _find(root: Path, name: str, required: bool = True) -> Optional[Path]:
    """``root/name.csv.gz``, else ``root/name.csv``."""
    for suffix in (".csv.gz", ".csv"):
        path = root / (name + suffix)
        if path.is_file():
            return path
    if required:
        raise GraphError(f"{root / name}.csv.gz: file not found (nor {name}.csv): an OGB "
                         f"dataset directory holds {LAYOUT}")
    return None


def _table(path: Path, **kwargs) -> Table:
    return parse_table(read_bytes(path), path, **kwargs)


def _count(path: Path, what: str) -> int:
    table = _table(path, columns=(1,), int_columns=1, names=(what,))
    if len(table) != 1:
        raise GraphError(f"{path}: expected one {what} (a single graph), got {len(table)} lines")
    value = int(table.ints[0, 0])
    if value < 0:
        raise table.error(0, f"negative {what} {value}")
    return value


def load_ogb(root: Path, *, split=None, directed=False, remove_self_loops=False) -> Graph:
    root = Path(root)
    raw = root / "raw"
    if (raw / "relations").is_dir():  # ogbn-mag's layout: several node and edge types
        raise GraphError(f"{raw / 'relations'}: a typed (heterogeneous) graph: "
                         f"gnnmesh.datasets.load or ogb_typed.load_ogb_typed reads it")
    nodes_file, edges_file = _find(raw, "num-node-list"), _find(raw, "num-edge-list")
    n, m = _count(nodes_file, "node count"), _count(edges_file, "edge count")
    if n == 0:
        raise GraphError(f"{nodes_file}: the graph has 0 nodes")
    src, dst = _edges(_find(raw, "edge"), n, m, edges_file)
    links = link_split_folders(root)
    labels = _find(raw, "node-label", required=not links)
    y, labeled, num_classes = (None, np.zeros(n, dtype=bool), None) if labels is None else \
        _labels(labels, n, nodes_file)
    features = _find(raw, "node-feat", required=False)
    x = None if features is None else _features(features, n, nodes_file)
    if links:
        name, masks = _link_split(root, split, links), {}
    else:
        name, masks = _split(root, split, n, labeled)

    adj = adjacency_from_edges(src, dst, n, symmetrize=directed is False,
                               drop_self_loops=remove_self_loops)
    meta = {"source": "OGB node-property directory", "source_dir": str(root),
            "file_edges": m, "unlabeled_nodes_count": int(n - labeled.sum()),
            "split": {"kind": "ogb-link", "name": name, "dir": str(root.resolve() / "split" / name)} if links else
                     {"kind": "ogb", "name": name, "sizes": [int(masks[mask].sum()) for mask in MASKS]}}
    return Graph.from_adjacency(adj, source=str(root), directed=directed, x=x,
                                y=None if y is None else torch.from_numpy(y), name=dataset_name(root),
                                num_classes=num_classes, meta=meta, **masks)


def _edges(path: Path, n: int, m: int, edges_file: Path):
    table = _table(path, columns=(2,), names=("source node id", "target node id"))
    if len(table) != m:
        raise GraphError(f"{path}: {len(table)} edges, but {edges_file.name} says {m}")
    check_ids(table, table.ints, n, 0, ("source node id", "target node id"))
    return table.ints[:, 0], table.ints[:, 1]


# A line that is empty or NaN marks an unlabeled node (papers100M, or labels written as
# floats by pandas); blanking the NaNs lets the integer parser skip those lines.
_NAN_LINE = re.compile(rb"^[ \t]*nan[ \t\r]*$", re.I | re.M)


def _labels(path: Path, n: int, nodes_file: Path):
    """(labels with 0 for unlabeled nodes, labeled mask, class count). Line ``i`` holds
    node ``i``'s label, so the file must have exactly one line per node. A file whose lines
    hold several numbers (ogbn-proteins: 112 binary targets) gives a float32 matrix of targets
    [n, T], NaN for unlabeled nodes, and T."""
    data = read_bytes(path)
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    if lines != n:
        raise GraphError(f"{path}: {lines} labels (one per line), but {nodes_file.name} says "
                         f"{n} nodes")
    if _NAN_LINE.search(data):
        data = _NAN_LINE.sub(b"", data)
    first = next((line for line in data.split(b"\n", 64)[:64]
                  if line.strip() and line.lstrip()[:1] not in (b"#", b"%")), b"")
    if len(first.replace(b",", b" ").split()) > 1:
        return _targets(data, path, n)
    table = parse_table(data, path, columns=(1,), int_columns=1, names=("label",))
    values = table.ints[:, 0]
    if values.size and values.min() < 0:
        row = int(np.argmin(values))
        raise table.error(row, f"negative label {int(values[row])}")
    nodes = table.lines - 1
    y = np.zeros(n, dtype=np.int64)
    y[nodes] = values
    labeled = np.zeros(n, dtype=bool)
    labeled[nodes] = True
    return y, labeled, int(values.max()) + 1 if values.size else None


def _targets(data: bytes, path: Path, n: int):
    """(targets [n, T] float32 with NaN rows for unlabeled nodes, labeled mask, T) of a label
    file with T columns."""
    table = parse_table(data, path, columns=None, int_columns=0, names=())
    nodes = table.lines - 1
    y = np.full((n, table.floats.shape[1]), np.nan, dtype=np.float32)
    y[nodes] = table.floats
    labeled = np.zeros(n, dtype=bool)
    labeled[nodes] = True
    return y, labeled, int(y.shape[1])


def _features(path: Path, n: int, nodes_file: Path) -> torch.Tensor:
    table = _table(path, columns=None, int_columns=0, names=())
    if len(table) != n:
        raise GraphError(f"{path}: {len(table)} feature rows, but {nodes_file.name} says "
                         f"{n} nodes")
    return torch.from_numpy(table.floats.astype(np.float32))


def _link_split(root: Path, name: Optional[str], folders: list) -> str:
    """The name of the link-prediction split folder to use: the one there is, or ``name``."""
    present = [p.name for p in folders]
    if name is None and len(present) > 1:
        raise GraphError(f"{root / 'split'}: {len(present)} link splits ({', '.join(present)}); pick one "
                         f"with the option split=NAME, e.g. '{root}:split={present[0]}'")
    if name is not None and name not in present:
        raise GraphError(f"{root / 'split'}: no link split '{name}' (holding train.pt); present: {', '.join(present)}")
    return name or present[0]


def split_scheme(root: Path, name: Optional[str], needed: Optional[str]) -> Optional[str]:
    """The folder under ``root/split`` to read: ``name``, else the only one there. With none
    there: None, or, where a split is ``needed`` (what a directory must hold), a GraphError."""
    folder = root / "split"
    present = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    if name is None:
        if not present:
            if needed is None:
                return None
            raise GraphError(f"{folder}: no split folder; {needed}")
        if len(present) > 1:
            raise GraphError(f"{folder}: {len(present)} splits ({', '.join(present)}); pick one "
                             f"with the option split=NAME, e.g. '{root}:split={present[0]}'")
        return present[0]
    if name not in present:
        raise GraphError(f"{folder}: no split '{name}'; present: {', '.join(present) or 'none'}")
    return name


def _split(root: Path, name: Optional[str], n: int, labeled: np.ndarray):
    """The chosen split folder's name and its masks, after checking that every id is a
    labeled node in range and that no node is listed twice."""
    folder = root / "split"
    name = split_scheme(root, name, "an OGB dataset directory holds split/<name>/{train,valid,test}.csv.gz")
    tables = [_table(_find(folder / name, part), columns=(1,), int_columns=1,
                     names=("node id",)) for part in SETS]
    for table in tables:
        check_ids(table, table.ints, n, 0, ("node id",))
        unlabeled = np.flatnonzero(~labeled[table.ints[:, 0]])
        if unlabeled.size:
            row = int(unlabeled[0])
            raise table.error(row, f"node {int(table.ints[row, 0])} has no label")
    _check_disjoint(tables)
    return name, {mask: index_mask(n, table.ints[:, 0]) for mask, table in zip(MASKS, tables)}


def _check_disjoint(tables: list) -> None:
    """Raise at the first line (in reading order: train, valid, test) whose node was
    already listed, naming where it was first."""
    ids = np.concatenate([t.ints[:, 0] for t in tables])
    which = np.repeat(np.arange(len(tables)), [len(t) for t in tables])
    rows = np.concatenate([np.arange(len(t)) for t in tables])
    order = np.argsort(ids, kind="stable")  # equal ids stay in reading order
    again = np.flatnonzero(ids[order][1:] == ids[order][:-1])
    if not again.size:
        return
    first, second = order[again], order[again + 1]
    pick = int(np.argmin(second))  # the earliest repeat in reading order
    a, b = int(first[pick]), int(second[pick])
    earlier = tables[which[a]]
    raise tables[which[b]].error(int(rows[b]), f"node {int(ids[b])} is already in "
                                               f"{Path(earlier.source).name} line "
                                               f"{int(earlier.lines[rows[a]])}")

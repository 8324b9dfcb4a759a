"""Typed (heterogeneous) node-property datasets in OGB's directory layout (ogbn-mag), read from
disk as they are:

    <dir>/raw/num-node-dict.csv.gz                    a header line of node type names, then one
                                                      line of their counts
    <dir>/raw/relations/<src>___<rel>___<dst>/edge.csv.gz
                                                      'src,dst' per edge, the types' local ids
    <dir>/raw/node-feat/<type>/node-feat.csv.gz       one row of floats per node (optional)
    <dir>/raw/node-label/<type>/node-label.csv.gz     one class id per node (target types)
    <dir>/split/<scheme>/<type>/{train,valid,test}.csv.gz
                                                      local ids of each set (target types)

Every file may also be stored uncompressed (``.csv``). A relation folder's
``num-edge-list.csv.gz``, when present, must agree with its edges; other files (ogbn-mag's
``edge_reltype``, ``node_year``) are not read. With several split schemes the ``split`` option
names one. The node types keep the order of ``num-node-dict``; the relations are read in sorted
folder order. Loads as ``gnnmesh.typed.to_graph`` of the typed graph (``add_reverse`` an option).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..errors import GraphError
from ..graph import Graph
from ..typed import NodeType, Relation, TypedGraph, to_graph
from ._build import MASKS, index_mask
from ._io import decode_text, file_stat, read_bytes
from .files import check_ids
from .ogb import SETS, _check_disjoint, _features, _find, _labels, _table, dataset_name, split_scheme
from .options import Option

LOADER_VERSION = 1
LAYOUT = "raw/num-node-dict.csv.gz, raw/relations/<src>___<rel>___<dst>/edge.csv.gz, " \
         "raw/node-label/<type>/node-label.csv.gz, split/<scheme>/<type>/{train,valid,test}.csv.gz"
FOLDER_JOINER = "___"  # <src>___<rel>___<dst>

OPTIONS = {
    "split": Option(None, str, "folder under split/ to use (needed when there are several)", optional=True),
    "add_reverse": Option(False, bool, "add every relation's reverse (dst, rev_<name>, src)"),
}


def source_files(root: Path) -> list:
    """Cache-key stamps of every file of the layout, so that editing any one of them (or adding
    a relation, a type's features or a split) makes a new cache entry."""
    root = Path(root)
    files = sorted(p for pattern in ("raw/*.csv*", "raw/*/*/*.csv*", "split/*/*/*.csv*") for p in root.glob(pattern))
    return [file_stat(p) for p in files if p.is_file()]


def is_typed_ogb_dir(path: Path) -> bool:
    return (Path(path) / "raw" / "relations").is_dir()


def load_ogb_typed(root: Path, *, split=None, add_reverse=False) -> Graph:
    typed = read_ogb_typed(root, split=split)
    graph = to_graph(typed, add_reverse=add_reverse)
    graph.meta.update({"source": "OGB typed node-property directory", "source_dir": str(root)})
    return graph


def read_ogb_typed(root: Path, *, split: Optional[str] = None) -> TypedGraph:
    """The directory ``root`` as a TypedGraph."""
    root = Path(root)
    raw = root / "raw"
    counts_file = _required(raw, "num-node-dict")
    counts = _node_counts(counts_file)
    labels = {}
    for name, n in counts.items():
        path = _find(raw / "node-label" / name, "node-label", required=False)
        if path is not None:
            labels[name] = _type_labels(path, n, counts_file)
    masks = _split(root, split, counts, labels)
    node_types = []
    for name, n in counts.items():
        path = _find(raw / "node-feat" / name, "node-feat", required=False)
        x = None if path is None else _features(path, n, counts_file)
        y = None if name not in labels else torch.from_numpy(labels[name][0])
        node_types.append(NodeType(name, n, x=x, y=y, **masks.get(name, {})))
    relations = [_relation(folder, counts) for folder in sorted(p for p in (raw / "relations").iterdir() if p.is_dir())]
    return TypedGraph(node_types, relations, name=dataset_name(root))


def _required(folder: Path, name: str) -> Path:
    path = _find(folder, name, required=False)
    if path is None:
        raise GraphError(f"{folder / name}.csv.gz: file not found (nor {name}.csv): a typed OGB dataset "
                         f"directory holds {LAYOUT}")
    return path


def _node_counts(path: Path) -> dict:
    """``{type name: count}`` in the file's order, from its header line and its line of counts."""
    lines = [(i + 1, line.strip()) for i, line in enumerate(decode_text(read_bytes(path), path).splitlines())]
    lines = [(number, line) for number, line in lines if line]
    if len(lines) != 2:
        raise GraphError(f"{path}: expected a header line of node type names and one line of counts, got "
                         f"{len(lines)} non-empty lines")
    (_, header), (number, values) = lines
    names, values = [n.strip() for n in header.split(",")], [v.strip() for v in values.split(",")]
    if len(values) != len(names):
        raise GraphError(f"{path} line {number}: {len(values)} counts for {len(names)} node types")
    counts = {}
    for name, value in zip(names, values):
        if not value.isdigit():
            raise GraphError(f"{path} line {number}: count {value!r} of node type {name!r} is not an integer >= 0")
        if name in counts:
            raise GraphError(f"{path} line 1: node type {name!r} is named twice")
        counts[name] = int(value)
    return counts


def _type_labels(path: Path, n: int, counts_file: Path) -> tuple:
    """(class ids [n] with 0 for unlabeled nodes, labeled mask) of one type's label file."""
    y, labeled, _ = _labels(path, n, counts_file)
    if y.ndim != 1:
        raise GraphError(f"{path}: {y.shape[1]} numbers per line; a typed graph's labels are one class id per node")
    return y, labeled


def _relation(folder: Path, counts: dict) -> Relation:
    parts = folder.name.split(FOLDER_JOINER)
    if len(parts) != 3:
        raise GraphError(f"{folder}: a relation folder is named <src>{FOLDER_JOINER}<relation>{FOLDER_JOINER}<dst>")
    src, name, dst = parts
    for end in (src, dst):
        if end not in counts:
            raise GraphError(f"{folder}: unknown node type {end!r}; num-node-dict names {', '.join(counts)}")
    table = _table(_required(folder, "edge"), columns=(2,), names=(f"source {src} id", f"destination {dst} id"))
    check_ids(table, table.ints[:, :1], counts[src], 0, (f"source {src} id",))
    check_ids(table, table.ints[:, 1:], counts[dst], 0, (f"destination {dst} id",))
    count_file = _find(folder, "num-edge-list", required=False)
    if count_file is not None:
        stated = _table(count_file, columns=(1,), int_columns=1, names=("edge count",))
        if len(stated) != 1 or int(stated.ints[0, 0]) != len(table):
            raise GraphError(f"{table.source}: {len(table)} edges, but {count_file.name} says "
                             f"{', '.join(str(int(v)) for v in stated.ints[:, 0])}")
    return Relation(src, name, dst, torch.from_numpy(np.ascontiguousarray(table.ints.T)))


def _split(root: Path, name: Optional[str], counts: dict, labels: dict) -> dict:
    """``{type: masks}`` of the chosen split scheme, every id checked: in range, labeled, in one set."""
    folder = root / "split"
    name = split_scheme(root, name, "labeled node types need split/<scheme>/<type>/{train,valid,test}.csv.gz"
                        if labels else None)
    if name is None:
        return {}
    masks = {}
    for type_folder in sorted(p for p in (folder / name).iterdir() if p.is_dir()):
        node_type = type_folder.name
        if node_type not in counts:
            raise GraphError(f"{type_folder}: unknown node type {node_type!r}; num-node-dict names {', '.join(counts)}")
        if node_type not in labels:
            raise GraphError(f"{type_folder}: node type {node_type!r} has a split but no "
                             f"raw/node-label/{node_type}/node-label.csv.gz")
        n, labeled = counts[node_type], labels[node_type][1]
        tables = [_table(_required(type_folder, part), columns=(1,), int_columns=1, names=(f"{node_type} id",))
                  for part in SETS]
        for table in tables:
            check_ids(table, table.ints, n, 0, (f"{node_type} id",))
            unlabeled = np.flatnonzero(~labeled[table.ints[:, 0]])
            if unlabeled.size:
                row = int(unlabeled[0])
                raise table.error(row, f"{node_type} {int(table.ints[row, 0])} has no label")
        _check_disjoint(tables)
        masks[node_type] = {mask: index_mask(n, table.ints[:, 0]) for mask, table in zip(MASKS, tables)}
    for node_type in labels:
        if node_type not in masks:
            raise GraphError(f"{folder / name}: no split of the labeled node type {node_type!r} "
                             f"({node_type}/{{train,valid,test}}.csv.gz)")
    return masks

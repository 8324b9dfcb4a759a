"""MUSAE/FEATHER social graphs (Rozemberczki et al.): Facebook page-page, GitHub, Deezer
Europe, LastFM Asia and the seven Twitch graphs.

Each is an undirected edge csv (header line), a target csv (node id + label column) and a
json of sparse binary features ``{"node": [feature ids]}``, either as plain/gzipped files
or as members of the SNAP zip. Features become a dense float32 0/1 matrix by default
(``features='sparse'`` gives a torch sparse CSR tensor, ``'none'`` skips them): Deezer is
28,281 x 31,241, i.e. 3.5 GB dense. There is no official split, so a seeded stratified
random split is drawn. Self-loops (179 in Facebook) are dropped, duplicates merged.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from ..errors import GraphError
from ..graph import Graph
from ..structured import TooDeep, loads_json
from ._build import adjacency_from_edges, csr_features, encode_labels, random_split
from ._io import decode_text, read_bytes, read_zip_member
from ._text import parse_table

Source = Union[Path, tuple]  # a file, or (zip file, member)


def read_source(src: Source) -> tuple[bytes, str]:
    """Content and display name of a file or zip member."""
    if isinstance(src, tuple):
        return read_zip_member(*src), f"{src[0]}:{src[1]}"
    return read_bytes(src), str(src)


def read_targets(src: Source, id_column: str, label_column: str):
    """(labels [n], class names or None, duplicate rows) from a csv with a header row.
    Every node 0..n-1 must have a row; a repeated row must repeat the same label."""
    data, where = read_source(src)
    reader = csv.reader(io.StringIO(decode_text(data, where)))
    header = next(reader, None)
    if not header:
        raise GraphError(f"{where}: empty file, expected a header row")
    header = [h.strip() for h in header]
    for column in (id_column, label_column):
        if column not in header:
            raise GraphError(f"{where} line 1: no column '{column}' in header {header}")
    ci, cl = header.index(id_column), header.index(label_column)
    labels: dict = {}
    lines: dict = {}
    duplicates = 0
    for row in reader:
        if not row or not any(cell.strip() for cell in row):
            continue
        line = reader.line_num
        if len(row) != len(header):
            raise GraphError(f"{where} line {line}: expected {len(header)} columns, got {len(row)}")
        try:
            node = int(row[ci])
        except ValueError:
            raise GraphError(f"{where} line {line}: non-integer node id '{row[ci]}'") from None
        if node < 0:
            raise GraphError(f"{where} line {line}: negative node id {node}")
        label = row[cl].strip()
        if node in labels:
            if labels[node] != label:
                raise GraphError(f"{where} line {line}: node {node} listed again (first on line "
                                 f"{lines[node]}) with a different {label_column}")
            duplicates += 1
            continue
        labels[node], lines[node] = label, line
    if not labels:
        raise GraphError(f"{where}: no target rows")
    n = max(labels) + 1
    if len(labels) != n:
        missing = next(i for i in range(n) if i not in labels)
        raise GraphError(f"{where}: no row for node {missing} ({n - len(labels)} of {n} nodes "
                         f"have no {label_column})")
    values = [labels[i] for i in range(n)]
    if all(v.lstrip("-").isdigit() for v in values):
        values = [int(v) for v in values]
    y, names = encode_labels(values)
    return y, names, duplicates


def read_feature_json(src: Source, n: int, dim: Optional[int], mode: str):
    """Binary node features from ``{"node": [feature ids]}``; ``dim`` defaults to the
    largest id + 1. Nodes missing from the json get an all-zero row."""
    data, where = read_source(src)
    try:
        table = loads_json(decode_text(data, where))
    except json.JSONDecodeError as exc:
        raise GraphError(f"{where} line {exc.lineno}: invalid JSON ({exc.msg})") from exc
    except TooDeep as exc:
        raise GraphError(f"{where}: invalid JSON ({exc})") from None
    if not isinstance(table, dict):
        raise GraphError(f"{where}: expected a JSON object mapping node ids to feature ids")
    keys, lists = list(table.keys()), list(table.values())
    try:
        nodes = np.array([int(k) for k in keys], dtype=np.int64)
    except ValueError:
        bad = next(k for k in keys if not k.strip().lstrip("-").isdigit())
        raise GraphError(f"{where}: key '{bad}' is not a node id") from None
    if any(type(v) is not list for v in lists):
        bad = next(k for k, v in zip(keys, lists) if type(v) is not list)
        raise GraphError(f"{where}: node '{bad}': expected a list of feature ids")
    flat = list(itertools.chain.from_iterable(lists))
    if not set(map(type, flat)) <= {int}:
        bad_node = next(k for k, v in zip(keys, lists) if any(type(f) is not int for f in v))
        raise GraphError(f"{where}: node '{bad_node}': feature ids must be integers")
    cols = np.array(flat, dtype=np.int64)
    rows = np.repeat(nodes, [len(v) for v in lists])
    if nodes.size and (nodes.min() < 0 or nodes.max() >= n):
        bad = int(nodes[(nodes < 0) | (nodes >= n)][0])
        raise GraphError(f"{where}: node id {bad} out of range for {n} nodes")
    if dim is None:
        dim = int(cols.max()) + 1 if cols.size else 0
    if cols.size and (cols.min() < 0 or cols.max() >= dim):
        i = int(np.flatnonzero((cols < 0) | (cols >= dim))[0])
        raise GraphError(f"{where}: node '{int(rows[i])}' has feature id {int(cols[i])}, out of "
                         f"range for {dim} features")
    return csr_features(rows, cols, (n, dim), mode)


def read_edges(src: Source, n: int):
    data, where = read_source(src)
    table = parse_table(data, where, columns=(2,), allow_header=True)
    if len(table) == 0:
        raise GraphError(f"{where}: no edges")
    bad = (table.ints < 0) | (table.ints >= n)
    if bad.any():
        row, col = (int(v) for v in np.argwhere(bad)[0])  # row-major: the earliest line
        value = int(table.ints[row, col])
        raise table.error(row, f"negative node id {value}" if value < 0 else
                          f"node id {value} out of range for {n} nodes (from the target file)")
    return table.ints[:, 0], table.ints[:, 1]


def load_musae(files: dict, name: str, *, id_column: str = "id", label_column: str = "target",
               feature_dim: Optional[int] = None, features: str = "dense", split_seed: int = 0,
               train_frac: float = 0.6, val_frac: float = 0.2):
    """``files`` has roles 'edges', 'target' and optionally 'features' (None for LastFM,
    whose feature file is missing upstream: x is None there)."""
    y, class_names, duplicates = read_targets(files["target"], id_column, label_column)
    n = y.shape[0]
    src, dst = read_edges(files["edges"], n)
    loops = int(np.count_nonzero(src == dst))
    adj = adjacency_from_edges(src, dst, n, symmetrize=True, drop_self_loops=True)
    x = None
    if files.get("features") is not None and features != "none":
        x = read_feature_json(files["features"], n, feature_dim, features)
    masks, split = random_split(n, y, train_frac, val_frac, split_seed)
    meta = {"source": "MUSAE/FEATHER (Rozemberczki et al.)", "split": split,
            "self_loops_removed": loops, "label": label_column}
    if class_names is not None:
        meta["class_names"] = class_names
    if duplicates:
        meta["duplicate_target_rows"] = duplicates
    if files.get("features") is None:
        meta["missing"] = "no feature file: x is None (see structural_features)"
    return Graph.from_adjacency(adj, source=name, directed=False, x=x, y=torch.from_numpy(y), name=name,
                      num_classes=int(y.max()) + 1 if class_names is None else len(class_names),
                      meta=meta, **masks)

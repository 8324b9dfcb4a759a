"""A graph described by a small TOML file (``--dataset my.toml``): which of the user's own files
hold its edges, features, labels and split. Paths are relative to the TOML file.

    name = "roads"            # optional; default: the TOML file's name
    directed = false          # optional, as for edge-list files: omitted keeps the edges as
                              # listed, false adds every reverse edge, true marks it directed
    num_nodes = 6             # optional; default: the features' or labels' rows, else largest id + 1
    remove_self_loops = false

    [edges]                   # required
    file = "edges.csv"        # delimited text (.csv, .tsv, .txt; .gz too) or Parquet
    source = "src"            # a header name or a 0-based position; default 0
    target = "dst"            # default 1
    weight = "w"              # optional
    header = true             # text: the first line names the columns; default false
    delimiter = ","           # text: one of , tab space ; |  (default: commas, tabs or spaces)

    [features]                # optional: .npy [N, F], or every column (or ``columns``) of a table
    file = "x.npy"

    [labels]                  # optional: .npy [N] class ids ([N, T]: targets), or one column
    file = "labels.csv"       # of a table (``column``, ``header``, ``delimiter`` as above)

    [split]                   # optional: node ids (.npy of integers, or one id a line) or a
    train = "train.txt"       # .npy boolean mask of N; without it a seeded random split
    val = "val.txt"           # (options split_seed, train_frac, val_frac)
    test = "test.txt"

Every problem is one GraphError naming the TOML file and the field, or the data file and its
line or row.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .. import structured
from ..errors import GraphError
from ..graph import Graph
from ._build import MASKS, adjacency_from_edges, random_split
from ._io import _os_error as os_error, file_stat, read_raw
from .columns import DELIMITERS, Rows, all_columns, as_ids, kind_of, read_columns, read_npy
from .files import _SPARSE_IDS_FACTOR, _SPARSE_IDS_MIN_NODES, check_ids, node_count_of
from .options import SPLIT

SUFFIX = ".toml"
LOADER_VERSION = 1
OPTIONS = dict(SPLIT)

TABLE_KEYS = {"file", "header", "delimiter"}
SECTIONS = {
    "edges": TABLE_KEYS | {"source", "target", "weight"},
    "features": TABLE_KEYS | {"columns"},
    "labels": TABLE_KEYS | {"column"},
    "split": {"train", "val", "test"},
}
TOP_KEYS = {"name", "directed", "num_nodes", "remove_self_loops"}
SPLIT_MASKS = dict(zip(("train", "val", "test"), MASKS))


@dataclass
class Description:
    """A checked description: its fields, and the files it names (resolved)."""
    path: Path
    name: str
    directed: Optional[bool]
    num_nodes: Optional[int]
    remove_self_loops: bool
    sections: dict = field(default_factory=dict)  # section -> its table, 'file' resolved

    def field_error(self, key: str, message: str) -> GraphError:
        return GraphError(f"{self.path}: field '{key}' {message}")

    def files(self) -> list:
        """Every data file the description names, in a fixed order."""
        out = [s["file"] for name, s in sorted(self.sections.items()) if name != "split"]
        return out + [p for _, p in sorted(self.sections.get("split", {}).items())]

    def sources(self) -> list:
        """Cache-key stamps: the description and every file it names."""
        stamps = []
        for path in [self.path] + self.files():
            try:
                stamps.append(file_stat(path))
            except OSError as exc:
                raise os_error(path, exc) from exc
        return stamps


def read_description(path: Path) -> Description:
    """The TOML file at ``path``, its fields checked and its files resolved beside it."""
    path = Path(path)
    raw = read_raw(path)
    try:
        data = structured.load_toml(io.BytesIO(raw))
    except ValueError as exc:  # TOMLDecodeError, TooDeep
        raise GraphError(f"{path}: not a valid dataset description ({' '.join(str(exc).split())})") from exc
    _known(path, "", data, TOP_KEYS | set(SECTIONS))
    if "edges" not in data:
        raise GraphError(f"{path}: field 'edges' is missing: the table [edges] names the edges' file")
    described = Description(path, _text(path, data, "name", path.stem) or path.stem,
                            _flag(path, data, "directed", None), _count(path, data, "num_nodes"),
                            bool(_flag(path, data, "remove_self_loops", False)))
    for section in SECTIONS:
        if section in data:
            described.sections[section] = _section(path, section, data[section])
    return described


def _known(path: Path, prefix: str, table, allowed: set) -> None:
    if not isinstance(table, dict):
        raise GraphError(f"{path}: field '{prefix.rstrip('.')}' must be a table")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise GraphError(f"{path}: unknown field '{prefix}{unknown[0]}' (valid: {', '.join(sorted(allowed))})")


def _text(path, table, key, default=None, prefix=""):
    value = table.get(key, default)
    if value is not None and not isinstance(value, str):
        raise GraphError(f"{path}: field '{prefix}{key}' must be a string, got {value!r}")
    return value


def _flag(path, table, key, default, prefix=""):
    value = table.get(key, default)
    if value is not None and not isinstance(value, bool):
        raise GraphError(f"{path}: field '{prefix}{key}' must be true or false, got {value!r}")
    return value


def _count(path, table, key, prefix=""):
    value = table.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise GraphError(f"{path}: field '{prefix}{key}' must be a whole number >= 1, got {value!r}")
    return value


def _pick(path, table, key, default, prefix):
    value = table.get(key, default)
    if value is None or isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise GraphError(f"{path}: field '{prefix}{key}' must be a column name or a position >= 0, got {value!r}")


def _file(path: Path, value, key: str) -> Path:
    if not isinstance(value, str) or not value:
        raise GraphError(f"{path}: field '{key}' must be a file path, got {value!r}")
    return (path.parent / value).expanduser()


def _section(path: Path, name: str, table) -> dict:
    prefix = f"{name}."
    _known(path, prefix, table, SECTIONS[name])
    if name == "split":
        return {part: _file(path, value, prefix + part) for part, value in table.items()}
    if "file" not in table:
        raise GraphError(f"{path}: field '{prefix}file' is missing")
    out = {"file": _file(path, table["file"], prefix + "file"),
           "header": bool(_flag(path, table, "header", False, prefix)),
           "delimiter": _text(path, table, "delimiter", None, prefix)}
    if out["delimiter"] is not None and out["delimiter"] not in DELIMITERS:
        raise GraphError(f"{path}: field '{prefix}delimiter' must be one of ',', 'tab', ' ', ';', '|'; "
                         f"got {out['delimiter']!r}")
    if name == "edges":
        for key, default in (("source", 0), ("target", 1), ("weight", None)):
            out[key] = _pick(path, table, key, default, prefix)
    elif name == "labels":
        out["column"] = _pick(path, table, "column", 0, prefix)
    elif "columns" in table:
        columns = table["columns"]
        if not isinstance(columns, list) or not columns:
            raise GraphError(f"{path}: field '{prefix}columns' must be a non-empty list, got {columns!r}")
        out["columns"] = [_pick(path, {"c": c}, "c", None, prefix + "columns") for c in columns]
    return out


# -- the graph ------------------------------------------------------------------------------------

def load_described(path: Path, *, split_seed=0, train_frac=0.6, val_frac=0.2) -> Graph:
    """The graph the description at ``path`` names."""
    d = read_description(path)
    x = _features(d.sections["features"]) if "features" in d.sections else None
    y = _labels(d.sections["labels"]) if "labels" in d.sections else None
    src, dst, weights, n = _edges_of(d, _node_count(d, x, y))
    fields, meta = _node_data(d, x, y, n, dict(seed=split_seed, train_frac=train_frac, val_frac=val_frac))
    adj = adjacency_from_edges(src, dst, n, weights=weights, symmetrize=d.directed is False,
                               drop_self_loops=d.remove_self_loops)
    return Graph.from_adjacency(adj, source=str(d.path), directed=d.directed, name=d.name, meta=meta, **fields)


def _edges_of(d: Description, n: int) -> tuple:
    """(sources, targets, weights or None, node count): ids checked against the count, which
    is the largest id + 1 when the description gives none (``n`` < 0)."""
    src, dst, weights, rows = _edges(d.sections["edges"])
    ids = np.stack([src, dst], axis=1)
    names = ("source id", "target id")
    if n < 0:
        check_ids(rows, ids, None, 0, names)
        n = node_count_of(rows, ids, 0)  # refuses ids that are labels far apart
    elif not {"features", "labels"} & set(d.sections) and n > _SPARSE_IDS_MIN_NODES \
            and n > _SPARSE_IDS_FACTOR * 2 * len(rows):  # a count no file backs: bounded by the edges
        raise d.field_error("num_nodes", f"is {n:,} for {len(rows):,} edges and no node data; "
                                         f"renumber the nodes 0..N-1")
    check_ids(rows, ids, n, 0, names)
    return src, dst, weights, n


def _node_data(d: Description, x, y, n: int, split: dict) -> tuple:
    """The graph's node fields and meta: features, labels, and the split given or drawn."""
    fields: dict = {}
    meta: dict = {"source_file": str(d.path)}
    if x is not None:
        fields["x"] = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    if y is not None:
        fields["y"] = torch.from_numpy(y)
    if "split" in d.sections:
        fields.update(_split(d.sections["split"], n))
    elif y is not None:  # stratified by class ids; targets: a plain random split
        masks, meta["split"] = random_split(n, y if y.ndim == 1 else None, split["train_frac"],
                                            split["val_frac"], split["seed"])
        fields.update(masks)
    return fields, meta


def _node_count(d: Description, x, y) -> int:
    counts = {what: a.shape[0] for what, a in (("features", x), ("labels", y)) if a is not None}
    if d.num_nodes is not None:
        counts = {"num_nodes": d.num_nodes, **counts}
    if len(set(counts.values())) > 1:
        (first, a), *rest = counts.items()
        other, b = next((k, v) for k, v in rest if v != a)
        raise GraphError(f"{d.path}: field '{other}' gives {b} nodes, but '{first}' gives {a}")
    if counts:
        return next(iter(counts.values()))
    return -1  # from the edges: largest id + 1


def _edges(section: dict):
    picks = [section["source"], section["target"]] + ([section["weight"]] if section["weight"] is not None else [])
    columns = read_columns(section["file"], picks, header=section["header"], delimiter=section["delimiter"])
    rows = columns.rows
    if not len(columns.values[0]):
        raise GraphError(f"{section['file']}: no edges (only comments, headers or blank lines)")
    src = as_ids(columns.values[0], rows, "source id")
    dst = as_ids(columns.values[1], rows, "target id")
    weights = columns.values[2].astype(np.float64) if len(picks) == 3 else None
    return src, dst, weights, rows


def _features(section: dict) -> np.ndarray:
    path = section["file"]
    if kind_of(path) == "npy":
        x = read_npy(path)
        if x.ndim != 2:
            raise GraphError(f"{path}: features must be a matrix [nodes, features], got shape {list(x.shape)}")
        return x
    if "columns" in section:
        columns = read_columns(path, section["columns"], header=section["header"], delimiter=section["delimiter"])
    else:
        columns = all_columns(path, header=section["header"], delimiter=section["delimiter"])
    return np.stack(columns.values, axis=1) if columns.values else np.zeros((0, 0))


def _labels(section: dict) -> np.ndarray:
    path = section["file"]
    if kind_of(path) == "npy":
        y = read_npy(path)
        if y.ndim == 2:  # targets, one row per node
            return np.ascontiguousarray(y, dtype=np.float32)
        if y.ndim != 1:
            raise GraphError(f"{path}: labels must be [nodes] class ids or [nodes, T] targets, got shape "
                             f"{list(y.shape)}")
        rows = Rows(str(path), None, y.shape[0])
    else:
        columns = read_columns(path, [section["column"]], header=section["header"], delimiter=section["delimiter"])
        y, rows = columns.values[0], columns.rows
    ids = as_ids(y, rows, "class id")
    if ids.size and ids.min() < 0:
        raise rows.error(int(np.argmin(ids)), f"negative class id {int(ids.min())}")
    return ids


def _split(section: dict, n: int) -> dict:
    masks = {}
    for part, path in section.items():
        masks[SPLIT_MASKS[part]] = torch.from_numpy(_mask(path, n))
    return masks


def _mask(path: Path, n: int) -> np.ndarray:
    if kind_of(path) == "npy":
        values = read_npy(path)
        if values.ndim != 1:
            raise GraphError(f"{path}: a split file must be one list of node ids or a mask, got shape "
                             f"{list(values.shape)}")
        if values.dtype == bool:
            if values.shape[0] != n:
                raise GraphError(f"{path}: a mask of {values.shape[0]} entries for {n} nodes")
            return values
        rows = Rows(str(path), None, values.shape[0])
    else:
        columns = read_columns(path, [0])
        values, rows = columns.values[0], columns.rows
    ids = as_ids(values, rows, "node id")
    check_ids(rows, np.stack([ids, ids], axis=1), n, 0)
    mask = np.zeros(n, dtype=bool)
    mask[ids] = True
    return mask

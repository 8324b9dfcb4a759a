"""Graphs from generic files: edge lists, MatrixMarket and gnn-benchmark ``.npz``.

Direction convention for every file format: a line/entry ``i j`` (row i, column j) is the
edge ``i -> j``, as in SNAP edge lists, SuiteSparse graphs and scipy/networkx adjacency
matrices. gnnmesh stores it as ``adj[j, i]`` (rows = destinations).

``directed``: None keeps the edges as stored and calls the graph undirected when they
are symmetric (MatrixMarket 'symmetric' files always are); False adds every reverse edge
(a pair stored both ways with different weights keeps the larger); True keeps them and
marks the graph directed. Duplicate weighted entries are summed, as MatrixMarket does.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path
from typing import Optional

import numpy as np
import scipy.io
import scipy.sparse as sp
import torch

from ..errors import GraphError
from ..graph import Graph, check_csr
from ._build import MASKS, adjacency_from_edges, random_split
from ._io import read_bytes, read_raw
from ._text import parse_table
from .options import SPLIT, Option

EDGE_LIST_SUFFIXES = (".txt", ".edges", ".el", ".csv", ".tsv", ".edgelist")
FORMATS = ("edgelist", "mtx", "npz")

FILE_OPTIONS = {
    "format": Option(None, str, "file format; default: from the suffix", optional=True,
                     choices=FORMATS),
    "directed": Option(None, bool, "None: as stored (undirected if symmetric); false: add "
                                   "reverse edges; true: keep and mark directed", optional=True),
    "num_nodes": Option(None, int, "node count (edge lists; default: largest id + 1)",
                        optional=True),
    "index_base": Option(0, int, "id of the first node in an edge list", choices=(0, 1)),
    "weighted": Option(True, bool, "use a third column / matrix values as edge weights"),
    "remove_self_loops": Option(False, bool, "drop edges i -> i"),
    **SPLIT,
}


def detect_format(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(".mtx"):
        return "mtx"
    if name.endswith(".npz"):
        return "npz"
    if name.endswith(EDGE_LIST_SUFFIXES):
        return "edgelist"
    raise GraphError(f"{path}: unknown graph file type; expected an edge list "
                     f"({', '.join(EDGE_LIST_SUFFIXES)}), .mtx or .npz (optionally .gz), "
                     f"or pass format=edgelist|mtx|npz")


def graph_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz",) + EDGE_LIST_SUFFIXES + (".mtx", ".npz"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name or path.name


def load_file(path: Path, *, format=None, directed=None, num_nodes=None, index_base=0,
              weighted=True, remove_self_loops=False, split_seed=0, train_frac=0.6,
              val_frac=0.2):
    path = Path(path)
    kind = format or detect_format(path)
    split = dict(split_seed=split_seed, train_frac=train_frac, val_frac=val_frac)
    if kind == "npz":
        return load_npz(path, directed=directed, remove_self_loops=remove_self_loops, **split)
    common = dict(directed=directed, weighted=weighted, remove_self_loops=remove_self_loops,
                  num_nodes=num_nodes)
    if kind == "mtx":
        return load_mtx(path, **common)
    return load_edge_list(path, index_base=index_base, **common)


def _finish(path, src, dst, n, weights, *, directed, remove_self_loops, meta,
            symmetrize=None, **fields):
    if symmetrize is None:
        symmetrize = directed is False
    adj = adjacency_from_edges(src, dst, n, weights=weights, symmetrize=symmetrize,
                               drop_self_loops=remove_self_loops)
    return Graph.from_adjacency(adj, source=str(path), directed=directed, name=graph_name(path),
                      meta=meta, **fields)


def check_ids(table, ids: np.ndarray, n, base: int, names=("node id", "node id")):
    """Report the first line with an id < 0 or >= n. ``ids`` is [rows, 2], already shifted
    to 0-based; messages show the ids as written in the file."""
    low = ids < 0
    bad = low | (ids >= n) if n is not None else low
    if not bad.any():
        return
    row, col = (int(v) for v in np.argwhere(bad)[0])  # row-major: the earliest line
    value, what = int(ids[row, col]) + base, names[col]
    if low[row, col]:
        raise table.error(row, f"negative {what} {value}" if value < 0 else
                          f"{what} {value} is invalid: ids start at {base}")
    raise table.error(row, f"{what} {value} out of range for {n} nodes "
                           f"(ids {base}..{n - 1 + base})")


def read_id_table(path: Path, n: int, names: tuple, width: Optional[int] = None) -> np.ndarray:
    """The node ids of a comma- or space-separated file, [rows, columns] int64, each in
    [0, n): ``names`` name the columns in messages (the last one names any further column),
    ``width`` fixes the column count (default: ``len(names)``; 0: that of the first row). A
    header line is skipped; a ragged, non-integer or out-of-range line is a GraphError
    naming the file and the line."""
    data = read_bytes(path)
    if width is None:
        width = len(names)
    elif not width:
        width = max(_first_row_width(data), 1)
    names = tuple(names[i] if i < len(names) else names[-1] for i in range(width))
    table = parse_table(data, path, columns=(width,), int_columns=width, names=names, allow_header=True)
    check_ids(table, table.ints, n, 0, names)
    return table.ints


def _first_row_width(data: bytes) -> int:
    """The column count of the first line that holds numbers (comments and a header skipped)."""
    for line in data.splitlines():
        tokens = line.replace(b",", b" ").split()
        if tokens and tokens[0][:1] not in (b"#", b"%") and tokens[0].lstrip(b"+-")[:1].isdigit():
            return len(tokens)
    return 0


# Ids are node numbers: a graph has max id + 1 nodes. Far more nodes than the edges could
# touch means the ids are labels (hashes, user ids), which would allocate by the largest.
_SPARSE_IDS_MIN_NODES = 1 << 20
_SPARSE_IDS_FACTOR = 16


def node_count_of(table, ids: np.ndarray, base: int) -> int:
    n = int(ids.max()) + 1
    touched = 2 * len(table)  # at most this many distinct ids
    if n > _SPARSE_IDS_MIN_NODES and n > _SPARSE_IDS_FACTOR * touched:
        distinct = np.unique(ids).shape[0]
        row = int(np.argwhere(ids == n - 1)[0][0])
        raise table.error(row, f"node id {n - 1 + base} would make a graph of {n:,} nodes for "
                               f"{distinct:,} distinct ids; renumber the nodes 0..{distinct - 1} "
                               f"(or pass num_nodes)")
    return n


def load_edge_list(path: Path, *, directed=None, num_nodes=None, index_base=0, weighted=True,
                   remove_self_loops=False, one_based_note=None):
    """SNAP-style edge list: ``src dst [weight]`` per line, separated by whitespace or
    commas; ``#``/``%`` comment lines. A header line of words is allowed only as the first
    non-comment line of a ``.csv`` file."""
    data = read_bytes(path)
    is_csv = ".csv" in path.name.lower()
    table = parse_table(data, path, columns=(2, 3), allow_header=is_csv)
    if len(table) == 0:
        raise GraphError(f"{path}: no edges (only comments, headers or blank lines)")
    ids = table.ints - index_base
    check_ids(table, ids, num_nodes, index_base)
    n = int(num_nodes) if num_nodes is not None else node_count_of(table, ids, index_base)
    weights = table.floats[:, 0] if (table.floats is not None and weighted) else None
    meta = {"source_file": str(path), "file_edges": len(table)}
    if one_based_note:
        meta["note"] = one_based_note
    return _finish(path, ids[:, 0], ids[:, 1], n, weights, directed=directed,
                   remove_self_loops=remove_self_loops, meta=meta)


_BANNER = re.compile(rb"%%MatrixMarket[ \t]+(\S+)[ \t]+(\S+)[ \t]+(\S+)[ \t]+(\S+)", re.I)


def mtx_banner(first_line: bytes, path) -> tuple[str, str, str]:
    """(format, field, symmetry) of a MatrixMarket file's first line, lower case, once checked
    to be a real or pattern matrix a graph can be made of."""
    match = _BANNER.match(first_line.strip())
    if not match:
        raise GraphError(f"{path} line 1: malformed MatrixMarket banner "
                         f"'{first_line.decode('utf-8', 'replace').strip()}'")
    obj, fmt, field, symmetry = (m.decode("utf-8", "replace").lower() for m in match.groups())
    if obj != "matrix" or fmt not in ("coordinate", "array"):
        raise GraphError(f"{path} line 1: unsupported MatrixMarket object '{obj} {fmt}'")
    if field not in ("real", "double", "integer", "pattern") or symmetry == "hermitian":
        raise GraphError(f"{path} line 1: unsupported MatrixMarket field '{field} {symmetry}' "
                         f"(complex matrices are not graphs)")
    if symmetry not in ("general", "symmetric", "skew-symmetric"):
        raise GraphError(f"{path} line 1: unknown MatrixMarket symmetry '{symmetry}'")
    return fmt, field, symmetry


def mtx_size(stripped: bytes, lineno: int, path) -> tuple[int, int]:
    """(nodes, entries) of a coordinate file's size line ``rows columns entries``."""
    try:
        nrows, ncols, nnz = (int(t) for t in stripped.split())
    except ValueError:
        raise GraphError(f"{path} line {lineno}: expected the size line 'rows columns entries', "
                         f"got '{stripped.decode('utf-8', 'replace')}'") from None
    if min(nrows, ncols, nnz) < 0:
        raise GraphError(f"{path} line {lineno}: the size line 'rows columns entries' holds a negative number")
    if nrows != ncols:
        raise GraphError(f"{path} line {lineno}: matrix is {nrows} x {ncols}; a graph needs a "
                         f"square matrix")
    return nrows, nnz


def load_mtx(path: Path, *, directed=None, weighted=True, remove_self_loops=False,
             num_nodes=None):
    """MatrixMarket. Coordinate files are parsed by the vectorised reader (line-numbered
    errors, declared size and entry count enforced); dense 'array' files go through
    scipy.io.mmread. A file without the banner (like the DIMACS10 luxembourg_osm copy) is
    read as a 1-based ``row col [value]`` list."""
    data = read_bytes(path)
    if not data.lstrip().startswith(b"%%MatrixMarket"):
        return load_edge_list(path, directed=directed, num_nodes=num_nodes, index_base=1,
                              weighted=weighted, remove_self_loops=remove_self_loops,
                              one_based_note="no MatrixMarket banner: read as a 1-based "
                                             "'row col [value]' list")
    fmt, field, symmetry = mtx_banner(data.split(b"\n", 1)[0], path)
    if fmt == "array":
        return _load_mtx_array(path, data, directed, weighted, remove_self_loops)

    # Find the size line, then blank it so the table parser sees only entry lines
    # (blanking, not cutting, keeps line numbers right).
    start = 0
    lineno = 0
    for lineno, line in enumerate(data.split(b"\n"), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith(b"%"):
            break
        start += len(line) + 1
    else:
        raise GraphError(f"{path}: truncated: no size line after the MatrixMarket banner")
    nrows, nnz = mtx_size(stripped, lineno, path)
    end = data.find(b"\n", start)
    end = len(data) if end < 0 else end
    body = data[:start] + b" " * (end - start) + data[end:]
    pattern = field == "pattern"
    table = parse_table(body, path, columns=(2,) if pattern else (3,),
                        names=("row index", "column index", "value"))
    if len(table) < nnz:
        raise GraphError(f"{path}: truncated: line {lineno} declares {nnz} entries, found "
                         f"{len(table)}")
    if len(table) > nnz:
        raise table.error(nnz, f"more entries than the {nnz} declared on line {lineno}")
    ids = table.ints - 1
    check_ids(table, ids, nrows, 1, ("row index", "column index"))
    src, dst = ids[:, 0], ids[:, 1]
    values = None if (pattern or not weighted) else table.floats[:, 0]
    symmetrize = directed is False
    if symmetry != "general":  # the file stores one triangle: add the mirror entries
        off = src != dst
        src, dst = np.concatenate([src, dst[off]]), np.concatenate([dst, src[off]])
        if values is not None:
            sign = -1.0 if symmetry == "skew-symmetric" else 1.0
            values = np.concatenate([values, sign * values[off]])
        symmetrize = False  # already both ways; a max over +-w would break skew-symmetry
        if directed is None and symmetry == "symmetric":
            directed = False
    meta = {"source_file": str(path), "mtx": f"{fmt} {field} {symmetry}", "file_entries": nnz}
    return _finish(path, src, dst, nrows, values, directed=directed, symmetrize=symmetrize,
                   remove_self_loops=remove_self_loops, meta=meta)


def _load_mtx_array(path, data, directed, weighted, remove_self_loops):
    try:
        dense = scipy.io.mmread(io.BytesIO(data))
    except ValueError as exc:
        match = re.match(r"Line (\d+): (.*)", str(exc))
        if match:
            raise GraphError(f"{path} line {match.group(1)}: {match.group(2)}") from exc
        raise GraphError(f"{path}: {exc}") from exc
    mat = sp.coo_matrix(np.asarray(dense))
    if mat.shape[0] != mat.shape[1]:
        raise GraphError(f"{path}: matrix is {mat.shape[0]} x {mat.shape[1]}; a graph needs a "
                         f"square matrix")
    if not np.all(np.isfinite(mat.data)):
        raise GraphError(f"{path}: non-finite matrix value")
    meta = {"source_file": str(path), "mtx": "array"}
    return _finish(path, mat.row, mat.col, mat.shape[0], mat.data if weighted else None,
                   directed=directed, remove_self_loops=remove_self_loops, meta=meta)


# -- gnn-benchmark (Shchur et al., "Pitfalls of GNN evaluation") .npz ----------------------

def _npz_field(z, key, path):
    try:
        return z[key]
    except ValueError as exc:  # e.g. an object array, which would need pickle
        raise GraphError(f"{path}: field '{key}' cannot be read without pickle ({' '.join(str(exc).split())})") from exc
    except Exception as exc:  # zipfile and numpy raise several types for damaged bytes
        raise GraphError(f"{path}: field '{key}' is truncated or corrupt ({' '.join(str(exc).split())})") from exc


def _npz_csr(z, prefix, path):
    keys = [f"{prefix}_{k}" for k in ("data", "indices", "indptr", "shape")]
    data, indices, indptr, shape = (_npz_field(z, k, path) for k in keys)
    if shape.ndim != 1 or shape.shape[0] != 2 or not np.issubdtype(shape.dtype, np.integer) or shape.min() < 0:
        raise GraphError(f"{path}: field '{prefix}_shape' must be two non-negative integers, got {shape.tolist()}")
    check_csr(indptr, indices, shape, str(path), names=keys[2:0:-1])
    if data.dtype.kind not in "biuf":
        raise GraphError(f"{path}: field '{prefix}_data' must hold real numbers, got {data.dtype}")
    if data.dtype == np.float16:  # scipy.sparse holds no half floats; float32 holds them exactly
        data = data.astype(np.float32)
    if data.shape != indices.shape:
        raise GraphError(f"{path}: field '{prefix}_data' has shape {list(data.shape)}, expected "
                         f"[{indices.shape[0]}] (one value per entry)")
    try:
        return sp.csr_matrix((data, indices, indptr), shape=tuple(int(s) for s in shape))
    except (ValueError, TypeError) as exc:
        raise GraphError(f"{path}: fields '{prefix}_*' do not form a valid CSR matrix ({exc})") \
            from exc


def load_npz(path: Path, *, directed=None, remove_self_loops=False, split_seed=0,
             train_frac=0.6, val_frac=0.2):
    """Keys: ``adj_data/adj_indices/adj_indptr/adj_shape`` (CSR, row = source), node
    features as ``attr_data/attr_indices/attr_indptr/attr_shape`` or dense ``attr_matrix``,
    ``labels`` (class ids, one int per node; or targets, an [N, T] matrix read as float32: 0/1
    for multilabel, any numbers for regression), optional boolean ``train_mask``/``val_mask``/``test_mask``
    and scalar ``num_classes``. Other keys (node_names, class_names, ...) are ignored; they
    are object arrays that would need pickle. Without masks a random split is drawn."""
    raw = read_raw(path)
    try:
        z = np.load(io.BytesIO(raw), allow_pickle=False)
        keys = set(z.files)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise GraphError(f"{path}: truncated or corrupt .npz file ({exc})") from exc
    if not {"adj_data", "adj_indices", "adj_indptr", "adj_shape"} <= keys:
        raise GraphError(f"{path}: missing adjacency fields adj_data/adj_indices/adj_indptr/"
                         f"adj_shape (found: {', '.join(sorted(keys)) or 'none'})")
    adj = _npz_csr(z, "adj", path)
    if adj.shape[0] != adj.shape[1]:
        raise GraphError(f"{path}: field 'adj_shape' is {list(adj.shape)}; must be square")
    n = adj.shape[0]
    fields: dict = {}
    if {"attr_data", "attr_indices", "attr_indptr", "attr_shape"} <= keys:
        attr, attr_key = _npz_csr(z, "attr", path).toarray(), "attr_shape"
    elif "attr_matrix" in keys:
        attr, attr_key = _npz_field(z, "attr_matrix", path), "attr_matrix"
    else:
        attr = None
    if attr is not None:
        if attr.ndim != 2 or attr.shape[0] != n:
            raise GraphError(f"{path}: field '{attr_key}' has {attr.shape[0]} rows, expected {n} "
                             f"(nodes in adj_shape)")
        if attr.dtype.kind not in "biuf":
            raise GraphError(f"{path}: field '{attr_key}' must hold real numbers, got {attr.dtype}")
        fields["x"] = torch.from_numpy(np.ascontiguousarray(attr, dtype=np.float32))
    y = None  # class ids, which stratify a drawn split
    if "labels" in keys:
        labels = _npz_field(z, "labels", path)
        if labels.ndim not in (1, 2) or labels.shape[0] != n:
            raise GraphError(f"{path}: field 'labels' has shape {list(labels.shape)}, expected [{n}] (class ids) "
                             f"or [{n}, T] (T targets per node)")
        if labels.dtype.kind not in "biuf":  # booleans: classes 0 and 1, or 0/1 targets
            raise GraphError(f"{path}: field 'labels' must hold class ids or numeric targets, got {labels.dtype}")
        if labels.ndim == 2:  # targets
            fields["y"] = torch.from_numpy(np.ascontiguousarray(labels, dtype=np.float32))
        else:  # class ids
            if not np.issubdtype(labels.dtype, np.integer) and (not np.all(np.isfinite(labels))
                                                                or np.any(labels != np.round(labels))):
                raise GraphError(f"{path}: field 'labels' must hold integer class ids (targets of a regression: "
                                 f"an [{n}, 1] matrix)")
            y = labels.astype(np.int64)
            if y.size and y.min() < 0:  # checked before the split, which needs class ids >= 0
                node = int(np.argmin(y))
                raise GraphError(f"{path}: field 'labels' has a negative label {int(y[node])} "
                                 f"at node {node}")
            fields["y"] = torch.from_numpy(y)
    if "num_classes" in keys:
        classes = _npz_field(z, "num_classes", path).reshape(-1)
        if classes.shape != (1,) or classes.dtype.kind not in "iuf" or not float(classes[0]).is_integer():
            raise GraphError(f"{path}: field 'num_classes' must be one whole number, got {classes.tolist()[:4]}")
        fields["num_classes"] = int(classes[0])
    meta: dict = {"source_file": str(path)}
    given = [m for m in MASKS if m in keys]
    for m in given:
        mask = _npz_field(z, m, path)
        if mask.ndim != 1 or mask.shape[0] != n:
            raise GraphError(f"{path}: field '{m}' has shape {list(mask.shape)}, expected [{n}]")
        fields[m] = torch.from_numpy(mask.astype(bool))
    if not given and "y" in fields:  # stratified by class ids; targets: a plain random split
        masks, meta["split"] = random_split(n, y, train_frac, val_frac, split_seed)
        fields.update(masks)
    coo = adj.tocoo()
    data = coo.data.astype(np.float64)
    weights = None if np.all(data == 1.0) else data
    return _finish(path, coo.row, coo.col, n, weights, directed=directed,
                   remove_self_loops=remove_self_loops, meta=meta, **fields)

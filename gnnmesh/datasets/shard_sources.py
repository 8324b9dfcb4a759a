"""Each kind of source written as a shard set (``sharding.write_shards``), each giving the
graph that ``gnnmesh.datasets.load`` gives for the same spec (``ShardSet.graph()`` equals it).

Streamed with bounded memory, never building the Graph:

- ``rmat:...`` and ``sbm:...``: the generator's edge keys (8 bytes per edge, held while they
  are written), then its features drawn and written in row blocks;
- an edge-list file and a MatrixMarket coordinate file (gzipped or not): parsed a few MiB
  at a time, the file's edges written as they are with the loader's ``symmetrize`` and
  ``drop_self_loops`` recorded in meta.json;
- an OGB node-property directory: edges and feature rows streamed the same way; labels
  and the split are O(nodes) arrays.

A source without features gets the degree features (see ``sharded.py``): they, and whether
a graph loaded with ``directed=none`` is symmetric, come from passes over the written
edges that hold a bounded number of adjacency entries (``adjacency_structure``).
Everything else (the registered real datasets, ``.npz`` files, dense MatrixMarket
'array' files, a shard set) is loaded whole with ``load`` and its adjacency written
entry by entry.
"""

from __future__ import annotations

import gzip
import zlib
from itertools import chain
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import numpy as np
import scipy.sparse as sp
import torch

from .. import progress
from ..errors import GraphError
from . import ogb
from ._io import GZIP_MAGIC, _os_error
from ._text import Table, _parse_chunk, _State
from .features import structural_features
from .files import (_SPARSE_IDS_FACTOR, _SPARSE_IDS_MIN_NODES, check_ids, detect_format, graph_name,
                    mtx_banner, mtx_size)
from .shard_writer import BLOCK_EDGES, ShardWriter, adjacency_structure, degree_features

READ_BYTES = 4 << 20   # text read and parsed this many bytes at a time (cut at a line's end)
GENERATORS = ("rmat", "sbm")


def convert(target, writer: ShardWriter, spec: str, load_whole: Callable) -> None:
    """Write the source ``target`` (``registry.resolve_target``) through ``writer``;
    ``load_whole()`` loads it as a Graph, for the sources that do not stream."""
    if target.typed:  # a shard set holds one graph's edges: the relations of each would be lost
        raise GraphError(f"{spec}: a typed graph; shard sets hold graphs of one node and edge type only")
    if target.kind == "dataset" and target.dataset.name in GENERATORS:
        return _generated(target, writer, spec)
    if target.kind == "ogb":
        return _ogb(target, writer, spec)
    if target.kind == "file":
        kind = target.opts["format"] or detect_format(target.path)
        if kind == "edgelist":
            o = target.opts
            return _edge_list(target, writer, spec, target.path, index_base=o["index_base"])
        if kind == "mtx" and _mtx(target, writer, spec):
            return None
    return write_graph(load_whole(), writer, spec)


# -- what every source ends with ------------------------------------------------------------

def _finish(writer: ShardWriter, target, spec: str, *, name: str, meta: dict, num_nodes: int,
            directed: Optional[bool], symmetrize: bool, drop_self_loops: bool,
            rows: Iterable, features: str, rows_hold_x: bool, num_classes: Optional[int],
            labeled: bool) -> None:
    """The node data and meta.json, once the edges are written. ``rows``: ``(field, array)``
    pieces in node order; without x among them (``rows_hold_x`` False) the degree features
    are computed from the written edges, as is ``directed`` when None (symmetric or not)."""
    structure = None
    if not rows_hold_x or directed is None:
        structure = adjacency_structure(writer, num_nodes, symmetrize=symmetrize,
                                        drop_self_loops=drop_self_loops,
                                        out_degrees=not rows_hold_x and directed is not False,
                                        symmetry=directed is None)
    if directed is None:
        directed = not structure["symmetric"]
    writer.start_nodes(num_nodes)
    with progress.phase(f"{name}: writing node rows"):
        for field, block in rows:
            writer.add_rows(field, block)
        if not rows_hold_x:
            x = degree_features(structure["in"], structure["out"] if directed else None)
            step = writer.rows_per_block(x.shape[1])
            for lo in range(0, num_nodes, step):
                writer.add_rows("x", x[lo:lo + step])
        classes = getattr(target, "random_labels", 0)
        if classes and not (labeled and classes >= 1):
            from .registry import random_labels
            y, masks, _ = random_labels(num_nodes, classes, name)
            writer.add_rows("y", y)
            for mask, values in masks.items():
                writer.add_rows(mask, values.numpy())
            num_classes = classes
    writer.finish(name=name, source=spec, directed=directed, symmetrize=symmetrize,
                  drop_self_loops=drop_self_loops, features=features, num_classes=num_classes,
                  meta=meta)


# -- generators -------------------------------------------------------------------------------

def _generated(target, writer: ShardWriter, spec: str) -> None:
    from .generators import rmat_plan, sbm_plan
    plan = (rmat_plan if target.dataset.name == "rmat" else sbm_plan)(**target.opts)
    writer.expect_edges(plan.keys.size)
    with progress.phase(f"{plan.name}: writing {plan.keys.size:,} edges", total=plan.keys.size) as shown:
        for src, dst in plan.edges(BLOCK_EDGES):
            writer.add_edges(src, dst)
            shown.advance(src.size)
    writer.finish_edges()
    plan.keys = None  # written: from here on memory is the node rows' blocks
    rows = plan.draw_rows(writer.rows_per_block(plan.num_features))
    _finish(writer, target, spec, name=plan.name, meta=plan.meta, num_nodes=plan.num_nodes,
            directed=not plan.undirected, symmetrize=plan.undirected, drop_self_loops=False,
            rows=rows, features="given" if plan.num_features else "degree",
            rows_hold_x=plan.num_features > 0, num_classes=plan.num_classes, labeled=True)


# -- text files, a piece at a time ------------------------------------------------------------

def text_pieces(path: Path, size: int = READ_BYTES) -> Iterator[bytes]:
    """The file's text (gunzipped when it is gzip data, as ``_io.read_bytes`` decides) in
    pieces of about ``size`` bytes, each ending at a line's end (a longer line: whole)."""
    path = Path(path)
    if path.is_dir():
        raise GraphError(f"{path}: is a directory, expected a file")
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise _os_error(path, exc) from exc
    with raw:
        magic = raw.read(2)
        raw.seek(0)
        if magic != GZIP_MAGIC and str(path).endswith(".gz"):
            raise GraphError(f"{path}: not gzip data despite the .gz suffix")
        stream = gzip.GzipFile(fileobj=raw) if magic == GZIP_MAGIC else raw
        carry = b""
        while True:
            try:
                piece = stream.read(size)
            except EOFError as exc:
                raise GraphError(f"{path}: truncated gzip data (compressed stream ends early)") from exc
            except (OSError, zlib.error) as exc:
                raise GraphError(f"{path}: corrupt gzip data ({exc})") from exc
            if not piece:
                break
            data = carry + piece if carry else piece
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            carry = data[cut + 1:]
            yield data[:cut + 1]
        if carry:
            yield carry


def tables(pieces: Iterable[bytes], state: _State, lines_before: int = 0) -> Iterator[Table]:
    """The rows of numbers of each piece, line-numbered across pieces (``_text.parse_table``'s
    rules and messages: ``state`` carries the column count and header from piece to piece)."""
    for piece in pieces:
        part = _parse_chunk(piece, lines_before, state)
        lines_before += piece.count(b"\n")
        if part is not None:
            yield Table(part[0], part[1], part[2], state.header, state.source)


def _edge_list(target, writer: ShardWriter, spec: str, path: Path, *, index_base: int,
               pieces: Optional[Iterable[bytes]] = None, note: Optional[str] = None) -> None:
    """An edge list, as ``files.load_edge_list`` reads it."""
    o = target.opts
    num_nodes, weighted = o["num_nodes"], o["weighted"]
    state = _State(str(path), (2, 3), 2, ("node id", "node id", "weight"), ".csv" in path.name.lower())
    rows, top, top_line = 0, -1, 0
    with progress.phase(f"{path.name}: writing edges"):
        for table in tables(text_pieces(path) if pieces is None else pieces, state):
            ids = table.ints - index_base
            check_ids(table, ids, num_nodes, index_base)
            high = int(ids.max())
            if high > top:
                top, top_line = high, int(table.lines[int(np.argwhere(ids == high)[0][0])])
            weights = table.floats[:, 0] if (table.floats is not None and weighted) else None
            writer.add_edges(ids[:, 0], ids[:, 1], weights)
            rows += len(table)
    if rows == 0:
        raise GraphError(f"{path}: no edges (only comments, headers or blank lines)")
    n = int(num_nodes) if num_nodes is not None else top + 1
    if num_nodes is None and n > _SPARSE_IDS_MIN_NODES and n > _SPARSE_IDS_FACTOR * 2 * rows:
        raise GraphError(f"{path} line {top_line}: node id {top + index_base} would make a graph of "
                         f"{n:,} nodes for {rows:,} edges; renumber the nodes from {index_base} (or "
                         f"pass num_nodes)")
    writer.finish_edges()
    meta = {"source_file": str(path), "file_edges": rows}
    if note:
        meta["note"] = note
    directed = o["directed"]
    _finish(writer, target, spec, name=graph_name(path), meta=meta, num_nodes=n, directed=directed,
            symmetrize=directed is False, drop_self_loops=o["remove_self_loops"], rows=(),
            features="degree", rows_hold_x=False, num_classes=None, labeled=False)


def _mtx(target, writer: ShardWriter, spec: str) -> bool:
    """A MatrixMarket coordinate file, as ``files.load_mtx`` reads it; False for a dense
    'array' file (loaded whole instead)."""
    path, o = target.path, target.opts
    pieces = text_pieces(path)
    first = next(pieces, b"")
    if not first.lstrip().startswith(b"%%MatrixMarket"):
        _edge_list(target, writer, spec, path, index_base=1, pieces=chain([first], pieces),
                   note="no MatrixMarket banner: read as a 1-based 'row col [value]' list")
        return True
    fmt, field, symmetry = mtx_banner(first.split(b"\n", 1)[0], path)
    if fmt == "array":
        pieces.close()
        return False
    lineno, size_line, rest = 0, None, b""
    piece = first
    while size_line is None:
        pos = 0
        while pos < len(piece):
            end = piece.find(b"\n", pos)
            end = len(piece) if end < 0 else end
            lineno += 1
            stripped = piece[pos:end].strip()
            pos = end + 1
            if stripped and not stripped.startswith(b"%"):
                size_line, rest = stripped, piece[pos:]
                break
        if size_line is None:
            piece = next(pieces, None)
            if piece is None:
                raise GraphError(f"{path}: truncated: no size line after the MatrixMarket banner")
    n, nnz = mtx_size(size_line, lineno, path)
    pattern = field == "pattern"
    state = _State(str(path), (2,) if pattern else (3,), 2, ("row index", "column index", "value"), False)
    if symmetry == "general":
        writer.expect_edges(nnz)
    count = 0
    with progress.phase(f"{path.name}: writing edges", total=nnz) as shown:
        for table in tables(chain([rest], pieces), state, lineno):
            if count + len(table) > nnz:
                raise table.error(nnz - count, f"more entries than the {nnz} declared on line {lineno}")
            ids = table.ints - 1
            check_ids(table, ids, n, 1, ("row index", "column index"))
            src, dst = ids[:, 0], ids[:, 1]
            values = None if (pattern or not o["weighted"]) else table.floats[:, 0]
            if symmetry != "general":  # one triangle stored: add the mirror entries
                off = src != dst
                src, dst = np.concatenate([src, dst[off]]), np.concatenate([dst, src[off]])
                if values is not None:
                    sign = -1.0 if symmetry == "skew-symmetric" else 1.0
                    values = np.concatenate([values, sign * values[off]])
            writer.add_edges(src, dst, values)
            count += len(table)
            shown.update(count)
    if count < nnz:
        raise GraphError(f"{path}: truncated: line {lineno} declares {nnz} entries, found {count}")
    writer.finish_edges()
    directed = o["directed"]
    symmetrize = directed is False
    if symmetry != "general":
        symmetrize = False  # both ways already; a max over +-w would break skew-symmetry
        if directed is None and symmetry == "symmetric":
            directed = False
    meta = {"source_file": str(path), "mtx": f"{fmt} {field} {symmetry}", "file_entries": nnz}
    _finish(writer, target, spec, name=graph_name(path), meta=meta, num_nodes=n, directed=directed,
            symmetrize=symmetrize, drop_self_loops=o["remove_self_loops"], rows=(),
            features="degree", rows_hold_x=False, num_classes=None, labeled=False)
    return True


# -- OGB directories --------------------------------------------------------------------------

def _ogb(target, writer: ShardWriter, spec: str) -> None:
    """An OGB node-property directory, as ``ogb.load_ogb`` reads it."""
    root, o = Path(target.path), target.opts
    raw = root / "raw"
    if (raw / "relations").is_dir():
        raise GraphError(f"{raw / 'relations'}: a heterogeneous graph; only graphs with one "
                         f"node type and one edge type load")
    nodes_file, edges_file = ogb._find(raw, "num-node-list"), ogb._find(raw, "num-edge-list")
    n, m = ogb._count(nodes_file, "node count"), ogb._count(edges_file, "edge count")
    if n == 0:
        raise GraphError(f"{nodes_file}: the graph has 0 nodes")
    edges = ogb._find(raw, "edge")
    names = ("source node id", "target node id")
    writer.expect_edges(m)
    count = 0
    with progress.phase(f"{root.name}: writing {m:,} edges", total=m) as shown:
        for table in tables(text_pieces(edges), _State(str(edges), (2,), 2, names, False)):
            check_ids(table, table.ints, n, 0, names)
            if count + len(table) <= m:
                writer.add_edges(table.ints[:, 0], table.ints[:, 1])
            count += len(table)  # past m: counted on, for the message
            shown.update(count)
    if count != m:
        raise GraphError(f"{edges}: {count} edges, but {edges_file.name} says {m}")
    writer.finish_edges()
    y, labeled, num_classes = ogb._labels(ogb._find(raw, "node-label"), n, nodes_file)
    split, masks = ogb._split(root, o["split"], n, labeled)
    features = ogb._find(raw, "node-feat", required=False)

    def rows():
        if features is not None:
            state, seen = _State(str(features), None, 0, (), False), 0
            for table in tables(text_pieces(features), state):
                if seen + len(table) <= n:
                    yield "x", table.floats.astype(np.float32)
                seen += len(table)
            if seen != n:
                raise GraphError(f"{features}: {seen} feature rows, but {nodes_file.name} says {n} nodes")
        yield "y", y
        for mask, values in masks.items():
            yield mask, values.numpy()

    meta = {"source": "OGB node-property directory", "source_dir": str(root),
            "file_edges": m, "unlabeled_nodes_count": int(n - labeled.sum()),
            "split": {"kind": "ogb", "name": split,
                      "sizes": [int(masks[mask].sum()) for mask in masks]}}
    directed = o["directed"]
    _finish(writer, target, spec, name=ogb.dataset_name(root), meta=meta, num_nodes=n,
            directed=directed, symmetrize=directed is False, drop_self_loops=o["remove_self_loops"],
            rows=rows(), features="degree" if features is None else "given",
            rows_hold_x=features is not None, num_classes=num_classes, labeled=True)


# -- anything else: the Graph, written entry by entry -----------------------------------------

def write_graph(graph, writer: ShardWriter, spec: str) -> None:
    """A loaded Graph: its adjacency's entries as edges (``src`` = column, ``dst`` = row), so
    that the set rebuilds exactly this adjacency (no symmetrising, no dropping)."""
    adj = graph.adj
    indptr, indices = adj.indptr.numpy(), adj.indices.numpy()
    values = None if adj.values is None else adj.values.numpy()
    writer.expect_edges(adj.nnz)
    with progress.phase(f"{graph.name}: writing {adj.nnz:,} edges", total=adj.nnz) as shown:
        for lo in range(0, adj.nnz, BLOCK_EDGES):
            hi = min(lo + BLOCK_EDGES, adj.nnz)
            rows = np.searchsorted(indptr, np.arange(lo, hi), side="right") - 1
            writer.add_edges(indices[lo:hi], rows, None if values is None else values[lo:hi])
            shown.update(hi)
    writer.finish_edges()

    def node_rows():
        x = graph.x if graph.x is not None else structural_features(graph, "degree")
        step = writer.rows_per_block(int(x.shape[1]))
        if x.layout == torch.sparse_csr:
            mat = sp.csr_matrix((x.values().numpy(), x.col_indices().numpy(), x.crow_indices().numpy()),
                                shape=tuple(x.shape))
            for lo in range(0, graph.num_nodes, step):
                yield "x", mat[lo:lo + step].toarray()
        else:
            dense = x.numpy()
            for lo in range(0, graph.num_nodes, step):
                yield "x", dense[lo:lo + step]
        for field in ("y", "train_mask", "val_mask", "test_mask"):
            value = getattr(graph, field)
            if value is not None:
                yield field, value.numpy()

    _finish(writer, None, spec, name=graph.name, meta=graph.meta, num_nodes=graph.num_nodes,
            directed=graph.directed, symmetrize=False, drop_self_loops=False, rows=node_rows(),
            features="given" if graph.x is not None else "degree", rows_hold_x=True,
            num_classes=graph.num_classes, labeled=True)

"""The streaming writer of a shard set (the format: ``sharded.py``; the entry that converts
any dataset spec: ``sharding.write_shards``; what each source streams and what it loads
whole: ``shard_sources.py``). ``ShardWriter``: edges are appended block by block into K edge shards of near-equal
counts, node rows field by field into K contiguous ranges of node ids, every ``.npy`` file
written in pieces under a header that is completed when the file is closed. The set is
built in a staged temporary directory that replaces ``directory`` only once meta.json is
written, so a failure (a full disk, Ctrl-C, bad input) leaves no half-written set and an
earlier set intact.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import torch

from .. import progress
from ..atomic import checksum
from ..errors import ConfigError, GraphError
from ..structured import loads_json
from ..tasks import infer
from ._build import sorted_unique
from .sharded import FORMAT, META, NODE_FIELDS, VERSION, edge_shard_name, node_shard_name

BLOCK_EDGES = 1 << 22        # edges per block read back or copied (64 MiB with weights)
BLOCK_BYTES = 16 << 20       # node rows per block: about this many bytes of features
STRUCTURE_BUDGET = 1 << 24   # adjacency entries the degree/symmetry passes hold at once
_HEADER = 128                # bytes of every .npy header this writer makes (fixed: rewritten on close)


def sync_file(fh) -> None:
    """Flush ``fh`` to the disk: every file of a set is on the disk before its meta.json is
    written, so that a meta.json marks a complete set even after a power loss."""
    fh.flush()
    os.fsync(fh.fileno())


def _header(dtype: np.dtype, shape: tuple) -> bytes:
    text = repr({"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                 "shape": tuple(shape)})
    room = _HEADER - 10 - 1
    if len(text) > room:
        raise ValueError(f"a .npy header for shape {shape} does not fit {_HEADER} bytes")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", _HEADER - 10) + \
        (text + " " * (room - len(text)) + "\n").encode("latin1")


class NpyAppender:
    """A ``.npy`` file written in pieces of rows: a placeholder header first, the final
    shape written over it on ``close`` (then flushed and fsynced)."""

    def __init__(self, path: Path, dtype, tail: tuple = ()):
        self.path, self.dtype, self.tail, self.rows = Path(path), np.dtype(dtype), tuple(tail), 0
        self._fh = open(self.path, "wb")
        self._fh.write(b"\0" * _HEADER)

    def append(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        if rows.shape[1:] != self.tail:
            raise GraphError(f"{self.path}: rows of shape {list(rows.shape[1:])} appended to rows of "
                             f"shape {list(self.tail)}")
        if rows.size:
            self._fh.write(memoryview(rows).cast("B"))
        self.rows += rows.shape[0]

    def close(self) -> None:
        if self._fh is None:
            return
        fh, self._fh = self._fh, None
        try:
            fh.seek(0)
            fh.write(_header(self.dtype, (self.rows,) + self.tail))
            sync_file(fh)
        finally:
            fh.close()

    def abandon(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _canonical(field: str, rows: np.ndarray) -> np.ndarray:
    """Rows in the dtype the format stores for ``field``."""
    rows = np.asarray(rows)
    if field == "x":
        return rows.astype(np.float32, copy=False)
    if field == "y":
        if rows.ndim == 1 and rows.dtype.kind in "iub":
            return rows.astype(np.int64, copy=False)
        return rows.astype(np.float32, copy=False)
    return rows.astype(bool, copy=False)


class ShardWriter:
    """Streams one shard set into ``directory`` (meant to be a staged temporary: see
    ``write_shards``). Use: ``add_edges`` block by block (``expect_edges`` first when the
    count is known: the blocks then go straight to their shards; otherwise they are spooled
    and cut into shards by ``finish_edges``), ``finish_edges``, ``start_nodes(n)``,
    ``add_rows(field, rows)`` for each node field in node order (fields may interleave),
    then ``finish(**facts)``, which writes meta.json last."""

    def __init__(self, directory, shards: int):
        if shards < 1:
            raise ConfigError(f"--shards must be >= 1, got {shards}")
        self.directory, self.shards = Path(directory), int(shards)
        self.weighted: Optional[bool] = None
        self.num_edges: Optional[int] = None
        self.num_nodes: Optional[int] = None
        self._expected: Optional[int] = None
        self._edges_in = 0
        self._open: list = []          # appenders not yet closed (removed on failure by the stage)
        self._edge_shards: list = []   # [{"name", "edges", "files": {field: path}}]
        self._current = None           # (shard index, {field: appender}, quota)
        self._spool = None
        self._node_files: dict = {}    # (shard, field) -> appender
        self._cursor: dict = {}        # field -> rows written
        self._kinds: dict = {}         # field -> (dtype, tail)

    # -- edges ------------------------------------------------------------------------------
    def expect_edges(self, count: int) -> None:
        """Announce the number of edges before the first ``add_edges``."""
        if self._edges_in or self._spool is not None:
            raise RuntimeError("expect_edges must come before the first edges")
        self._expected = int(count)

    def _edge_fields(self) -> list:
        return ["src", "dst"] + (["weight"] if self.weighted else [])

    def _appenders(self, name: str) -> dict:
        out = {}
        for field in self._edge_fields():
            kind = np.float32 if field == "weight" else np.int64
            out[field] = NpyAppender(self.directory / f"{name}.{field}.npy", kind)
            self._open.append(out[field])
        return out

    def _bounds(self, total: int, i: int) -> int:
        return (i + 1) * total // self.shards - i * total // self.shards

    def add_edges(self, src, dst, weight=None) -> None:
        """Append edges ``src -> dst`` (int arrays of equal length; ``weight`` per edge, or
        None: every block of a set is weighted or none is)."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        if self.weighted is None:
            self.weighted = weight is not None
        elif self.weighted != (weight is not None):
            raise RuntimeError("every block of edges must be weighted, or none")
        arrays = {"src": src, "dst": dst}
        if weight is not None:
            arrays["weight"] = np.asarray(weight, dtype=np.float32)
        count = src.shape[0]
        if self._expected is None:
            if self._spool is None:
                self._spool = self._appenders(".spool")
            for field, appender in self._spool.items():
                appender.append(arrays[field])
            self._edges_in += count
            return
        if self._edges_in + count > self._expected:
            raise GraphError(f"{self.directory}: more than the {self._expected} edges announced")
        done = 0
        while done < count:
            if self._current is None or self._current[1]["src"].rows == self._current[2]:
                self._next_edge_shard()
                continue
            index, files, quota = self._current
            take = min(quota - files["src"].rows, count - done)
            for field, appender in files.items():
                appender.append(arrays[field][done:done + take])
            done += take
        self._edges_in += count

    def _next_edge_shard(self) -> None:
        index = 0 if self._current is None else self._current[0] + 1
        if self._current is not None:
            self._close_edge_shard()
        name = edge_shard_name(index)
        self._current = (index, self._appenders(name), self._bounds(self._expected, index))

    def _close_edge_shard(self) -> None:
        index, files, _ = self._current
        for appender in files.values():
            appender.close()
        self._edge_shards.append({"name": edge_shard_name(index), "edges": files["src"].rows,
                                  "files": {f: a.path for f, a in files.items()}})

    def finish_edges(self) -> int:
        """Close the edge shards (cutting the spool into them); returns the edge count."""
        if self.weighted is None:
            self.weighted = False
        if self._expected is None:
            self._split_spool()
        else:
            if self._edges_in != self._expected:
                raise GraphError(f"{self.directory}: {self._edges_in} edges written, {self._expected} "
                                 f"announced")
            if self._current is None:
                self._next_edge_shard()
            while self._current[0] < self.shards - 1:  # the shards an edge count too small left empty
                self._next_edge_shard()
            self._close_edge_shard()
            self._current = None
        self.num_edges = self._edges_in
        return self.num_edges

    def _split_spool(self) -> None:
        spool = self._spool
        if spool is None:
            spool = self._appenders(".spool")
        for appender in spool.values():
            appender.close()
        total = self._edges_in
        maps = {f: np.load(a.path, mmap_mode="r") if a.rows else None for f, a in spool.items()}
        start = 0
        with progress.phase("cutting the edges into shards", total=total) as shown:
            for index in range(self.shards):
                stop = start + self._bounds(total, index)
                files = self._appenders(edge_shard_name(index))
                for lo in range(start, stop, BLOCK_EDGES):
                    hi = min(lo + BLOCK_EDGES, stop)
                    for field, appender in files.items():
                        appender.append(maps[field][lo:hi])
                    shown.update(hi)
                for appender in files.values():
                    appender.close()
                self._edge_shards.append({"name": edge_shard_name(index), "edges": stop - start,
                                          "files": {f: a.path for f, a in files.items()}})
                start = stop
        del maps
        for appender in spool.values():
            appender.path.unlink()

    def edge_blocks(self, block: int = BLOCK_EDGES) -> Iterator[tuple]:
        """The written edges again, ``(src, dst, weight or None)`` blocks in listing order."""
        for shard in self._edge_shards:
            if not shard["edges"]:
                continue
            maps = {f: np.load(p, mmap_mode="r") for f, p in shard["files"].items()}
            for lo in range(0, shard["edges"], block):
                hi = lo + block
                yield (np.array(maps["src"][lo:hi]), np.array(maps["dst"][lo:hi]),
                       np.array(maps["weight"][lo:hi]) if "weight" in maps else None)

    # -- nodes ------------------------------------------------------------------------------
    def start_nodes(self, num_nodes: int) -> None:
        if num_nodes < 1:
            raise GraphError(f"{self.directory}: a shard set needs at least one node, got {num_nodes}")
        self.num_nodes = int(num_nodes)
        self._starts = [i * self.num_nodes // self.shards for i in range(self.shards + 1)]

    def rows_per_block(self, width: int) -> int:
        """Node rows of ``width`` float32 columns that make a block of about BLOCK_BYTES."""
        return max(1, BLOCK_BYTES // (4 * max(width, 1)))

    def add_rows(self, field: str, rows) -> None:
        """Append the next rows of node field ``field`` (x, y or a mask), in node order."""
        if field not in NODE_FIELDS:
            raise ValueError(f"unknown node field {field!r}")
        rows = _canonical(field, rows)
        kind = (rows.dtype, rows.shape[1:])
        if self._kinds.setdefault(field, kind) != kind:
            raise GraphError(f"{self.directory}: node field '{field}' given as {kind[0]} rows of shape "
                             f"{list(kind[1])} after {self._kinds[field][0]} rows of shape "
                             f"{list(self._kinds[field][1])}")
        at = self._cursor.get(field, 0)
        if at + rows.shape[0] > self.num_nodes:
            raise GraphError(f"{self.directory}: more than {self.num_nodes} rows of node field '{field}'")
        done = 0
        while done < rows.shape[0]:
            shard = int(np.searchsorted(self._starts, at, side="right")) - 1
            take = min(self._starts[shard + 1] - at, rows.shape[0] - done)
            self._node_file(shard, field).append(rows[done:done + take])
            done += take
            at += take
        self._cursor[field] = at

    def _node_file(self, shard: int, field: str) -> NpyAppender:
        key = (shard, field)
        if key not in self._node_files:
            dtype, tail = self._kinds[field]
            appender = NpyAppender(self.directory / f"{node_shard_name(shard)}.{field}.npy", dtype, tail)
            self._open.append(appender)
            self._node_files[key] = appender
        return self._node_files[key]

    # -- meta.json --------------------------------------------------------------------------
    def finish(self, *, name: str, source: str, directed: bool, symmetrize: bool,
               drop_self_loops: bool, features: str, num_classes: Optional[int], meta: dict) -> dict:
        """Close every node file, write meta.json (last) and return it."""
        fields = [f for f in NODE_FIELDS if f in self._kinds]
        if "x" not in fields:
            raise GraphError(f"{self.directory}: no node features were written")
        for field in fields:
            if self._cursor[field] != self.num_nodes:
                raise GraphError(f"{self.directory}: {self._cursor[field]} rows of node field '{field}' "
                                 f"for {self.num_nodes} nodes")
        node_shards = []
        for shard in range(self.shards):
            files = {}
            for field in fields:
                appender = self._node_file(shard, field)  # an empty range gets empty files
                appender.close()
                files[field] = checksum(appender.path)
            node_shards.append({"name": node_shard_name(shard), "start": self._starts[shard],
                                "stop": self._starts[shard + 1], "files": files})
        edge_shards = [{"name": s["name"], "edges": s["edges"],
                        "files": {f: checksum(p) for f, p in s["files"].items()}}
                       for s in self._edge_shards]
        task, y = None, None
        if "y" in fields:
            y = np.concatenate([np.load(self.directory / f"{node_shard_name(i)}.y.npy")
                                for i in range(self.shards)])
            task = infer(torch.from_numpy(y))[0]
            if num_classes is None:  # as a Graph counts them
                num_classes = int(y.shape[1]) if y.ndim == 2 else 1 if y.dtype.kind == "f" else \
                    int(y.max()) + 1 if y.size else None
        del y
        data = {"format": FORMAT, "version": VERSION, "name": name, "num_nodes": self.num_nodes,
                "num_edges": self.num_edges, "num_features": int(self._kinds["x"][1][0]),
                "features": features, "num_classes": num_classes, "task": task,
                "node_fields": fields, "directed": bool(directed), "weighted": bool(self.weighted),
                "symmetrize": bool(symmetrize), "drop_self_loops": bool(drop_self_loops),
                "edge_shards": edge_shards, "node_shards": node_shards, "source": source,
                "meta": json_meta(meta)}
        with open(self.directory / META, "w") as fh:
            fh.write(json.dumps(data, indent=1) + "\n")
            sync_file(fh)
        return data

    def abandon(self) -> None:
        """Close whatever is open (the staged directory is removed by its owner)."""
        for appender in self._open:
            appender.abandon()


def _json_value(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(type(value).__name__)


def json_meta(meta: dict) -> dict:
    """The JSON-able part of a graph's meta dict (entries that are not are left out)."""
    out = {}
    for key, value in (meta or {}).items():
        try:
            out[str(key)] = loads_json(json.dumps(value, default=_json_value))  # as deep as a reader reads
        except (TypeError, ValueError, RecursionError):
            continue
    return out


# -- the adjacency's structure from the written edges ----------------------------------------

def _ranges(writer: ShardWriter, n: int, collect, budget: int) -> list:
    """Row ranges [lo, hi) whose adjacency entries (as ``collect`` gathers them) number about
    ``budget`` or fewer each (a single row may hold more)."""
    estimate = writer.num_edges * 2
    if estimate <= budget:
        return [(0, n)]
    counts = np.zeros(n, dtype=np.int64)
    for src, dst, _ in writer.edge_blocks():
        for rows, _cols, _w in collect(src, dst, None):
            counts += np.bincount(rows, minlength=n)
    ends = np.cumsum(counts)
    cuts = np.searchsorted(ends, np.arange(budget, int(ends[-1]), budget), side="right")
    bounds = sorted({0, n, *(int(c) for c in cuts if 0 < c < n)})
    return list(zip(bounds[:-1], bounds[1:]))


def _joined(pieces: list, dtype) -> np.ndarray:
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype)


def _sums(keys: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """float32 sums of ``weight`` over equal ``keys``, in key order (duplicates summed as the
    adjacency sums them)."""
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1]))) if k.size else np.zeros(0, np.int64)
    return np.add.reduceat(weight[order].astype(np.float64), starts).astype(np.float32) if k.size \
        else np.zeros(0, np.float32)


def adjacency_structure(writer: ShardWriter, n: int, *, symmetrize: bool, drop_self_loops: bool,
                        out_degrees: bool, symmetry: bool, budget: Optional[int] = None) -> dict:
    """What the adjacency made of the written edges would show, without building it:
    ``in`` (entries per row: in-degrees), ``out`` (entries per column, when ``out_degrees``)
    and ``symmetric`` (when ``symmetry``: whether it equals its transpose, values included).
    Passes over the edges once per range of rows, holding about ``budget`` entries."""
    budget = STRUCTURE_BUDGET if budget is None else budget
    transpose = not symmetrize and (out_degrees or symmetry)
    weighted = symmetry and writer.weighted and not symmetrize

    def kept(src, dst, w):
        if drop_self_loops:
            keep = src != dst
            src, dst, w = src[keep], dst[keep], None if w is None else w[keep]
        return src, dst, w

    def forward(src, dst, w):  # rows of A: dst (and src when symmetrising)
        src, dst, w = kept(src, dst, w)
        yield dst, src, w
        if symmetrize:
            yield src, dst, w

    def backward(src, dst, w):  # rows of A^T: src
        src, dst, w = kept(src, dst, w)
        yield src, dst, w

    def both(src, dst, w):
        yield from forward(src, dst, w)
        if transpose:
            yield from backward(src, dst, w)

    ranges = _ranges(writer, n, both, budget)
    degrees_in = np.zeros(n, dtype=np.int64)
    degrees_out = np.zeros(n, dtype=np.int64) if transpose else None
    symmetric = True
    with progress.phase("reading the adjacency's structure back", total=len(ranges)) as shown:
        for step, (lo, hi) in enumerate(ranges):
            gathered = {"f": ([], []), "b": ([], [])}
            for src, dst, w in writer.edge_blocks():
                for side, make in (("f", forward), ("b", backward if transpose else None)):
                    if make is None:
                        continue
                    for rows, cols, weights in make(src, dst, w):
                        sel = (rows >= lo) & (rows < hi)
                        gathered[side][0].append(rows[sel] * n + cols[sel])
                        if weighted:
                            gathered[side][1].append(weights[sel])
            keys = {side: _joined(g[0], np.int64) for side, g in gathered.items()}
            unique = {side: sorted_unique(k) for side, k in keys.items()}
            degrees_in[lo:hi] = np.bincount(unique["f"] // n - lo, minlength=hi - lo)
            if transpose:
                degrees_out[lo:hi] = np.bincount(unique["b"] // n - lo, minlength=hi - lo)
            if symmetry and not symmetrize and symmetric:
                symmetric = np.array_equal(unique["f"], unique["b"])
                if symmetric and weighted:
                    symmetric = np.array_equal(_sums(keys["f"], _joined(gathered["f"][1], np.float32)),
                                               _sums(keys["b"], _joined(gathered["b"][1], np.float32)))
            shown.update(step + 1)
    if symmetrize:
        degrees_out = degrees_in
    return {"in": degrees_in, "out": degrees_out if out_degrees else None, "symmetric": symmetric}


def degree_features(in_degrees: np.ndarray, out_degrees: Optional[np.ndarray]) -> np.ndarray:
    """``log(1 + in-degree)``, and ``log(1 + out-degree)`` for a directed graph: the values
    ``structural_features(graph, "degree")`` computes from the built graph."""
    columns = [in_degrees] + ([] if out_degrees is None else [out_degrees])
    stacked = torch.from_numpy(np.stack(columns, axis=1))
    return torch.log1p(stacked.to(torch.float32)).numpy()

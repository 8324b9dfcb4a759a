"""Sharded input: a graph kept as many plain ``.npy`` files plus one ``meta.json``, so that
no process ever needs the whole graph. Each reader takes the slices of edges and node rows
it wants; ``ShardSet.graph()`` builds the whole graph in one process, which is what
``--dataset DIR`` loads (the single-process reference). ``gnnmesh datasets --shard SOURCE
--out DIR --shards K`` writes a set (``sharding.write_shards``).

Layout, version 1::

    DIR/meta.json                    written last: its presence marks a complete set
    DIR/edges-00000.src.npy          int64 [e]: edge sources
    DIR/edges-00000.dst.npy          int64 [e]: edge targets
    DIR/edges-00000.weight.npy       float32 [e]: edge weights, only when the set is weighted
    DIR/nodes-00000.x.npy            float32 [rows, num_features]: node ids start..stop-1
    DIR/nodes-00000.y.npy            the labels of those rows: int64 [rows] (classification),
                                     float32 [rows] or [rows, num_classes] (targets)
    DIR/nodes-00000.train_mask.npy   bool [rows]; also val_mask and test_mask
    DIR/edges-00001.* ...            more edge shards, more node shards

An edge ``src -> dst`` is the adjacency entry ``A[dst, src]`` (a row holds a node's
in-edges). The adjacency is what ``gnnmesh.datasets._build.adjacency_from_edges`` makes of
all listed edges, in order, with the set's flags: duplicates collapse (weighted ones sum);
``symmetrize`` adds every reverse edge (a pair listed both ways keeps the larger weight);
``drop_self_loops`` drops edges ``i -> i``. Edges are numbered in listing order across the
edge shards (shard 0's first, then shard 1's); node shards cover the ids ``0..num_nodes``
contiguously, in order.

``meta.json`` (every field is checked on read; a missing or wrong one is a GraphError that
names meta.json and the field)::

    format          "gnnmesh-shards"
    version         1
    name            the graph's name
    num_nodes       >= 1
    num_edges       edges listed over all edge shards (before duplicates collapse)
    num_features    >= 1: the width of x
    features        "given": the source's own features; "degree": the source has none, and x
                    holds the degree features the trainer would compute from the structure
                    (``structural_features(graph, "degree")``); ``graph()`` leaves x None then
    num_classes     the model's output width (classes, or targets per node); null without y
    task            gnnmesh.tasks.infer(y)[0]; null without labels
    node_fields     the node arrays every node shard holds: x, then y, train_mask, val_mask
                    and test_mask where the graph has them (an unlabeled graph has only x)
    directed        whether the graph is directed
    weighted        whether the edges carry weights
    symmetrize, drop_self_loops   how the listed edges become the adjacency (above)
    edge_shards     [{"name": "edges-00000", "edges": count, "files": {"src": checksum,
                    "dst": checksum, ["weight": checksum]}}, ...]
    node_shards     [{"name": "nodes-00000", "start": lo, "stop": hi, "files": {"x": checksum,
                    ...one per node field}}, ...]
    source          the dataset spec the set was written from
    meta            the graph's meta dict (its JSON-able part)

Checksums are blake2b-128 of the file's bytes (``gnnmesh.atomic.checksum``). Opening a set
reads meta.json and every file's ``.npy`` header (cheap): a missing, truncated or
mis-shaped file is a GraphError naming it. A file is hashed the first time a read touches
it (once per ShardSet, streamed), and the ids and values a read returns are checked.
"""

from __future__ import annotations

import json
import operator
import re
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..atomic import OutputKind, checksum
from ..errors import ConfigError, GraphError
from ..graph import MAX_CLASSES, Graph
from ..structured import loads_json
from .. import tasks
from ._build import MASKS, adjacency_from_edges

FORMAT = "gnnmesh-shards"
VERSION = 1
META = "meta.json"
NODE_FIELDS = ("x", "y") + MASKS
FEATURES = ("given", "degree")
_EDGE_NAME = re.compile(r"^edges-\d{5,}$")
_NODE_NAME = re.compile(r"^nodes-\d{5,}$")
_CHECKSUM = re.compile(r"^[0-9a-f]{32}$")


def edge_shard_name(index: int) -> str:
    return f"edges-{index:05d}"


def node_shard_name(index: int) -> str:
    return f"nodes-{index:05d}"


def is_shard_set(path) -> bool:
    """Whether ``path`` is a directory holding a meta.json whose format is gnnmesh-shards
    (a complete set, as far as its meta.json goes; ``open_shards`` checks the rest)."""
    meta = Path(path) / META
    try:
        if not meta.is_file():
            return False
        data = loads_json(meta.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def written_files(directory) -> list:
    """The files the shard set in ``directory`` consists of: meta.json and every shard file it
    lists (a GraphError naming meta.json and the field when it is not a shard set's)."""
    return [META] + ShardSet(directory).file_names()


OUTPUT = OutputKind("shard set", META, written_files)  # what ``sharding`` may replace


def open_shards(directory) -> "ShardSet":
    """The shard set in ``directory``, its meta.json and every file's header checked.
    ConfigError if ``directory`` is missing or not a directory; GraphError naming the file
    (and the field of meta.json) for anything else."""
    return ShardSet(directory)


# -- .npy headers ---------------------------------------------------------------------------

def npy_header(path: Path) -> tuple:
    """(shape, dtype, data offset) of the .npy file ``path`` from its header alone; GraphError
    naming the file when it is missing, not a .npy file, or its length disagrees with the
    header (a torn or truncated write)."""
    try:
        with open(path, "rb") as fh:
            try:
                version = np.lib.format.read_magic(fh)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
                elif version == (2, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
                else:
                    raise ValueError(f".npy version {version[0]}.{version[1]}")
            except (ValueError, EOFError, SyntaxError) as exc:
                raise GraphError(f"{path}: not a readable .npy file ({' '.join(str(exc).split())})") from None
            offset = fh.tell()
            size = fh.seek(0, 2)
    except FileNotFoundError:
        raise GraphError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise GraphError(f"{path}: is a directory, expected a .npy file") from None
    except OSError as exc:
        raise GraphError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    if fortran and len(shape) > 1:
        raise GraphError(f"{path}: stored in Fortran order; expected C order")
    if dtype.hasobject:
        raise GraphError(f"{path}: holds Python objects; expected numbers")
    want = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size < want:
        raise GraphError(f"{path}: truncated: {size} bytes, its header needs {want}")
    if size > want:
        raise GraphError(f"{path}: {size} bytes, {size - want} more than its header describes")
    return tuple(int(s) for s in shape), dtype, offset


# -- meta.json ------------------------------------------------------------------------------

class _Meta:
    """Typed reads of meta.json's fields, each failure a GraphError naming the file and field."""

    def __init__(self, path: Path, data: dict):
        self.path, self.data = path, data

    def error(self, field: str, problem: str) -> GraphError:
        return GraphError(f"{self.path}: field '{field}' {problem}")

    def get(self, field: str, source: Optional[dict] = None, where: Optional[str] = None):
        source = self.data if source is None else source
        if field not in source:
            raise self.error(where or field, "is missing")
        return source[field]

    def integer(self, field: str, low: int = 0, source=None, where=None, null=False, high=None):
        value = self.get(field, source, where)
        if value is None and null:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
            bounds = f">= {low}" if high is None else f"in [{low}, {high:,}]"
            raise self.error(where or field, f"must be an integer {bounds}"
                             f"{' or null' if null else ''}, got {value!r}")
        return value

    def boolean(self, field: str) -> bool:
        value = self.get(field)
        if not isinstance(value, bool):
            raise self.error(field, f"must be true or false, got {value!r}")
        return value

    def string(self, field: str, choices=None, null=False, source=None, where=None):
        value = self.get(field, source, where)
        if value is None and null:
            return None
        if not isinstance(value, str) or (choices is not None and value not in choices):
            want = f"one of {', '.join(choices)}" if choices is not None else "a string"
            raise self.error(where or field, f"must be {want}{' or null' if null else ''}, got {value!r}")
        return value

    def shard_list(self, field: str) -> list:
        value = self.get(field)
        if not isinstance(value, list) or not value or not all(isinstance(s, dict) for s in value):
            raise self.error(field, f"must be a non-empty list of objects, got {_short(value)}")
        return value

    def files(self, shard: dict, where: str, expected: list) -> dict:
        files = self.get("files", shard, f"{where}.files")
        if not isinstance(files, dict):
            raise self.error(f"{where}.files", f"must be an object of checksums, got {_short(files)}")
        if sorted(files) != sorted(expected):
            raise self.error(f"{where}.files", f"names {', '.join(sorted(files)) or 'no file'}; "
                                               f"expected {', '.join(expected)}")
        for name, value in files.items():
            if not isinstance(value, str) or not _CHECKSUM.match(value):
                raise self.error(f"{where}.files.{name}", f"must be a blake2b-128 checksum (32 hex "
                                                          f"digits), got {_short(value)}")
        return files


def _short(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _read_meta(directory: Path) -> tuple[Path, dict]:
    if not directory.exists():
        raise ConfigError(f"{directory}: no such directory (expected a shard set)")
    if not directory.is_dir():
        raise ConfigError(f"{directory}: not a directory (expected a shard set)")
    path = directory / META
    if not path.is_file():
        raise GraphError(f"{path}: file not found: not a shard set, or one whose writing did not "
                         f"finish (meta.json is written last)")
    try:
        data = loads_json(path.read_text())
    except OSError as exc:
        raise GraphError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise GraphError(f"{path}: not valid JSON ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict):
        raise GraphError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return path, data


# -- the set --------------------------------------------------------------------------------

class ShardSet:
    """An opened shard set (see the module's docstring); ``open_shards(directory)`` makes one.

    Fields from meta.json: ``directory, name, num_nodes, num_edges, num_features, num_classes,
    task, directed, weighted, symmetrize, drop_self_loops, features, node_fields`` and
    ``meta`` (the whole meta.json); ``edge_ranges`` and ``node_ranges`` give each shard's
    share. Reads return fresh arrays (copies of just the slice)."""

    def __init__(self, directory):
        self.directory = Path(directory)
        path, data = _read_meta(self.directory)
        m = _Meta(path, data)
        if m.get("format") != FORMAT:
            raise m.error("format", f"must be {FORMAT!r}, got {_short(data['format'])}")
        version = m.get("version")
        if version != VERSION:
            raise m.error("version", f"is {_short(version)}; this gnnmesh reads version {VERSION}")
        self.meta = data
        self.name = m.string("name")
        self.num_nodes = m.integer("num_nodes", 1)
        self.num_edges = m.integer("num_edges", 0)
        self.num_features = m.integer("num_features", 1)
        self.features = m.string("features", FEATURES)
        self.num_classes = m.integer("num_classes", 1, null=True, high=MAX_CLASSES)
        self.task = m.string("task", tasks.names(), null=True)
        self.directed = m.boolean("directed")
        self.weighted = m.boolean("weighted")
        self.symmetrize = m.boolean("symmetrize")
        self.drop_self_loops = m.boolean("drop_self_loops")
        m.string("source")
        if not isinstance(m.get("meta"), dict):
            raise m.error("meta", f"must be an object, got {_short(data['meta'])}")
        fields = m.get("node_fields")
        if not isinstance(fields, list) or fields != [f for f in NODE_FIELDS if f in fields] \
                or "x" not in fields:
            raise m.error("node_fields", f"must list x and any of y, train_mask, val_mask, test_mask, "
                                         f"in that order; got {_short(fields)}")
        self.node_fields = tuple(fields)
        if ("y" in fields) != (self.task is not None) or ("y" in fields) != (self.num_classes is not None):
            raise m.error("task", "and 'num_classes' must be given exactly when the node fields hold y "
                                  f"(task {self.task!r}, num_classes {self.num_classes!r})")
        self._edge_shards = self._check_edge_shards(m)
        self._node_shards = self._check_node_shards(m)
        self._edge_starts = np.cumsum([0] + [s["edges"] for s in self._edge_shards])
        self._node_starts = np.array([s["start"] for s in self._node_shards] + [self.num_nodes])
        self._verified: set = set()
        self._maps: dict = {}

    def file_names(self) -> list:
        """The name of every shard file of the set (meta.json aside)."""
        return [path.name for shard in self._edge_shards + self._node_shards
                for path, *_ in shard["arrays"].values()]

    @property
    def edge_ranges(self) -> list:
        """``[(start, stop), ...]``: the edges each edge shard holds, in listing order (a
        reader that takes whole shards reads each file once)."""
        return [(int(a), int(b)) for a, b in zip(self._edge_starts[:-1], self._edge_starts[1:])]

    @property
    def node_ranges(self) -> list:
        """``[(start, stop), ...]``: the node ids each node shard holds."""
        return [(s["start"], s["stop"]) for s in self._node_shards]

    def __repr__(self) -> str:
        return (f"ShardSet({str(self.directory)!r}, nodes={self.num_nodes}, edges={self.num_edges}, "
                f"edge_shards={len(self._edge_shards)}, node_shards={len(self._node_shards)})")

    # -- opening: every file's header -------------------------------------------------------
    def _check_edge_shards(self, m: _Meta) -> list:
        shards, seen, total = [], set(), 0
        names = ["src", "dst"] + (["weight"] if self.weighted else [])
        kinds = {"src": np.dtype(np.int64), "dst": np.dtype(np.int64), "weight": np.dtype(np.float32)}
        for i, shard in enumerate(m.shard_list("edge_shards")):
            where = f"edge_shards[{i}]"
            name = m.string("name", source=shard, where=f"{where}.name")
            if not _EDGE_NAME.match(name) or name in seen:
                raise m.error(f"{where}.name", f"must be a new name 'edges-NNNNN', got {name!r}")
            seen.add(name)
            count = m.integer("edges", 0, source=shard, where=f"{where}.edges")
            files = m.files(shard, where, names)
            entry = {"name": name, "edges": count, "files": files, "arrays": {}}
            for field in names:
                path = self.directory / f"{name}.{field}.npy"
                shape, dtype, offset = npy_header(path)
                if dtype != kinds[field]:
                    raise GraphError(f"{path}: holds {dtype}, expected {kinds[field]}")
                if shape != (count,):
                    raise GraphError(f"{path}: has shape {list(shape)}, but {META} says {count} "
                                     f"edges ({where}.edges)")
                entry["arrays"][field] = (path, dtype, shape, offset)
            total += count
            shards.append(entry)
        if total != self.num_edges:
            raise m.error("num_edges", f"is {self.num_edges}, but the edge shards list {total} edges")
        return shards

    def _node_dtype(self, field: str, rows: int) -> tuple:
        if field == "x":
            return np.dtype(np.float32), [(rows, self.num_features)]
        if field == "y":
            labels = tasks.spec(self.task)
            if labels.class_ids:
                return np.dtype(np.int64), [(rows,)]
            shapes = [(rows, self.num_classes)] + ([(rows,)] if labels.flat_target and self.num_classes == 1 else [])
            return np.dtype(np.float32), shapes
        return np.dtype(bool), [(rows,)]

    def _check_node_shards(self, m: _Meta) -> list:
        shards, seen, expect = [], set(), 0
        for i, shard in enumerate(m.shard_list("node_shards")):
            where = f"node_shards[{i}]"
            name = m.string("name", source=shard, where=f"{where}.name")
            if not _NODE_NAME.match(name) or name in seen:
                raise m.error(f"{where}.name", f"must be a new name 'nodes-NNNNN', got {name!r}")
            seen.add(name)
            start = m.integer("start", 0, source=shard, where=f"{where}.start")
            stop = m.integer("stop", 0, source=shard, where=f"{where}.stop")
            if start != expect or stop < start:
                raise m.error(f"{where}.start", f"node shards must cover the ids contiguously: this "
                                                f"one holds {start}..{stop}, the ids so far end at {expect}")
            expect = stop
            files = m.files(shard, where, list(self.node_fields))
            entry = {"name": name, "start": start, "stop": stop, "files": files, "arrays": {}}
            for field in self.node_fields:
                path = self.directory / f"{name}.{field}.npy"
                shape, dtype, offset = npy_header(path)
                want, shapes = self._node_dtype(field, stop - start)
                if dtype != want:
                    raise GraphError(f"{path}: holds {dtype}, expected {want}")
                if shape not in shapes:
                    raise GraphError(f"{path}: has shape {list(shape)}, expected "
                                     f"{' or '.join(str(list(s)) for s in shapes)} ({stop - start} rows: "
                                     f"{where} holds node ids {start}..{stop - 1})")
                entry["arrays"][field] = (path, dtype, shape, offset)
            shards.append(entry)
        if expect != self.num_nodes:
            raise m.error("node_shards", f"cover node ids 0..{expect - 1}, but num_nodes is {self.num_nodes}")
        return shards

    # -- reading ----------------------------------------------------------------------------
    def _verify(self, shard: dict) -> None:
        for field, (path, *_) in shard["arrays"].items():
            if path in self._verified:
                continue
            try:
                actual = checksum(path)
            except OSError as exc:
                raise GraphError(f"{path}: cannot read file ({exc.strerror or exc})") from None
            if actual != shard["files"][field]:
                raise GraphError(f"{path}: corrupt shard file (checksum {actual}, {META} says "
                                 f"{shard['files'][field]})")
            self._verified.add(path)

    def _slice(self, array: tuple, lo: int, hi: int) -> np.ndarray:
        path, dtype, shape, offset = array
        if hi <= lo:
            return np.empty((0,) + shape[1:], dtype=dtype)
        mapped = self._maps.get(path)
        if mapped is None:
            try:
                mapped = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)
            except (OSError, ValueError) as exc:
                raise GraphError(f"{path}: cannot map file ({exc})") from None
            self._maps[path] = mapped
        return np.array(mapped[lo:hi])

    @staticmethod
    def _range(start, stop, total: int, what: str) -> tuple[int, int]:
        start, stop = operator.index(start), operator.index(stop)
        if not 0 <= start <= stop <= total:
            raise ValueError(f"{what} [{start}, {stop}) is not within 0..{total}")
        return start, stop

    def _pieces(self, starts: np.ndarray, start: int, stop: int):
        """(shard index, local lo, local hi) of every shard the range [start, stop) touches."""
        first = int(np.searchsorted(starts, start, side="right")) - 1
        for i in range(max(first, 0), len(starts) - 1):
            lo, hi = int(starts[i]), int(starts[i + 1])
            if lo >= stop and stop > start:
                break
            a, b = max(start, lo) - lo, min(stop, hi) - lo
            if b > a:
                yield i, a, b

    def read_edges(self, start: int, stop: int) -> tuple:
        """``(src, dst, weight)`` of the edges [start, stop) in listing order (a range may span
        shards): int64, int64 and float32 arrays (weight None when unweighted). Node ids and
        weights are checked; a bad one is a GraphError naming the shard file and the edge's
        index in it."""
        start, stop = self._range(start, stop, self.num_edges, "edges")
        parts = []
        for i, a, b in self._pieces(self._edge_starts, start, stop):
            shard = self._edge_shards[i]
            self._verify(shard)
            arrays = shard["arrays"]
            src, dst = self._slice(arrays["src"], a, b), self._slice(arrays["dst"], a, b)
            for field, ids in (("src", src), ("dst", dst)):
                bad = np.flatnonzero((ids < 0) | (ids >= self.num_nodes))
                if bad.size:
                    e = int(bad[0])
                    raise GraphError(f"{arrays[field][0]}: edge {a + e} has node id {int(ids[e])}, out "
                                     f"of range for {self.num_nodes} nodes")
            weight = None
            if self.weighted:
                weight = self._slice(arrays["weight"], a, b)
                bad = np.flatnonzero(~np.isfinite(weight))
                if bad.size:
                    e = int(bad[0])
                    raise GraphError(f"{arrays['weight'][0]}: edge {a + e} has a non-finite weight "
                                     f"{weight[e]}")
            parts.append((src, dst, weight))
        if not parts:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty.copy(), (np.empty(0, dtype=np.float32) if self.weighted else None)
        if len(parts) == 1:
            return parts[0]
        src, dst, weight = zip(*parts)
        return (np.concatenate(src), np.concatenate(dst),
                np.concatenate(weight) if self.weighted else None)

    def read_nodes(self, start: int, stop: int) -> dict:
        """The node rows [start, stop) across node shards: ``{"x": float32 [k, F], "y": labels,
        "train_mask": bool [k], "val_mask": ..., "test_mask": ...}``; a field the set does not
        hold (an unlabeled graph's y and masks) is None. Features must be finite, class ids in
        range, the masks disjoint and targets finite in their rows: a bad value is a GraphError
        naming the shard file and the row's index in it."""
        start, stop = self._range(start, stop, self.num_nodes, "node rows")
        parts = []
        for i, a, b in self._pieces(self._node_starts, start, stop):
            shard = self._node_shards[i]
            self._verify(shard)
            rows = {field: self._slice(shard["arrays"][field], a, b) for field in self.node_fields}
            self._check_rows(shard, a, rows)
            parts.append(rows)
        out = {}
        for field in NODE_FIELDS:
            if field not in self.node_fields:
                out[field] = None
            elif not parts:
                out[field] = self._slice(self._node_shards[0]["arrays"][field], 0, 0)
            else:
                out[field] = parts[0][field] if len(parts) == 1 else \
                    np.concatenate([p[field] for p in parts])
        return out

    def _check_rows(self, shard: dict, offset: int, rows: dict) -> None:
        arrays = shard["arrays"]
        x = rows["x"]
        bad = np.argwhere(~np.isfinite(x))
        if bad.size:
            r, c = (int(v) for v in bad[0])
            raise GraphError(f"{arrays['x'][0]}: row {offset + r} (node {shard['start'] + offset + r}) "
                             f"has a non-finite feature {x[r, c]} in column {c}")
        y = rows.get("y")
        if y is not None and tasks.spec(self.task).class_ids:
            bad = np.flatnonzero((y < 0) | (y >= self.num_classes))
            if bad.size:
                r = int(bad[0])
                raise GraphError(f"{arrays['y'][0]}: row {offset + r} (node {shard['start'] + offset + r}) "
                                 f"has label {int(y[r])}, out of range for {self.num_classes} classes")
        present = [m for m in MASKS if m in rows]
        for j, name in enumerate(present):
            mask = rows[name]
            for other in present[:j]:
                both = np.flatnonzero(mask & rows[other])
                if both.size:
                    r = int(both[0])
                    raise GraphError(f"{arrays[name][0]}: row {offset + r} (node {shard['start'] + offset + r}) "
                                     f"is also in {other}; the masks must not overlap")
            if y is not None and y.dtype.kind == "f":
                bad = np.flatnonzero(~np.isfinite(y[mask].reshape(int(mask.sum()), -1)).all(axis=1))
                if bad.size:
                    r = int(np.flatnonzero(mask)[bad[0]])
                    raise GraphError(f"{arrays['y'][0]}: row {offset + r} (node {shard['start'] + offset + r}) "
                                     f"is in {name} but its target is not finite")

    # -- the whole graph --------------------------------------------------------------------
    def graph(self) -> Graph:
        """The whole graph in this process: the adjacency ``adjacency_from_edges`` makes of
        every listed edge with the set's flags, and the node rows. What ``--dataset DIR``
        loads. ``x`` is None when the set's features are the degree features (the trainer
        computes the same from the structure)."""
        src, dst, weight = self.read_edges(0, self.num_edges)
        adj = adjacency_from_edges(src, dst, self.num_nodes, weights=weight,
                                   symmetrize=self.symmetrize, drop_self_loops=self.drop_self_loops)
        del src, dst, weight
        rows = self.read_nodes(0, self.num_nodes)
        fields = {field: None if rows[field] is None else torch.from_numpy(rows[field])
                  for field in NODE_FIELDS}
        if self.features == "degree":
            fields["x"] = None
        return Graph.from_adjacency(adj, source=str(self.directory), directed=self.directed,
                                    name=self.name, num_classes=self.num_classes,
                                    meta=dict(self.meta["meta"]), **fields)

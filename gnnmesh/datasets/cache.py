"""On-disk cache of processed graphs.

One directory per graph, named ``<dataset>-<key>``, holding one ``.npy`` file per array
(CSR ``indptr``/``indices``/``values``, ``x``, ``y``, masks) and ``graph.json`` with the
scalar fields and ``meta``. ``graph.json`` is written last and the directory is built
under a temporary name and renamed into place, so a reader never sees a half-written
entry and concurrent writers (e.g. several ranks) cannot corrupt one another.

Big arrays are opened with ``np.load(mmap_mode="c")``: copy-on-write pages, so loading is
instant, the OS page cache is shared between processes, and the arrays are writable,
which keeps ``torch.from_numpy`` free of its non-writable-array warning (writes stay
private to the process and never reach the file).

A typed graph's union keeps its relations (``relation_ptr``, ``relation_ids``, their names in
``graph.json``) and the meta that types it (``gnnmesh.typed.stored_meta``).

The key hashes the dataset name, the options that shape the graph, the size and mtime
of every source file, the loader's version and FORMAT_VERSION: changing any of them
makes a new entry. The derived transpose of the adjacency is not stored: rebuilding it
takes about 1 s for 10M edges, less than reading two more 80 MB arrays would cost in
disk and cache churn.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..atomic import sweep_stale, temporary_directory
from ..errors import GraphError
from ..graph import Adjacency, Graph, sparse_csr
from ..relations import Relations
from ..typed import stored_meta as typed_meta
from ..structured import load_json


FORMAT_VERSION = 1
_MMAP_MIN_BYTES = 1 << 20       # small arrays are just read
_SPARSE_X_MIN_BYTES = 64 << 20  # dense x this big and mostly zeros is stored as CSR
_SPARSE_X_DENSITY = 0.1


def default_dir(option: Optional[str] = None) -> Path:
    """``option``, else ``$GNNMESH_CACHE``, else ``$XDG_CACHE_HOME/gnnmesh``, else
    ``~/.cache/gnnmesh``. Never derived from the data root, which may be read-only."""
    if option:
        return Path(option).expanduser()
    if os.environ.get("GNNMESH_CACHE"):
        return Path(os.environ["GNNMESH_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gnnmesh"


def entry_dir(cache_root: Path, name: str, loader_version: int, options: dict,
              sources: list) -> Path:
    payload = json.dumps({"format": FORMAT_VERSION, "name": name, "loader": loader_version,
                          "options": options, "sources": sources}, sort_keys=True, default=str)
    key = hashlib.sha256(payload.encode()).hexdigest()[:20]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] or "graph"
    return Path(cache_root) / f"{slug}-{key}"


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot store {type(value).__name__} in graph.meta")


def save(graph: Graph, path: Path) -> bool:
    """Write ``graph`` to ``path`` atomically. A failure (read-only disk, full disk) only
    warns: the cache is an optimisation, never a reason for a load to fail."""
    path = Path(path)
    tmp = None
    try:
        tmp = temporary_directory(path)
        info = _write_arrays(graph, tmp)
        with open(tmp / "graph.json", "w") as fh:
            json.dump(info, fh, default=_json_default)
        try:
            os.rename(tmp, path)
        except OSError:
            if not (path / "graph.json").exists():  # a broken leftover: replace it
                shutil.rmtree(path, ignore_errors=True)
                os.rename(tmp, path)
            # else another process wrote the same entry first; ours is discarded below
        return True
    except (OSError, TypeError, ValueError) as exc:
        warnings.warn(f"gnnmesh: could not write the dataset cache at {path}: {exc}", stacklevel=3)
        return False
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _write_arrays(graph: Graph, out: Path) -> dict:
    def put(name, tensor):
        np.save(out / f"{name}.npy", tensor.detach().cpu().numpy(), allow_pickle=False)

    adj = graph.adj
    put("indptr", adj.indptr)
    put("indices", adj.indices)
    if adj.values is not None:
        put("values", adj.values)
    fields = {}
    for name in ("y", "train_mask", "val_mask", "test_mask"):
        tensor = getattr(graph, name)
        if tensor is not None:
            put(name, tensor)
            fields[name] = True
    x_layout = None
    x = graph.x
    if x is not None:
        if x.layout == torch.sparse_csr:
            x_layout = "sparse"
            put("x_indptr", x.crow_indices())
            put("x_indices", x.col_indices())
            put("x_values", x.values())
        elif x.numel() * x.element_size() >= _SPARSE_X_MIN_BYTES and \
                int(torch.count_nonzero(x)) <= _SPARSE_X_DENSITY * x.numel():
            x_layout = "dense-from-csr"  # e.g. bag-of-words features: 100x smaller on disk
            dense = x.detach().cpu().numpy()
            rows, cols = np.nonzero(dense)
            indptr = np.zeros(dense.shape[0] + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=dense.shape[0]), out=indptr[1:])
            for name, arr in (("x_indptr", indptr), ("x_indices", cols), ("x_values", dense[rows, cols])):
                np.save(out / f"{name}.npy", arr, allow_pickle=False)
        else:
            x_layout = "dense"
            put("x", x)
    relations, meta = None, graph.meta
    if adj.edge_features is not None:
        put("edge_features", adj.edge_features)
    if adj.relations is not None:  # a typed graph's union: its relations, and the meta that types it
        put("relation_ptr", adj.relations.ptr)
        put("relation_ids", adj.relations.ids)
        relations = list(adj.relations.names)
        meta = typed_meta.stored(graph.meta, put)
    return {"format": FORMAT_VERSION, "name": graph.name, "directed": graph.directed,
            "num_classes": graph.num_classes, "shape": list(adj.shape),
            "weighted": adj.values is not None, "fields": fields, "x_layout": x_layout,
            "x_shape": None if graph.x is None else list(graph.x.shape),
            "x_dtype": None if graph.x is None else str(graph.x.dtype).replace("torch.", ""),
            "relations": relations, "edge_features": adj.edge_features is not None, "meta": meta}


def load(path: Path) -> Optional[Graph]:
    """The cached graph, or None when there is no complete, readable entry at ``path``.
    A damaged entry (a file missing or corrupt, arrays that do not form a valid graph) is
    removed, so that the caller's rebuild can take its place."""
    path = Path(path)
    sweep_stale(path.parent)  # a writer killed after another one completed the entry left these
    if not (path / "graph.json").is_file():  # graph.json is written last: no entry (yet)
        return None
    try:
        with open(path / "graph.json") as fh:
            info = load_json(fh)
        if info.get("format") != FORMAT_VERSION:  # cannot happen via entry_dir's key
            raise ValueError(f"format {info.get('format')}, expected {FORMAT_VERSION}")
        return _read(path, info)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # damaged entry: rebuild it
        warnings.warn(f"ignoring unreadable cache entry {path} (rebuilding it): {exc}", stacklevel=3)
        shutil.rmtree(path, ignore_errors=True)
        return None


def _array(path: Path, name: str) -> torch.Tensor:
    file = path / f"{name}.npy"
    big = file.stat().st_size >= _MMAP_MIN_BYTES
    return torch.from_numpy(np.load(file, mmap_mode="c" if big else None, allow_pickle=False))


def _read(path: Path, info: dict) -> Graph:
    shape = tuple(info["shape"])
    adj = Adjacency(_array(path, "indptr"), _array(path, "indices"),
                    _array(path, "values") if info["weighted"] else None, shape)
    if adj.indptr.shape[0] != shape[0] + 1 or int(adj.indptr[-1]) != adj.indices.shape[0]:
        raise ValueError("adjacency arrays do not match")
    fields = {name: _array(path, name) for name in info["fields"]}
    x = None
    layout = info["x_layout"]
    if layout == "dense":
        x = _array(path, "x")
    elif layout is not None:
        indptr, indices, values = (_array(path, f"x_{k}") for k in ("indptr", "indices", "values"))
        if layout == "sparse":
            x = sparse_csr(indptr, indices, values, info["x_shape"])
        else:
            rows = torch.repeat_interleave(torch.arange(shape[0]), indptr[1:] - indptr[:-1])
            x = torch.zeros(info["x_shape"], dtype=getattr(torch, info["x_dtype"]))
            x[rows, indices] = values
    meta = info["meta"]
    if info.get("edge_features"):
        try:
            adj = adj.with_edge_features(_array(path, "edge_features"), "the cached edge_features")
        except GraphError as exc:
            raise ValueError(str(exc)) from None
    if info.get("relations") is not None:
        relations = Relations(tuple(info["relations"]), _array(path, "relation_ptr"), _array(path, "relation_ids"))
        try:
            adj = adj.with_relations(relations)
        except GraphError as exc:
            raise ValueError(str(exc)) from None
        meta = typed_meta.restored(meta, lambda name: _array(path, name))
    return Graph(adj=adj, x=x, name=info["name"], directed=info["directed"],
                 num_classes=info["num_classes"], meta=meta, **fields)

"""Partitions on disk: ``<cache root>/partitions/<key>-<method>-P<parts>-eps<epsilon>-s<seed>.npy``
(``shp`` adds ``-<digest of its sampling settings>``) holding the assignment, with a ``.json`` beside it describing it (graph key, parameters,
partitioning time).

Both files are written atomically (``gnnmesh.atomic``), the ``.json`` last:
an entry without its ``.json`` is incomplete and ignored by the cache, so readers never
see a half-written partition and concurrent ranks writing the same entry cannot corrupt it.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Optional

import numpy as np

from ..atomic import atomic_file, write_file
from ..datasets.cache import default_dir
from ..errors import GraphError
from ..structured import load_json
from ..validate import SEED_RANGE, Range
from .base import Partition, as_adjacency, graph_key
from .registry import REGISTRY

FORMAT_VERSION = 1


def store_dir(cache_dir=None) -> Path:
    """Where partitions live: ``partitions/`` under the dataset cache root (``cache_dir``,
    else ``$GNNMESH_CACHE``, else ``~/.cache/gnnmesh``)."""
    return default_dir(None if cache_dir is None else os.fspath(cache_dir)) / "partitions"


def entry_path(root: Path, key: str, method: str, parts: int, epsilon: float, seed: int,
               variant: Optional[str] = None) -> Path:
    """The entry's file; ``variant`` tells apart results of the same method, graph and parts
    that further arguments set (a digest of ``shp``'s sampling settings)."""
    tail = f"-{variant}" if variant else ""
    return Path(root) / f"{key}-{method}-P{parts}-eps{epsilon:g}-s{seed}{tail}.npy"


def save_partition(part: Partition, path) -> bool:
    """Write ``part`` to ``path`` (.npy) and its description beside it. A failure only warns:
    the store is a cache, never a reason for partitioning to fail."""
    path = Path(path)
    meta = {"format": FORMAT_VERSION, "graph_key": part.graph_key, "num_nodes": part.num_nodes,
            "parts": part.parts, "method": part.method,
            "method_version": _version(part.method), "epsilon": part.epsilon,
            "seed": part.seed, "seconds": part.seconds}
    if part.preset is not None:
        meta["preset"] = part.preset
    if part.sampling is not None:
        meta["sampling"] = part.sampling
    try:
        with atomic_file(path) as fh:
            np.save(fh, np.asarray(part.assignment), allow_pickle=False)
        write_file(path.with_suffix(".json"), json.dumps(meta, indent=1))
        return True
    except OSError as exc:
        warnings.warn(f"gnnmesh: could not store the partition at {path}: {exc}", stacklevel=3)
        return False


def is_current(path, method: str, preset: Optional[str] = None) -> bool:
    """Whether a complete entry made by the current version of ``method`` (with ``preset``,
    for ``hp``) is at ``path``."""
    path = Path(path)
    if not (path.is_file() and path.with_suffix(".json").is_file()):
        return False
    try:
        meta = read_meta(path)
    except GraphError:
        return False
    return (meta.get("method_version", 1) == _version(method)
            and meta.get("preset") == preset)


def load_partition(path, graph, parts: Optional[int] = None) -> Partition:
    """Read a stored partition and check it fits ``graph`` (a Graph or Adjacency).

    ``path`` is the ``.npy`` file (its ``.json`` also works). Raises GraphError (a
    ValueError) naming the file when it is missing or unreadable, its length is not the
    node count, a value is out of range, a part is empty, it was computed for another
    graph (its stored graph key differs), or it has other than ``parts`` parts. A bare
    ``.npy`` without its ``.json`` is accepted; its graph key then cannot be checked.
    """
    path = Path(path)
    if path.suffix == ".json":
        path = path.with_suffix(".npy")
    if not path.is_file():
        raise GraphError(f"{path}: partition file not found")
    try:
        assignment = np.load(path, allow_pickle=False)
    except Exception as exc:  # numpy raises several types for a damaged header
        raise GraphError(f"{path}: not a readable .npy partition file ({' '.join(str(exc).split())[:200]})") from None
    meta = read_meta(path)
    if not isinstance(assignment, np.ndarray):  # a .npz archive under the name
        raise GraphError(f"{path}: not a readable .npy partition file (an archive of several arrays)")
    if assignment.ndim != 1 or not np.issubdtype(assignment.dtype, np.integer):
        raise GraphError(f"{path}: expected a 1-D integer array, got {assignment.dtype} "
                         f"with shape {list(assignment.shape)}")
    adj = as_adjacency(graph)
    n = adj.shape[0]
    if assignment.shape[0] != n:
        raise GraphError(f"{path}: the partition has {assignment.shape[0]} entries but the graph "
                         f"has {n} nodes")
    stored_parts = int(meta.get("parts", int(assignment.max()) + 1 if n else 0))
    if stored_parts > n:  # before counting the nodes of every part
        raise GraphError(f"{path}: the partition has {stored_parts} parts for a graph of {n} nodes (every "
                         "part holds at least one)")
    low, high = int(assignment.min()), int(assignment.max())
    if low < 0 or high >= stored_parts:
        bad = int(np.flatnonzero((assignment < 0) | (assignment >= stored_parts))[0])
        raise GraphError(f"{path}: node {bad} is in part {int(assignment[bad])}, out of range "
                         f"for {stored_parts} parts")
    sizes = np.bincount(assignment, minlength=stored_parts)
    if (sizes == 0).any():
        raise GraphError(f"{path}: part {int(np.flatnonzero(sizes == 0)[0])} of {stored_parts} is empty")
    key = graph_key(adj)
    if "graph_key" in meta and meta["graph_key"] != key:
        raise GraphError(f"{path}: the partition was computed for another graph (graph key "
                         f"{meta['graph_key']}, this graph's is {key})")
    if parts is not None and int(parts) != stored_parts:
        raise GraphError(f"{path}: the partition has {stored_parts} parts, expected {int(parts)}")
    return Partition(assignment=assignment.astype(np.int64, copy=False), parts=stored_parts,
                     method=str(meta.get("method", "file")), epsilon=float(meta.get("epsilon", 0.0)),
                     seed=int(meta.get("seed", 0)), seconds=float(meta.get("seconds", 0.0)),
                     graph_key=key, path=str(path), preset=meta.get("preset"),
                     sampling=meta.get("sampling"))


def read_meta(path) -> dict:
    """The description beside a stored partition ({} when there is none)."""
    meta_path = Path(path).with_suffix(".json")
    if not meta_path.exists():
        return {}
    try:
        with open(meta_path) as fh:
            meta = load_json(fh)
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
        problem = _meta_problem(meta)
        if problem:
            raise ValueError(problem)
        return meta
    except (OSError, ValueError) as exc:
        raise GraphError(f"{meta_path}: unreadable partition description ({' '.join(str(exc).split())})") from None


def _meta_problem(meta: dict) -> str:
    """What keeps a field of a partition's description from being what ``save_partition``
    writes ('' if nothing): every field a partition is built from is checked before use."""
    def show(value) -> str:
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."

    def count(value, low: int, high: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

    for key, ok, what in (
            ("parts", lambda v: count(v, 1, 2**31), "a count of parts >= 1"),
            ("num_nodes", lambda v: count(v, 0, 2**48), "a count of nodes"),
            ("seed", lambda v: count(v, *SEED_RANGE), f"an integer in [{SEED_RANGE[0]}, {SEED_RANGE[1]}]"),
            ("epsilon", lambda v: not Range(0).number_problem(v), "a finite number >= 0"),
            ("seconds", lambda v: not Range(0).number_problem(v), "a finite number >= 0"),
            ("method", lambda v: isinstance(v, str), "a string"),
            ("graph_key", lambda v: isinstance(v, str), "a string"),
            ("method_version", lambda v: count(v, 0, 2**31), "a version number"),
            ("preset", lambda v: v is None or isinstance(v, str), "a string or null"),
            ("sampling", lambda v: v is None or isinstance(v, dict), "an object or null")):
        if key in meta and not ok(meta[key]):
            return f"field '{key}' must be {what}, got {show(meta[key])}"
    return ""


def _version(method: str) -> int:
    """The version of ``method``'s output (``PartitionerSpec.version``; 1 for one not registered)."""
    return REGISTRY[method].version if method in REGISTRY else 1

"""Synthetic graphs of any size, generated in O(E) time and memory with numpy.

``sbm``: a stochastic block model whose node features are noisy class means, a learnable
node-classification task. Its defaults are tuned so that the graph matters: classifying
raw features by nearest class mean gets about 60% test accuracy (5 classes), after one
round of neighbour averaging about 89%. ``rmat``: an R-MAT (Graph500 Kronecker) power-law
graph with random features and labels, for scaling runs: 10M edges take about 6 s.

Both sample endpoint pairs in vectorised batches, drop self-loops and duplicates, and top
up with further batches until exactly the requested number of distinct edges exists
(the last batch's surplus is dropped at random), so ``edges`` means distinct edges.

``rmat_plan`` and ``sbm_plan`` stop before the Graph: a ``Synthetic`` holds the edge keys
(8 bytes per edge) and draws the node rows block by block, so that a shard writer never
holds more than a block of features; ``rmat`` and ``sbm`` are ``plan(...).graph()``, the
same graph for the same options whatever the block size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import numpy as np
import torch

from .. import progress
from ..errors import GraphError
from ..graph import Graph
from ._build import adjacency_from_keys, random_split, sorted_unique
from .options import SPLIT, Option

_CHUNK = 1 << 22          # edges per vectorised batch: bounds temporary memory (~100 MB)
_MAX_ROUNDS = 64

SBM_OPTIONS = {
    "nodes": Option(1000, int, "number of nodes"),
    "classes": Option(5, int, "number of classes (= blocks), of equal size"),
    "features": Option(32, int, "feature dimension (0 for no features)"),
    "avg_degree": Option(10.0, float, "average degree; the graph has round(nodes*avg_degree/2) "
                                      "undirected edges"),
    "p_in_ratio": Option(10.0, float, "p_in / p_out: how much likelier an edge is inside a class"),
    "feature_noise": Option(4.0, float, "std of the gaussian noise added to the class means "
                                        "(means are standard normal vectors)"),
    "seed": Option(0, int, "random seed", seed=True),
    **SPLIT,
}

RMAT_OPTIONS = {
    "scale": Option(None, int, "log2 of the node count (Graph500 SCALE)", optional=True),
    "nodes": Option(None, int, "node count (need not be a power of two)", optional=True),
    "edges": Option(None, int, "distinct directed edges (undirected pairs if undirected)",
                    optional=True),
    "edge_factor": Option(16, int, "edges per node when 'edges' is not given"),
    "a": Option(0.57, float, "R-MAT quadrant probability a (Graph500)"),
    "b": Option(0.19, float, "R-MAT quadrant probability b"),
    "c": Option(0.19, float, "R-MAT quadrant probability c (d = 1 - a - b - c)"),
    "features": Option(128, int, "feature dimension (random float32)"),
    "classes": Option(10, int, "number of (random) classes"),
    "seed": Option(0, int, "random seed", seed=True),
    "undirected": Option(False, bool, "store every edge in both directions"),
    "permute": Option(True, bool, "shuffle vertex ids, as Graph500 does, so ids carry no "
                                  "degree information"),
    **SPLIT,
}


def _distinct_keys(sample: Callable[[int], tuple], target: int, n: int, undirected: bool,
                   rng: np.random.Generator, what: str) -> np.ndarray:
    """Sorted unique edge keys (``dst * n + src``; ``hi * n + lo`` when undirected), exactly
    ``target`` of them, drawing batches from ``sample(count) -> (src, dst)``."""
    possible = n * (n - 1) // (2 if undirected else 1)
    if target > possible:
        raise GraphError(f"{what}: {target} edges requested but {n} nodes allow at most {possible}")
    have = np.zeros(0, dtype=np.int64)
    factor = 1.05
    with progress.phase(f"{what}: drawing {target:,} distinct edges", total=target) as shown:
        for _ in range(_MAX_ROUNDS):
            need = target - have.size
            if need <= 0:
                break
            count = int(need * factor) + 64
            fresh = []
            for start in range(0, count, _CHUNK):
                src, dst = sample(min(_CHUNK, count - start))
                keep = src != dst
                src, dst = src[keep], dst[keep]
                if undirected:
                    src, dst = np.minimum(src, dst), np.maximum(src, dst)
                fresh.append(sorted_unique(dst * n + src))
                shown.update(have.size + need * min(1.0, (start + _CHUNK) / count))  # the round's expected yield
            new = sorted_unique(np.concatenate(fresh)) if len(fresh) > 1 else fresh[0]
            if have.size:
                pos = np.searchsorted(have, new).clip(max=have.size - 1)
                new = new[have[pos] != new]
                merged = np.concatenate([have, new])
                merged.sort(kind="stable")  # two sorted runs: timsort merges them in linear time
                have = merged
            else:
                have = new
            gained = max(new.size, 1)
            factor = min(max(count / gained, 1.0) * 1.05, 1e3)
            shown.update(have.size)
    if have.size < target:
        raise GraphError(f"{what}: could not draw {target} distinct edges (got {have.size}); "
                         f"the requested graph is too dense for this generator")
    if have.size > target:
        have = np.delete(have, rng.choice(have.size, have.size - target, replace=False))
    return have


def _keys_to_adjacency(keys: np.ndarray, n: int, undirected: bool):
    if not undirected:  # _distinct_keys returns them sorted and unique: already CSR order
        return adjacency_from_keys(keys, n, presorted=True)
    hi, lo = np.divmod(keys, n)  # add the mirror entry of every pair
    return adjacency_from_keys(np.concatenate([keys, lo * n + hi]), n, assume_unique=True)


@dataclass
class Synthetic:
    """A generated graph before it is built. ``keys``: its distinct edges, sorted, as
    ``dst * n + src`` (directed) or ``hi * n + lo`` (undirected: one key per pair, stored
    both ways in the graph). ``draw_rows(block)`` yields ``(field, rows)`` pieces: each of
    ``x`` (float32, ``block`` rows at a time, in node order), ``y`` and the three masks
    (whole, O(nodes)), in the order the generator draws them; it may be called once, as it
    consumes the feature generator's random stream."""
    name: str
    source: str
    num_nodes: int
    num_classes: int
    num_features: int
    undirected: bool
    keys: np.ndarray
    meta: dict
    draw_rows: Callable[[int], Iterator[tuple]]

    def edges(self, block: int = _CHUNK) -> Iterator[tuple]:
        """``(src, dst)`` int64 arrays of at most ``block`` edges, in key order: every key
        once (an undirected pair as ``lo -> hi``, mirrored when the adjacency is built)."""
        n = self.num_nodes
        for start in range(0, self.keys.size, block):
            dst, src = np.divmod(self.keys[start:start + block], n)
            yield src, dst

    def graph(self) -> Graph:
        """The Graph: what ``rmat``/``sbm`` return."""
        n = self.num_nodes
        with progress.phase(f"{self.source}: building the adjacency and features"):
            adj = _keys_to_adjacency(self.keys, n, self.undirected)
            self.keys = None  # the adjacency holds them now
            fields = {}
            for field, rows in self.draw_rows(max(n, 1)):
                fields[field] = rows if field not in fields else np.concatenate([fields[field], rows])
        tensors = {k: torch.from_numpy(v) for k, v in fields.items()}
        return Graph.from_adjacency(adj, source=self.source, directed=not self.undirected,
                                    name=self.name, num_classes=self.num_classes, meta=self.meta,
                                    **tensors)


def _once(draw):
    used = []

    def guarded(block):
        if used:
            raise RuntimeError("a generator's node rows can be drawn once")
        used.append(True)
        return draw(block)
    return guarded


def sbm(nodes, classes, features, avg_degree, p_in_ratio, feature_noise, seed,
        split_seed, train_frac, val_frac) -> Graph:
    return sbm_plan(nodes, classes, features, avg_degree, p_in_ratio, feature_noise, seed,
                    split_seed, train_frac, val_frac).graph()


def sbm_plan(nodes, classes, features, avg_degree, p_in_ratio, feature_noise, seed,
             split_seed, train_frac, val_frac) -> Synthetic:
    n, k = nodes, classes
    if n < 1 or k < 1 or k > n:
        raise GraphError(f"sbm: need nodes >= classes >= 1, got nodes={n}, classes={k}")
    if features < 0 or avg_degree < 0 or p_in_ratio < 0 or feature_noise < 0:
        raise GraphError("sbm: features, avg_degree, p_in_ratio and feature_noise must be >= 0")
    edge_rng, feat_rng, pick_rng = (np.random.default_rng(s)
                                    for s in np.random.SeedSequence(seed).spawn(3))
    y = np.arange(n, dtype=np.int64) % k
    edge_rng.shuffle(y)
    order = np.argsort(y, kind="stable")           # nodes grouped by class
    size = np.bincount(y, minlength=k)
    first = np.concatenate(([0], np.cumsum(size)[:-1]))
    # Fraction of edges inside a class that makes p_in / p_out = p_in_ratio.
    pairs_in = float(np.sum(size * (size - 1) / 2))
    pairs_out = n * (n - 1) / 2 - pairs_in
    inside = p_in_ratio * pairs_in
    frac_in = 1.0 if pairs_out == 0 else inside / (inside + pairs_out)

    def sample(count):
        u = edge_rng.integers(0, n, count)
        cu = y[u]
        v = np.empty(count, dtype=np.int64)
        same = edge_rng.random(count) < frac_in
        cs = cu[same]
        v[same] = order[first[cs] + (edge_rng.random(cs.size) * size[cs]).astype(np.int64)]
        co = cu[~same]
        idx = (edge_rng.random(co.size) * (n - size[co])).astype(np.int64)
        idx += np.where(idx >= first[co], size[co], 0)  # skip over the node's own class block
        v[~same] = order[idx]
        return u, v

    target = int(round(n * avg_degree / 2))
    keys = _distinct_keys(sample, target, n, True, pick_rng, "sbm")
    masks, split = random_split(n, y, train_frac, val_frac, split_seed)

    def draw_rows(block):
        if features:
            means = feat_rng.standard_normal((k, features), dtype=np.float32)
            for start in range(0, n, block):
                x = means[y[start:start + block]]
                x += np.float32(feature_noise) * feat_rng.standard_normal((x.shape[0], features),
                                                                          dtype=np.float32)
                yield "x", x
        yield "y", y
        for name, mask in masks.items():
            yield name, mask.numpy()

    params = dict(nodes=n, classes=k, features=features, avg_degree=avg_degree,
                  p_in_ratio=p_in_ratio, feature_noise=feature_noise, seed=seed)
    meta = {"generator": "sbm", "params": params, "split": split,
            "undirected_edges": int(keys.size), "intra_class_edge_fraction": frac_in}
    return Synthetic(f"sbm-{n}", "sbm", n, k, features, True, keys, meta, _once(draw_rows))


def rmat_size(scale: Optional[int], nodes: Optional[int], edges: Optional[int],
              edge_factor: int) -> tuple[int, int]:
    """(nodes, edges) from the size options: ``scale`` or ``nodes`` fixes the node count
    (both must agree), ``edges`` defaults to ``nodes * edge_factor``; with only ``edges``
    given the node count is ``edges // edge_factor``; with nothing, scale 14."""
    if scale is not None:
        if not 1 <= scale <= 40:
            raise GraphError(f"rmat: option 'scale' must be in 1..40, got {scale}")
        if nodes is not None and nodes != 2 ** scale:
            raise GraphError(f"rmat: options 'scale'={scale} and 'nodes'={nodes} disagree; give one")
        nodes = 2 ** scale
    if edge_factor < 1:
        raise GraphError(f"rmat: option 'edge_factor' must be >= 1, got {edge_factor}")
    if nodes is None:
        nodes = max(2, edges // edge_factor) if edges is not None else 2 ** 14
    if nodes < 2:
        raise GraphError(f"rmat: need at least 2 nodes, got {nodes}")
    if edges is None:
        edges = nodes * edge_factor
    if edges < 0:
        raise GraphError(f"rmat: option 'edges' must be >= 0, got {edges}")
    return nodes, edges


def rmat(scale, nodes, edges, edge_factor, a, b, c, features, classes, seed, undirected,
         permute, split_seed, train_frac, val_frac) -> Graph:
    return rmat_plan(scale, nodes, edges, edge_factor, a, b, c, features, classes, seed,
                     undirected, permute, split_seed, train_frac, val_frac).graph()


def rmat_plan(scale, nodes, edges, edge_factor, a, b, c, features, classes, seed, undirected,
              permute, split_seed, train_frac, val_frac) -> Synthetic:
    n, m = rmat_size(scale, nodes, edges, edge_factor)
    d = 1.0 - a - b - c
    if min(a, b, c) < 0 or d < -1e-9:
        raise GraphError(f"rmat: need a, b, c >= 0 and a + b + c <= 1, got {a}, {b}, {c}")
    if features < 0 or classes < 1:
        raise GraphError(f"rmat: need features >= 0 and classes >= 1, got {features}, {classes}")
    levels = max(1, math.ceil(math.log2(n)))
    edge_rng, feat_rng, pick_rng = (np.random.default_rng(s)
                                    for s in np.random.SeedSequence(seed).spawn(3))
    # Quadrant thresholds on 16-bit random numbers: half the random bytes of float32 and
    # precise to 1.5e-5, far below the statistical noise of any graph this produces.
    t_a, t_ab, t_abc = (np.uint16(min(round(p * 65536), 65535)) for p in (a, a + b, a + b + c))
    dtype = np.int32 if levels < 31 else np.int64
    relabel = edge_rng.permutation(n) if permute else None

    def sample(count):
        # One quadrant choice per level, most significant bit first. Ids >= n (when n is
        # not a power of two) are rejected: this keeps R-MAT's distribution restricted to
        # [0, n) instead of folding the tail onto the hubs as a modulo would.
        src = np.zeros(count, dtype=dtype)
        dst = np.zeros(count, dtype=dtype)
        for _ in range(levels):
            r = edge_rng.integers(0, 65536, count, dtype=np.uint16)
            src += src
            src += r >= t_ab                              # quadrants c, d: lower half
            dst += dst
            dst += (r >= t_a) != ((r >= t_ab) & (r < t_abc))  # quadrants b, d: right half
        src, dst = src.astype(np.int64), dst.astype(np.int64)
        if n != 1 << levels:
            ok = (src < n) & (dst < n)
            src, dst = src[ok], dst[ok]
        if relabel is not None:
            src, dst = relabel[src], relabel[dst]
        return src, dst

    keys = _distinct_keys(sample, m, n, undirected, pick_rng, "rmat")
    masks, split = random_split(n, None, train_frac, val_frac, split_seed)

    def draw_rows(block):
        if features:  # the labels come from the same stream, after every feature
            for start in range(0, n, block):
                yield "x", feat_rng.standard_normal((min(block, n - start), features), dtype=np.float32)
        yield "y", feat_rng.integers(0, classes, n)
        for name, mask in masks.items():
            yield name, mask.numpy()

    params = dict(nodes=n, edges=m, scale=levels, edge_factor=edge_factor, a=a, b=b, c=c,
                  features=features, classes=classes, seed=seed, undirected=undirected,
                  permute=permute)
    meta = {"generator": "rmat", "params": params, "split": split}
    return Synthetic(f"rmat-{n}-{m}", "rmat", n, classes, features, undirected, keys, meta,
                     _once(draw_rows))

"""The graph type: a CSR adjacency (rows = destinations) with its vertex data.

Convention: an edge ``j -> i`` is the nonzero ``A[i, j]``, so ``A @ X`` sums, for every
vertex ``i``, the rows of its in-neighbours. That is what every aggregation computes.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np
import scipy.sparse as sp
import torch

from .errors import ConfigError, GraphError


def fits_int32(*sizes: int) -> bool:
    """Whether ids and offsets up to these sizes (entry counts, dimensions) fit in int32,
    which the kernels index with where they can (half the bytes, faster in MKL and cuSPARSE)."""
    return max(sizes) <= 2**31 - 1


class Adjacency:
    """A sparse matrix in CSR form (int64 ``indptr``/``indices``, optional float32 ``values``).

    Indices are sorted within each row and there are no duplicate entries. ``values=None``
    means every stored entry is 1. The transpose is built on first use and kept, together
    with the permutation that maps this matrix's entries onto the transpose's
    (``t().values == values[transpose_perm]``), so backward passes never re-sort edges.
    """

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor,
                 values: Optional[torch.Tensor], shape: tuple[int, int]):
        self.indptr = indptr
        self.indices = indices
        self.values = values
        self.shape = (int(shape[0]), int(shape[1]))
        self._cache: dict = {}

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_coo(cls, row, col, shape, values=None, reduce: str = "sum") -> "Adjacency":
        """Build from coordinate lists. Duplicate entries are merged: with ``values`` they
        are summed (``reduce="sum"``) or the first one kept (``"first"``); without values
        a duplicate edge is simply one edge."""
        row = _as_numpy(row).astype(np.int64, copy=False)
        col = _as_numpy(col).astype(np.int64, copy=False)
        n_rows, n_cols = int(shape[0]), int(shape[1])
        weighted = values is not None
        data = (_as_numpy(values).astype(np.float64, copy=False) if weighted
                else np.ones(row.shape[0], dtype=np.float32))
        if weighted and reduce == "first":
            key = row * n_cols + col
            _, first = np.unique(key, return_index=True)
            row, col, data = row[first], col[first], data[first]
        mat = sp.csr_matrix((data, (row, col)), shape=(n_rows, n_cols))
        mat.sum_duplicates()  # also sorts the indices of every row
        return cls.from_scipy(mat, weighted=weighted)

    @classmethod
    def from_scipy(cls, mat, weighted: bool = True) -> "Adjacency":
        mat = sp.csr_matrix(mat)
        if not mat.has_canonical_format:
            mat = mat.copy()
            mat.sum_duplicates()
        indptr = torch.from_numpy(mat.indptr.astype(np.int64))
        indices = torch.from_numpy(mat.indices.astype(np.int64))
        values = torch.from_numpy(mat.data.astype(np.float32)) if weighted else None
        return cls(indptr, indices, values, mat.shape)

    # -- validation ----------------------------------------------------------------------
    def check(self, where: str) -> "Adjacency":
        """Raise GraphError (prefixed ``where``) unless this is a well-formed CSR matrix:
        kernels index with these arrays unchecked, so a bad one would crash the process or
        silently train on garbage. The structure's check is done once and shared."""
        cache = self._structure_cache()
        if not cache.get("checked"):
            check_csr(self.indptr, self.indices, self.shape, where, canonical=True)
            cache["checked"] = True
        if self.values is not None and not self._cache.get("values_checked"):
            check_weights(self.values, self.nnz, where, "values")
            self._cache["values_checked"] = True
        return self

    # -- views ---------------------------------------------------------------------------
    @property
    def nnz(self) -> int:
        return int(self.indices.numel())

    def with_values(self, values: Optional[torch.Tensor]) -> "Adjacency":
        """Same structure, other values. Shares the cached transpose structure."""
        other = Adjacency(self.indptr, self.indices, values, self.shape)
        other._cache["structure"] = self._structure_cache()
        return other

    def _structure_cache(self) -> dict:
        return self._cache.setdefault("structure", {})

    @property
    def relations(self):
        """A typed graph's ``gnnmesh.relations.Relations`` of every entry (None otherwise).
        Part of the structure: ``with_values`` keeps it; a new structure (a transpose, a
        slice, a permutation) starts without it."""
        return self._structure_cache().get("relations")

    def with_relations(self, relations) -> "Adjacency":
        """This adjacency, its entries tagged with ``relations`` (checked against it)."""
        other = Adjacency(self.indptr, self.indices, self.values, self.shape)
        other._cache["structure"] = {**self._structure_cache(), "relations": relations.check(self.nnz, "relations")}
        return other

    @property
    def edge_features(self) -> Optional[torch.Tensor]:
        """Features of every stored entry, float32 ``[nnz, F]`` (None without): row ``e`` is
        entry ``e``'s. Kept as relations are: ``with_values`` keeps them, a new structure
        starts without them; ``gnnmesh.edge_features`` gives any operator's rows of them."""
        return self._structure_cache().get("edge_features")

    def with_edge_features(self, features, where: str = "edge_attr") -> "Adjacency":
        """This adjacency, its entries carrying ``features`` (``[nnz, F]`` floats, checked; None:
        none)."""
        other = Adjacency(self.indptr, self.indices, self.values, self.shape)
        structure = {k: v for k, v in self._structure_cache().items() if not _of_features(k)}
        if features is not None:
            structure["edge_features"] = check_edge_features(features, self.nnz, where)
        other._cache["structure"] = structure
        return other

    def row(self) -> torch.Tensor:
        """Row (destination) id of every stored entry, in storage order."""
        cache = self._structure_cache()
        if "row" not in cache:
            counts = self.indptr[1:] - self.indptr[:-1]
            cache["row"] = torch.repeat_interleave(torch.arange(self.shape[0]), counts)
        return cache["row"]

    def degrees(self) -> torch.Tensor:
        """Number of stored entries per row (in-degree for an adjacency)."""
        return self.indptr[1:] - self.indptr[:-1]

    def transpose_structure(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(indptr_t, indices_t, perm)`` of the transpose, computed once per structure."""
        cache = self._structure_cache()
        if "t" not in cache:
            ids = sp.csr_matrix((np.arange(self.nnz, dtype=np.int64), self.indices.numpy(),
                                 self.indptr.numpy()), shape=self.shape)
            t = ids.T.tocsr()  # stable: within a row of A^T, entries keep ascending column order
            cache["t"] = (torch.from_numpy(t.indptr.astype(np.int64)),
                          torch.from_numpy(t.indices.astype(np.int64)),
                          torch.from_numpy(t.data.astype(np.int64)))
        return cache["t"]

    def t(self) -> "Adjacency":
        indptr_t, indices_t, perm = self.transpose_structure()
        values_t = None if self.values is None else self.values[perm]
        return Adjacency(indptr_t, indices_t, values_t, (self.shape[1], self.shape[0]))

    def to_scipy(self) -> sp.csr_matrix:
        data = (np.ones(self.nnz, dtype=np.float32) if self.values is None
                else self.values.detach().numpy())
        return sp.csr_matrix((data, self.indices.numpy(), self.indptr.numpy()), shape=self.shape)

    def symmetrized(self) -> "Adjacency":
        """Every entry in both directions: ``max(A, A^T)``, so a pair stored one way gains its
        mirror and one stored both ways keeps the larger weight (listing an edge both ways does
        not double it); as scipy's ``maximum``, an entry whose larger value is 0 is dropped."""
        mat = self.to_scipy()
        sym = mat.maximum(mat.T.tocsr()).tocsr()
        sym.sum_duplicates()
        return Adjacency.from_scipy(sym, weighted=self.values is not None)

    def is_symmetric(self) -> bool:
        if self.shape[0] != self.shape[1]:
            return False
        indptr_t, indices_t, perm = self.transpose_structure()
        if not torch.equal(indptr_t, self.indptr) or not torch.equal(indices_t, self.indices):
            return False
        return self.values is None or torch.equal(self.values[perm], self.values)

    def __repr__(self) -> str:
        kind = "pattern" if self.values is None else "weighted"
        return f"Adjacency({self.shape[0]}x{self.shape[1]}, nnz={self.nnz}, {kind})"


def _of_features(key) -> bool:
    """Whether a structure-cache key holds edge features or rows derived from them."""
    return key == "edge_features" or (isinstance(key, tuple) and key[:1] == ("edge_features",))


# The model's output width (classes, or targets per node) at most: its last layer holds hidden x
# width weights and its logits rows x width, allocated before any label is looked at. A label
# of 10**9 would ask terabytes; no node task has near this many classes (renumber sparse ids).
MAX_CLASSES = 1 << 16


# Typed graphs (gnnmesh.typed) are built on this module, so it cannot import them: they hand it
# their PyG converters when imported (gnnmesh.Graph and gnnmesh.datasets import them). "from_pyg":
# a HeteroData -> its union Graph; "to_pyg": a typed union Graph -> its HeteroData.
TYPED_PYG: dict = {}


def _typed_pyg(name: str):
    if name not in TYPED_PYG:
        raise GraphError("a typed graph (PyG HeteroData): import gnnmesh.typed, which converts it")
    return TYPED_PYG[name]


def output_width_problem(width) -> str:
    """What keeps ``width`` from being a model's output width ('' if nothing), for a message."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        return f"must be an integer >= 1, got {width!r}"
    if width > MAX_CLASSES:
        return (f"is {width:,}, more than the {MAX_CLASSES:,} classes or targets per node gnnmesh "
                "trains (class ids are 0..C-1: renumber sparse ones)")
    return ""


@dataclass
class Graph:
    """A graph with optional vertex data. ``adj[i, j] != 0`` means an edge ``j -> i``.

    ``adj.values`` holds edge weights (``None`` for an unweighted graph). Masks are boolean
    vectors over the nodes. Labels ``y`` are int64 class ids [N] (classification), or float
    targets: a 0/1 matrix [N, T] (multilabel) or numbers [N] or [N, T] (regression); see
    ``gnnmesh.tasks``. ``num_classes`` is the model's output width: the classes, or T (1 for
    [N] targets).
    """

    adj: Adjacency
    x: Optional[torch.Tensor] = None
    y: Optional[torch.Tensor] = None
    train_mask: Optional[torch.Tensor] = None
    val_mask: Optional[torch.Tensor] = None
    test_mask: Optional[torch.Tensor] = None
    name: str = "graph"
    directed: bool = False
    num_classes: Optional[int] = None
    meta: dict = field(default_factory=dict)

    VERTEX_FIELDS = ("x", "y", "train_mask", "val_mask", "test_mask")

    def __post_init__(self):
        self.adj.check(self.name)  # every graph passes here, whatever its source
        if self.num_classes is None and self.y is not None and self.y.dim() in (1, 2):
            if self.y.dim() == 2:  # T targets per node
                self.num_classes = int(self.y.shape[1])
            elif self.y.is_floating_point():  # one target per node
                self.num_classes = 1
            elif self.y.numel():
                self.num_classes = int(self.y.max()) + 1

    @property
    def num_nodes(self) -> int:
        return self.adj.shape[0]

    @property
    def num_edges(self) -> int:
        return self.adj.nnz

    @property
    def num_features(self) -> int:
        return 0 if self.x is None else int(self.x.shape[1])

    @property
    def edge_weight(self) -> Optional[torch.Tensor]:
        return self.adj.values

    @property
    def edge_features(self) -> Optional[torch.Tensor]:
        """Features of every edge, ``[num_edges, F]`` in the order of ``edge_index()`` (None
        without); see ``gnnmesh.edge_features``."""
        return self.adj.edge_features

    def edge_index(self) -> torch.Tensor:
        """``[2, E]`` tensor of (source, target) pairs, PyG's convention."""
        return torch.stack([self.adj.indices, self.adj.row()])

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_edge_index(cls, edge_index, num_nodes: Optional[int] = None, *,
                        edge_weight=None, edge_attr=None, directed: Optional[bool] = None,
                        validate: bool = True, source: str = "edge_index", **data) -> "Graph":
        """Build from a ``[2, E]`` array of (source, target) ids, PyG's convention.

        ``edge_attr``: features of the edges, floats ``[E, F]``, kept on the adjacency's entries
        (``Adjacency.edge_features``; an edge listed twice makes one entry with their sum).

        ``directed=None`` infers it: a graph whose edge set equals its reverse is undirected.
        ``directed=False`` adds every missing reverse edge (a pair given both ways with two
        weights keeps the larger), as a graph file's ``directed=false`` does; ``True`` keeps
        the edges as given. ``source`` names where the edges came from, for error messages.
        """
        ei = _as_numpy(edge_index)
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise GraphError(f"{source}: edge_index must have shape [2, E], got {list(ei.shape)}")
        if ei.size and not np.issubdtype(ei.dtype, np.integer):
            if not np.all(np.isfinite(ei)) or np.any(ei != np.round(ei)):
                bad = np.argwhere(~np.isfinite(ei) | (ei != np.round(ei)))[0]
                raise GraphError(f"{source}: edge {bad[1]} has a non-integer node id {ei[tuple(bad)]!r}")
            ei = ei.astype(np.int64)
        if edge_weight is not None:
            edge_weight = check_weights(edge_weight, ei.shape[1], source, "edge_weight")
        if num_nodes is None:
            num_nodes = int(ei.max()) + 1 if ei.size else 0
        if ei.size:
            lo = int(ei.min())
            if lo < 0:
                e = int(np.argwhere(ei < 0)[0][1])
                raise GraphError(f"{source}: edge {e} has a negative node id {lo}")
            hi = int(ei.max())
            if hi >= num_nodes:
                e = int(np.argwhere(ei >= num_nodes)[0][1])
                raise GraphError(f"{source}: edge {e} has node id {hi}, out of range for {num_nodes} nodes")
        adj = Adjacency.from_coo(ei[1], ei[0], (num_nodes, num_nodes), values=edge_weight)
        if directed is False:  # undirected: both directions of every edge, as the file loaders add them
            symmetric = adj.symmetrized()
            if edge_attr is not None and symmetric.nnz != adj.nnz:
                raise GraphError(f"{source}: field 'edge_attr': directed=False adds {symmetric.nnz - adj.nnz:,} "
                                 "reverse edges, which have no features; give every edge both ways with its own")
            adj = symmetric
        if edge_attr is not None:
            adj = adj.with_edge_features(features_of_edges(adj, ei[1], ei[0], edge_attr, source), source)
        return cls.from_adjacency(adj, directed=directed, validate=validate, source=source, **data)

    @classmethod
    def from_scipy(cls, mat, *, weighted: bool = True, directed: Optional[bool] = None,
                   validate: bool = True, source: str = "matrix", **data) -> "Graph":
        """Build from a square scipy sparse matrix ``A`` with ``A[i, j]`` = edge ``j -> i``."""
        if mat.shape[0] != mat.shape[1]:
            raise GraphError(f"{source}: adjacency must be square, got shape {mat.shape}")
        return cls.from_adjacency(Adjacency.from_scipy(mat, weighted=weighted), directed=directed,
                                  validate=validate, source=source, **data)

    @classmethod
    def from_adjacency(cls, adj: Adjacency, *, directed: Optional[bool] = None, validate: bool = True,
                       source: str = "adjacency", **data) -> "Graph":
        """Wrap an Adjacency; ``directed=None`` infers it (a symmetric matrix is undirected)."""
        adj.check(source)
        if directed is None:
            directed = not adj.is_symmetric()
        graph = cls(adj=adj, directed=bool(directed), **data)
        if validate:
            graph.validate(source)
        return graph

    @classmethod
    def from_pyg(cls, data, name: str = "pyg", *, edge_attr: bool = True, **kwargs) -> "Graph":
        """Build from a ``torch_geometric.data.Data`` (edge_index, x, y, masks, edge_weight; an
        ``edge_attr`` of one number per edge is taken as the weight, a wider one ``[E, F]`` as the
        edges' features, ``Adjacency.edge_features``). ``edge_attr=False`` loads the graph without
        it. A ``HeteroData`` gives its typed union graph (``gnnmesh.typed.to_graph``; ``kwargs``:
        its ``add_reverse``), whose entries carry its relations' edge features unless
        ``edge_attr=False``."""
        if hasattr(data, "node_types") and hasattr(data, "edge_types"):
            return _typed_pyg("from_pyg")(data, name=name, edge_attr=edge_attr, **kwargs)
        fields = {k: getattr(data, k, None) for k in cls.VERTEX_FIELDS}
        y = fields["y"]
        if y is not None and y.dim() == 2:  # OGB's form: class ids as [N, 1]; targets as [N, T]
            fields["y"] = y[:, 0] if y.shape[1] == 1 and not y.is_floating_point() else y.float()
        weight = getattr(data, "edge_weight", None)
        attr = getattr(data, "edge_attr", None) if edge_attr else None
        if attr is not None and (attr.dim() == 1 or tuple(attr.shape[1:]) == (1,)):
            weight, attr = (attr if weight is None else weight), None  # one scalar per edge: a weight
        return cls.from_edge_index(data.edge_index, data.num_nodes, edge_weight=weight, edge_attr=attr,
                                   name=name, source=name, **fields, **kwargs)

    def to_pyg(self):
        """A ``torch_geometric.data.Data`` with the same edges and vertex data; a typed union graph
        gives its ``HeteroData``."""
        if "node_types" in self.meta:
            return _typed_pyg("to_pyg")(self)
        from torch_geometric.data import Data  # optional dependency
        features = {} if self.edge_features is None else {"edge_attr": self.edge_features}
        return Data(edge_index=self.edge_index(), edge_weight=self.adj.values, x=self.x, y=self.y,
                    train_mask=self.train_mask, val_mask=self.val_mask, test_mask=self.test_mask,
                    num_nodes=self.num_nodes, **features)

    def replace(self, **changes) -> "Graph":
        """A copy with ``changes``; new targets (``y`` of floats, or a matrix) without a
        ``num_classes`` take their own width."""
        y = changes.get("y")
        if y is not None and "num_classes" not in changes and (y.dim() == 2 or y.is_floating_point()):
            changes["num_classes"] = None
        return replace(self, **changes)

    # -- validation ----------------------------------------------------------------------
    def require_node_classification(self) -> "Graph":
        """Node classification needs labels and a train/val/test split: ConfigError saying
        how to train anyway when one is missing."""
        if self.y is None:
            raise ConfigError(f"dataset '{self.name}' has no labels; node classification needs "
                              "them: append ':random_labels=K' to the --dataset spec to train on K "
                              "random classes, or give labels in an .npz file (field 'labels')")
        if self.train_mask is None or self.val_mask is None or self.test_mask is None:
            raise ConfigError(f"dataset '{self.name}' has no train/val/test split: give "
                              "'train_mask', 'val_mask' and 'test_mask' in an .npz file, or "
                              "':random_labels=K', which draws a split as well")
        return self

    def validate(self, source: Optional[str] = None) -> "Graph":
        """Check every field; raise GraphError naming the source and field on the first problem."""
        where = f"{source or self.name}: "
        n = self.num_nodes
        if n == 0:
            raise GraphError(where + "the graph is empty (0 nodes)")
        check_vertex_data(where, n, self.x, self.y, self.num_classes,
                          {m: getattr(self, m) for m in ("train_mask", "val_mask", "test_mask")})
        return self

    def __repr__(self) -> str:
        kind = "directed" if self.directed else "undirected"
        return (f"Graph({self.name!r}, nodes={self.num_nodes}, edges={self.num_edges}, {kind}, "
                f"features={self.num_features}, classes={self.num_classes})")


def check_finite_rows(where: str, x: torch.Tensor, first: int = 0) -> None:
    """Raise GraphError (prefixed ``where``) unless the dense float features ``x`` are finite;
    ``first``: the node of ``x``'s first row (a block of a larger table), for the message."""
    finite = torch.isfinite(x)
    if not bool(finite.all()):
        r, c = (int(v) for v in torch.nonzero(~finite)[0])
        raise GraphError(where + f"field 'x' has a non-finite value {x[r, c].item()} "
                         f"at node {first + r}, feature {c}")


def check_vertex_data(where: str, n: int, x, y, num_classes: Optional[int], masks: dict,
                      width: Optional[int] = None, finite: bool = True) -> None:
    """Raise GraphError (prefixed ``where``, naming the field) unless the vertex data of ``n``
    rows is well formed: ``x`` [n, F] and finite (F = ``width`` when given), ``y`` integer class
    ids in [0, ``num_classes``) or targets ([n] floats, or [n, T] numbers with T = ``num_classes``)
    finite in every row of a split (NaN elsewhere: no target), each mask boolean [n], no two masks
    sharing a row. The one check of every graph (``Graph.validate``) and of every rank's vertex
    data read back. ``finite`` False: ``x``'s values are left to the caller, which reads
    them a block at a time (``check_finite_rows``)."""
    if x is not None:
        if x.dim() != 2 or x.shape[0] != n:
            raise GraphError(where + f"field 'x' has shape {list(x.shape)}, expected [{n}, F]")
        if x.layout == torch.sparse_csr:  # sparse bag-of-words features
            bad = torch.nonzero(~torch.isfinite(x.values()))
            if bad.numel():
                row = int(torch.searchsorted(x.crow_indices(), bad[0], right=True)[0]) - 1
                raise GraphError(where + f"field 'x' has a non-finite value at node {row}")
        elif x.is_floating_point() and finite:
            check_finite_rows(where, x)
    if y is not None:
        if y.dim() not in (1, 2) or y.shape[0] != n:
            raise GraphError(where + f"field 'y' has shape {list(y.shape)}, expected [{n}] (class ids or "
                             f"targets) or [{n}, T] (T targets per node)")
        if y.dtype == torch.bool or y.is_complex():
            raise GraphError(where + f"field 'y' must hold class ids or numeric targets, got {y.dtype}")
        if y.dim() == 2 or y.is_floating_point():
            _check_targets(where, y, num_classes, masks)
        elif y.numel():
            k = num_classes
            low = int(y.min())
            if low < 0:
                node = int(torch.nonzero(y < 0)[0])
                raise GraphError(where + f"field 'y' has a negative label {low} at node {node}")
            if int(y.max()) >= MAX_CLASSES:
                node = int(torch.nonzero(y >= MAX_CLASSES)[0])
                raise GraphError(where + f"field 'y' has label {int(y[node])} at node {node}: class ids "
                                 f"must be below {MAX_CLASSES:,} (renumber them 0..C-1)")
            if k is not None and int(y.max()) >= k:
                node = int(torch.nonzero(y >= k)[0])
                raise GraphError(where + f"field 'y' has label {int(y[node])} at node {node}, "
                                 f"out of range for {k} classes")
        if num_classes is not None and output_width_problem(num_classes):
            raise GraphError(where + f"num_classes (the output width) {output_width_problem(num_classes)}")
    masks = list(masks.items())
    for name, mask in masks:
        if mask is None:
            continue
        if mask.dtype != torch.bool:
            raise GraphError(where + f"field '{name}' must be boolean, got {mask.dtype}")
        if mask.dim() != 1 or mask.shape[0] != n:
            raise GraphError(where + f"field '{name}' has shape {list(mask.shape)}, expected [{n}]")
    present = [(k, m) for k, m in masks if m is not None]
    for a in range(len(present)):
        for b in range(a + 1, len(present)):
            both = present[a][1] & present[b][1]
            if bool(both.any()):
                node = int(torch.nonzero(both)[0])
                raise GraphError(where + f"fields '{present[a][0]}' and '{present[b][0]}' overlap "
                                 f"({int(both.sum())} nodes, first {node})")
    if width is not None and x is not None and x.dim() == 2 and x.shape[1] != width:
        raise GraphError(where + f"field 'x' has {x.shape[1]} features, expected {width}")


def _check_targets(where: str, y: torch.Tensor, num_classes: Optional[int], masks: dict) -> None:
    """Targets (``y`` [n] floats or [n, T]): T = ``num_classes`` (1 for [n]), finite in every
    row of a split."""
    width = 1 if y.dim() == 1 else int(y.shape[1])
    if width == 0:  # no target to learn: the loss of nothing is no number, which reads as a diverged run
        raise GraphError(where + f"field 'y' has shape {list(y.shape)}: no targets per node (expected [N] class "
                         "ids, or [N, T] targets with T >= 1)")
    if num_classes is not None and num_classes != width:
        raise GraphError(where + f"field 'y' has {width} target{'s' if width != 1 else ''} per node, but "
                         f"num_classes (the output width) is {num_classes}")
    if not y.is_floating_point():
        return
    for name, mask in masks.items():
        if mask is None or mask.dtype != torch.bool or mask.shape != y.shape[:1]:
            continue  # the masks' own checks name these
        bad = ~torch.isfinite(y[mask])
        if bool(bad.any()):
            first = torch.nonzero(bad)[0]
            node = int(torch.nonzero(mask).flatten()[int(first[0])])
            target = f", target {int(first[1])}" if y.dim() == 2 else ""
            value = y[node, int(first[1])] if y.dim() == 2 else y[node]
            raise GraphError(where + f"field 'y' has a non-finite value {value.item()} at node {node}{target}, "
                             f"a row of '{name}' (a target is needed for every row of a split)")


def check_csr(indptr, indices, shape, where: str, names=("indptr", "indices"),
              canonical: bool = False) -> None:
    """Raise GraphError (prefixed ``where``, naming the field) unless ``indptr``/``indices``
    describe a CSR matrix of ``shape``: ``indptr`` starts at 0, never decreases and ends at
    ``len(indices)``; every column id is in range. ``canonical``: also sorted and unique
    within each row."""
    where = where + ": " if where else ""
    ptr, idx = _as_numpy(indptr), _as_numpy(indices)
    rows, cols = int(shape[0]), int(shape[1])
    for name, arr in zip(names, (ptr, idx)):
        if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise GraphError(where + f"field '{name}' must be a 1-D integer array, got "
                             f"{arr.dtype} of shape {list(arr.shape)}")
    if ptr.shape[0] != rows + 1:
        raise GraphError(where + f"field '{names[0]}' has {ptr.shape[0]} entries, expected {rows + 1} "
                         f"(rows + 1)")
    if ptr[0] != 0 or ptr[-1] != idx.shape[0]:
        raise GraphError(where + f"field '{names[0]}' must run from 0 to {idx.shape[0]} (the number of "
                         f"entries), got {ptr[0]} .. {ptr[-1]}")
    drops = np.flatnonzero(ptr[1:] < ptr[:-1])
    if drops.size:
        row = int(drops[0])
        raise GraphError(where + f"field '{names[0]}' decreases at row {row} ({ptr[row]} then "
                         f"{ptr[row + 1]})")
    if idx.size:
        bad = np.flatnonzero((idx < 0) | (idx >= cols))
        if bad.size:
            e = int(bad[0])
            raise GraphError(where + f"field '{names[1]}' has column id {idx[e]} at entry {e}, out of "
                             f"range for {cols} columns")
    if canonical and idx.size > 1:
        row_start = np.zeros(idx.shape[0], dtype=bool)
        row_start[ptr[:-1][ptr[:-1] < idx.shape[0]]] = True
        bad = np.flatnonzero((idx[1:] <= idx[:-1]) & ~row_start[1:])
        if bad.size:
            e = int(bad[0]) + 1
            row = int(np.searchsorted(ptr, e, side="right")) - 1
            raise GraphError(where + f"field '{names[1]}' is not sorted and unique within row {row} "
                             f"(entry {e})")


def check_weights(weights, count: int, where: str, name: str = "edge_weight") -> np.ndarray:
    """``weights`` as a 1-D float array of ``count`` finite values ([E, 1] is taken as [E]);
    GraphError naming ``name`` otherwise."""
    where = where + ": " if where else ""
    w = _as_numpy(weights)
    if w.ndim == 2 and w.shape[1] == 1:
        w = w[:, 0]
    if w.ndim != 1 or w.shape[0] != count:
        raise GraphError(where + f"field '{name}' has shape {list(w.shape)}, expected [{count}] "
                         f"(one weight per edge)")
    if w.size and not (np.issubdtype(w.dtype, np.floating) or np.issubdtype(w.dtype, np.integer)):
        raise GraphError(where + f"field '{name}' must hold numbers, got {w.dtype}")
    if np.issubdtype(w.dtype, np.floating):
        bad = np.flatnonzero(~np.isfinite(w))
        if bad.size:
            raise GraphError(where + f"field '{name}' has a non-finite value {w[bad[0]]} at edge {bad[0]}")
    return w


def check_edge_features(features, count: int, where: str, name: str = "edge_attr") -> torch.Tensor:
    """``features`` as a float32 ``[count, F]`` tensor of finite values (F >= 1); GraphError
    naming ``name`` otherwise. Integer features are refused rather than cast: an id column
    (a category, a timestamp in seconds) fed to a linear map as a number is rarely meant."""
    where = where + ": " if where else ""
    f = features if isinstance(features, torch.Tensor) else torch.as_tensor(np.asarray(features))
    if f.dim() != 2 or f.shape[0] != count or f.shape[1] < 1:
        raise GraphError(where + f"field '{name}' has shape {list(f.shape)}, expected [{count}, F] "
                         f"(F >= 1 features on each of the {count:,} edges)")
    if not f.is_floating_point():
        raise GraphError(where + f"field '{name}' must hold floats, got {f.dtype} (cast it, or one-hot encode "
                         "categories)")
    finite = torch.isfinite(f)
    if not bool(finite.all()):
        e, c = (int(v) for v in torch.nonzero(~finite)[0])
        raise GraphError(where + f"field '{name}' has a non-finite value {f[e, c].item()} at edge {e}, feature {c}")
    return f.detach().to(torch.float32).contiguous()


def entry_of_edges(adj: Adjacency, dst, src) -> np.ndarray:
    """The entry of ``adj`` of every edge ``src -> dst`` (``A[dst, src]``), -1 where none."""
    dst = np.asarray(dst, dtype=np.int64)
    src = np.asarray(src, dtype=np.int64)
    cols = max(adj.shape[1], 1)
    keys = adj.row().numpy() * cols + adj.indices.numpy()  # ascending: CSR with sorted rows
    wanted = dst * cols + src
    pos = np.minimum(np.searchsorted(keys, wanted), max(keys.shape[0] - 1, 0))
    found = keys[pos] == wanted if keys.size else np.zeros(wanted.shape, dtype=bool)
    return np.where(found, pos, -1)


def features_of_edges(adj: Adjacency, dst, src, attr, where: str, name: str = "edge_attr") -> torch.Tensor:
    """The ``[nnz, F]`` table of ``adj`` from the features ``attr`` of its edges ``src -> dst``
    (one row each, in any order): each entry the sum of its edges' rows. An edge that is no
    entry of ``adj`` is a GraphError naming ``name``."""
    attr = check_edge_features(attr, len(dst), where, name)
    entries = entry_of_edges(adj, dst, src)
    if np.any(entries < 0):
        edge = int(np.flatnonzero(entries < 0)[0])
        raise GraphError(f"{where}: field '{name}': edge {edge} ({int(src[edge])} -> {int(dst[edge])}) is no "
                         "entry of the adjacency")
    table = torch.zeros(adj.nnz, attr.shape[1], dtype=torch.float32)
    return table.index_add_(0, torch.from_numpy(entries), attr)


def _as_numpy(a) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        return a.detach().cpu().numpy()
    return np.asarray(a)


def sparse_csr(indptr, indices, values, shape) -> torch.Tensor:
    """A torch sparse CSR tensor, without torch's 'beta support' warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(torch.as_tensor(np.asarray(indptr, dtype=np.int64)),
                                       torch.as_tensor(np.asarray(indices, dtype=np.int64)),
                                       torch.as_tensor(np.asarray(values, dtype=np.float32)),
                                       size=tuple(int(s) for s in shape))

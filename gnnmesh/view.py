"""What a model sees of the graph: the primitives it is written with.

A model never touches the adjacency or the process layout; it calls ``view.spmm``,
``view.sddmm``, ``view.edge_softmax``, ``view.edge_sum``, ``view.dropout`` and
``view.batch_norm`` (and ``view.attention``, GAT's composition of the first three), and reads
a graph's edge features with ``view.edge_features``. ``GraphView`` runs them on one
process; a parallel strategy subclasses it and supplies distributed versions, so the
models stay the same under every strategy.

Operators are named: ``"gcn"`` (D^-1/2 (A+I) D^-1/2), ``"mean"`` (D^-1 A), ``"sum"`` (A) and
``"loop"`` (the pattern of A + I, for attention); a typed graph adds each relation's
(``"mean@cites"``: see ``gnnmesh.relations``).
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
import torch.nn.functional as F

from . import ops
from .ops import fused
from .edge_features import entry_rows, operator_features
from .errors import ConfigError
from .graph import Adjacency
from .ops.precision import in_float32
from .relations import operator_names, parse, relation_operator
from .transforms import add_self_loops, gcn_norm, mean_norm

OPERATORS = {
    "gcn": gcn_norm,
    "mean": mean_norm,
    "sum": lambda adj: adj,
    "loop": lambda adj: add_self_loops(adj).with_values(None),
}


def register_operator(name: str, build) -> None:
    """Add the graph operator ``name``: ``build(adj)`` returns it as an ``Adjacency`` (values
    included) from the whole graph's adjacency ``A`` (row i: node i's in-edges), e.g. another
    normalisation of A. Every strategy that cuts its operators from the graph uses it (parts
    hold only the operators written into them). Register it where the model is defined, so that
    every rank that imports the model has it; registering a name again with the same function
    is allowed, with another one a ValueError."""
    if OPERATORS.get(name, build) is not build:
        raise ValueError(f"graph operator {name!r} is registered already")
    OPERATORS[name] = build


def operator_of(name: str, adj: Adjacency) -> Adjacency:
    """The graph operator ``name`` of the whole graph's adjacency ``adj``: a registered one,
    or a relation's of a typed graph."""
    relation = parse(name)
    if relation is not None:
        return relation_operator(adj, *relation)
    if name not in OPERATORS:
        raise ValueError(f"unknown graph operator {name!r}; choose from {sorted(OPERATORS)}")
    return OPERATORS[name](adj)


def operators_of(adj: Adjacency) -> list:
    """The names of every operator the graph of ``adj`` has: the registered ones, then its
    relations' (a typed graph's)."""
    return list(OPERATORS) + operator_names(adj.relations)


# A mask value is a hash of (draw key, global id, position in the row): the mask of any set of
# ids costs in proportion to the set, however scattered its ids are (a partition's rows, an
# out-of-core chunk's neighbours), and is the same however the ids are split among processes
# or chunks. SplitMix64's finalizer gives 64 well-mixed bits per counter, four values each.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX = (np.uint64(30), np.uint64(0xBF58476D1CE4E5B9), np.uint64(27), np.uint64(0x94D049BB133111EB),
        np.uint64(31))
_WORDS_PER_PIECE = 1 << 16  # bounds the hash's temporaries


def rows_mask(ids, row_shape, p: float, key: int, device, columns: slice = slice(None)) -> torch.Tensor:
    """Keep-mask (probability ``1 - p``, resolution 2^-16) of the global rows ``ids`` (a
    LongTensor or array in any order, or a ``range``) of a matrix with rows of ``row_shape``,
    for the draw ``key``: ``[len(ids), *row_shape]``, or only ``columns`` of the last axis."""
    return _mask(ids, tuple(row_shape), p, key, device, columns)


def entries_mask(entry_ids, edge_shape, p: float, key: int, device) -> torch.Tensor:
    """``rows_mask`` over global entry ids of an operator (per-edge values of ``edge_shape``)."""
    return _mask(entry_ids, tuple(edge_shape), p, key ^ 0x5DEECE66D, device, slice(None))


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, in place."""
    shift1, mult1, shift2, mult2, shift3 = _MIX
    z ^= z >> shift1
    z *= mult1
    z ^= z >> shift2
    z *= mult2
    z ^= z >> shift3
    return z


def _draw(key: int, ids: np.ndarray, width: int) -> np.ndarray:
    """``[len(ids), width]`` uniform uint16 of the rows ``ids`` for draw ``key``: row i's
    values are the little-endian halves of the hashes of counters ``i * words + w``, so
    every platform draws the same mask."""
    words = -(-width // 4)
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64)[:, None] * np.uint64(words) + np.arange(words, dtype=np.uint64)
    z = keyed_hash(key, z).astype("<u8", copy=False)
    return z.view("<u2").reshape(len(ids), 4 * words)[:, :width]


def keyed_hash(key: int, counters: np.ndarray) -> np.ndarray:
    """64 well-mixed bits for every uint64 counter under ``key``, overwriting ``counters``:
    the same on every platform and process, whatever else is hashed beside them."""
    salt = _mix(np.array([key & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]
    with np.errstate(over="ignore"):
        counters *= _GOLDEN
        counters += salt
    return _mix(counters)


def _mask(ids, shape: tuple, p: float, key: int, device, columns: slice) -> torch.Tensor:
    if isinstance(ids, range):
        ids = np.arange(ids.start, ids.stop, dtype=np.int64)
    else:
        ids = np.asarray(ids.cpu() if torch.is_tensor(ids) else ids, dtype=np.int64)
    width, threshold = int(np.prod(shape)), round(p * 65536)
    kept = shape[:-1] + (len(range(shape[-1])[columns]),) if shape else ()
    out = np.empty((len(ids),) + kept, dtype=bool)
    step = max(1, _WORDS_PER_PIECE // -(-width // 4))  # rows per piece: bounded temporaries
    for start in range(0, len(ids), step):
        draws = _draw(key, ids[start:start + step], width).reshape((-1,) + shape)
        out[start:start + step] = (draws[..., columns] if shape else draws) >= threshold
    return torch.from_numpy(out).to(device)


# The primitives that compute in float32 whatever precision autocast hands them
# (``gnnmesh.ops.precision``): a parallel view's own versions of them, with their collectives,
# are wrapped as they are defined (``GraphView.__init_subclass__``).
FLOAT32_PRIMITIVES = ("spmm", "sddmm", "edge_softmax", "edge_sum", "row_sum", "batch_norm")


# What ``GraphView.attention`` is composed of: a view that overrides none runs it fused.
_ATTENTION_PRIMITIVES = ("operator", "sddmm", "edge_softmax", "edge_dropout", "spmm")


class GraphView:
    """The whole graph on one process."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in FLOAT32_PRIMITIVES:
            if name in cls.__dict__:
                setattr(cls, name, in_float32(cls.__dict__[name]))

    # Whether operators are moved to ``device``; a parallel view multiplies only its own
    # rows, so it keeps the global operators on the CPU.
    operators_on_device = True

    def __init__(self, adj: Adjacency, seed: int = 0, device="cpu"):
        self.adj = adj
        self.device = torch.device(device)
        self.seed = seed
        self._operators: dict = {}
        self._epoch = 0
        self._draws = 0

    @property
    def num_nodes(self) -> int:
        """Rows of vertex data this process holds."""
        return self.adj.shape[0]

    def operator(self, name: str) -> Adjacency:
        if name not in self._operators:
            op = operator_of(name, self.adj)
            if op.values is not None and self.operators_on_device:
                op = op.with_values(op.values.to(self.device))
            self._operators[name] = op
        return self._operators[name]

    def layer(self, index: int) -> "GraphView":
        """The view layer ``index`` of a layer stack runs on: this one for every layer of a
        whole graph (a sampled mini-batch gives each layer its own block)."""
        return self

    # -- primitives ------------------------------------------------------------------------
    @in_float32
    def spmm(self, x: torch.Tensor, op: str = "gcn", values=None) -> torch.Tensor:
        return ops.spmm(self.operator(op), x, values)

    def destinations(self, x: torch.Tensor) -> torch.Tensor:
        """The rows of ``x`` (rows this view reads) that its outputs are for: all of them,
        unless the view reads more rows than it writes (an out-of-core chunk)."""
        return x

    @in_float32
    def sddmm(self, dst: torch.Tensor, src: torch.Tensor, op: str = "loop", kind: str = "add"):
        return ops.sddmm(self.operator(op), dst, src, kind)

    @in_float32
    def edge_softmax(self, scores: torch.Tensor, op: str = "loop") -> torch.Tensor:
        return ops.edge_softmax(self.operator(op), scores)

    def attention(self, z: torch.Tensor, s_dst: torch.Tensor, s_src: torch.Tensor, op: str = "loop",
                  negative_slope: float = 0.2, dropout: float = 0.0, training: bool = False) -> torch.Tensor:
        """GAT's aggregation: ``spmm(z, edge_dropout(edge_softmax(leaky_relu(sddmm(s_dst,
        s_src, "add")))))`` over operator ``op``, ``z`` ``[rows, H, F]`` and the scores' halves
        ``[rows, H]``. Composed of this view's own primitives, so every strategy runs it as it
        runs them; where those are this class's, on one local operator, and the Triton kernels
        run (CUDA), it is one fused op (``ops.attention``) drawing the same dropout mask."""
        if self._attends_locally() and z.dim() == 3 and fused.available(z, s_dst, s_src, widened=True):
            keep = self.edge_mask(op, (z.shape[1],), dropout) if training and dropout else None
            return ops.attention(self.operator(op), z, s_dst, s_src, negative_slope, keep, dropout)
        scores = self.sddmm(s_dst, s_src, op, "add")
        alpha = self.edge_softmax(F.leaky_relu(scores, negative_slope), op)
        alpha = self.edge_dropout(alpha, dropout, training, op)
        return self.spmm(z, op, values=alpha)

    def _attends_locally(self) -> bool:
        """Whether this view's attention primitives are GraphView's own (a subclass that
        exchanges rows or entries in them composes attention from them instead)."""
        return all(getattr(type(self), name) is getattr(GraphView, name) for name in _ATTENTION_PRIMITIVES)

    @in_float32
    def edge_sum(self, messages: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Per-edge rows ``messages`` (``[entries, ...]``, this view's entries of ``op``, as
        ``sddmm`` gives them) summed into their destinations' rows (a message that is not a
        product of a value and a source row, GINE's ``ReLU(x_j + e_ji)``)."""
        return ops.edge_sum(self.edge_block(op), messages)

    def edge_block(self, op: str) -> Adjacency:
        """The block of operator ``op`` whose entries this view's per-edge rows are of (rows:
        the view's destinations); a parallel view gives its own."""
        return self.operator(op)

    def edge_features(self, op: str = "loop") -> torch.Tensor:
        """The graph's edge features on this view's entries of operator ``op`` (``[entries, F]``,
        in the order ``sddmm`` gives per-edge rows; ``gnnmesh.edge_features`` says which
        features an added self-loop carries). Cut from the whole graph's table by global entry
        id, so every strategy that keeps them gives the single process's rows; a view that
        holds no graph to cut them from refuses in one line."""
        if self.adj is None:
            raise ConfigError(f"edge features: this strategy's view ({type(self).__name__}) holds no graph to read "
                              "them from (parts and sampled blocks carry none); train under --strategy single, "
                              "partition, tensor or offload from the graph itself")
        return entry_rows(operator_features(op, self.adj, operator_of), self.entries(op)).to(self.device)

    # -- randomness that must agree across processes ------------------------------------------
    def set_epoch(self, epoch: int, draws: int = 0) -> None:
        """Start epoch ``epoch``'s draws; ``draws`` of them already made (a view that replays
        part of the epoch, as out-of-core training does layer by layer)."""
        self._epoch, self._draws = epoch, draws

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def draws(self) -> int:
        """Masks drawn so far this epoch."""
        return self._draws

    def _next_seed(self) -> int:
        self._draws += 1
        key = f"{self.seed}:{self._epoch}:{self._draws}".encode()
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1

    # A parallel view overrides these two: the global ids of the rows and operator entries it holds.
    def rows(self):
        """Global ids of this process's rows of vertex data (a range or an id array)."""
        return range(self.num_nodes)

    def entries(self, op: str):
        """Global ids (CSR positions in the whole graph's operator ``op``) of the entries whose
        per-edge values this process holds."""
        return range(self.operator(op).nnz)

    def dropout(self, x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
        """Dropout on vertex rows; each row's mask depends only on its global id."""
        return self.dropout_block(x, p, training, tuple(x.shape[1:]))

    def dropout_block(self, x: torch.Tensor, p: float, training: bool, row_shape: tuple, rows=None,
                      columns: slice = slice(None)) -> torch.Tensor:
        """Dropout on a block of a vertex matrix whose rows have ``row_shape``: the rows of
        global ids ``rows`` (default: this process's), and only ``columns`` of the last axis
        (for a layout that cuts vertex data by columns too)."""
        if not training or p == 0.0:
            return x
        return _apply_mask(x, self.vertex_mask(row_shape, p, rows, columns), p)

    def edge_dropout(self, values: torch.Tensor, p: float, training: bool, op: str = "loop"):
        """Dropout on per-edge values of operator ``op`` (GAT's attention dropout)."""
        if not training or p == 0.0:
            return values
        return _apply_mask(values, self.edge_mask(op, tuple(values.shape[1:]), p), p)

    def vertex_mask(self, row_shape: tuple, p: float, rows=None, columns: slice = slice(None)) -> torch.Tensor:
        """The next draw's keep-mask of rows ``rows`` (default: this process's), ``columns``."""
        ids = self.rows() if rows is None else rows
        return rows_mask(ids, row_shape, p, self._next_seed(), self.device, columns)

    def edge_mask(self, op: str, edge_shape: tuple, p: float) -> torch.Tensor:
        """The next draw's keep-mask of this process's entries of operator ``op``."""
        return entries_mask(self.entries(op), edge_shape, p, self._next_seed(), self.device)

    # -- statistics over every row, wherever the rows are held ---------------------------------
    @in_float32
    def row_sum(self, sums: torch.Tensor) -> torch.Tensor:
        """``sums`` (computed over this process's rows) summed over every rank's rows, with its
        gradient. A view that holds every row returns them as they are, and says so with
        ``holds_every_row`` in its own class body; a parallel view that holds some rows sums
        over its ranks (it overrides this). Any other view (one that holds its rows a piece
        at a time) refuses: a statistic of a piece is not the whole graph's."""
        if type(self) is GraphView or type(self).__dict__.get("holds_every_row"):
            return sums
        raise ConfigError(f"view.batch_norm (gnnmesh.models.BatchNorm) needs statistics over every row at "
                          f"once, which this strategy's view ({type(self).__name__}) does not hold; train it "
                          f"under --strategy single, partition or tensor")

    @in_float32
    def batch_norm(self, x: torch.Tensor, running_mean=None, running_var=None, weight=None, bias=None,
                   training: bool = True, momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
        """``F.batch_norm`` of vertex rows ``x`` (``[rows, channels, ...]``) whose statistics
        cover every rank's rows, as ``nn.SyncBatchNorm``'s do: the single process's result
        under every strategy that can sum over rows (``row_sum``). In training (or without
        running statistics) it normalises by the rows' mean and biased variance, and updates
        ``running_mean`` and ``running_var`` (unbiased) by ``momentum``; in eval, by those."""
        if not training and running_mean is not None:
            return F.batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps)
        dims = [0] + list(range(2, x.dim()))
        shape = [1, -1] + [1] * (x.dim() - 2)
        per_row = int(np.prod(x.shape[2:])) if x.dim() > 2 else 1
        count = float(self.row_sum(torch.tensor([float(x.shape[0] * per_row)], dtype=torch.float64,
                                                device=x.device))[0])
        mean = self.row_sum(x.sum(dims)) / count
        centred = x - mean.view(shape)
        variance = self.row_sum((centred * centred).sum(dims)) / count  # two passes: no cancellation
        out = centred * torch.rsqrt(variance + eps).view(shape)
        if weight is not None:
            out = out * weight.view(shape)
        if bias is not None:
            out = out + bias.view(shape)
        if training and running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.detach(), alpha=momentum)
                unbiased = variance.detach() * (count / max(count - 1, 1.0))
                running_var.mul_(1 - momentum).add_(unbiased, alpha=momentum)
        return out


def _apply_mask(x: torch.Tensor, keep: torch.Tensor, p: float) -> torch.Tensor:
    # A select, not a product with the bool mask (half the time on CPU: no promotion of the mask).
    return torch.where(keep.to(x.device), x * (1.0 / (1.0 - p)), 0.0)

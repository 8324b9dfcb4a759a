"""Tensor parallelism over feature columns (NeutronTP, Ai et al., PVLDB 2024).

Every rank holds the whole graph structure. Dense NN operations run on row blocks (V/N
vertices per rank; weights replicated, gradients all-reduced) and aggregations on column
slices (D/N columns of every vertex), so every rank does the same amount of aggregation
whatever the graph looks like. ``layout_switch.py`` switches between the two layouts,
``chunked_aggregation.py`` runs the aggregation chunk by chunk with the switches pipelined.

- A coupled model (§3.1): each aggregation is split -> aggregate -> gather, two switches
  per layer forward and two backward. Any model written on the GraphView runs unchanged.
- A decoupled model (``--decoupled``; §4.1, Algorithm 1): its NN layers run first on
  rows, then one split, ``k`` aggregations on column slices and one gather; backward
  mirrors it: four switches per epoch whatever ``k`` is. Attention weights (decoupled GAT,
  §4.1.1) are computed data-parallel for the in-edges of each rank's rows, then shared.
"""

from __future__ import annotations

from typing import Optional

import torch

from ... import ops
from ...comm import agreed
from ...errors import ConfigError, GraphError
from ...layout import ParallelLayout
from ...models import Decoupled
from ...parts.agreement import check_manifest, check_same
from ...relations import Relations
from ...transforms import row_range
from ...view import GraphView
from ..distributed import DistributedStrategy
from ..input_rows import LeafRows
from ..row_sums import SumOverRanks
from ..strategy import RankData
from .chunked_aggregation import ChunkedAggregation, Chunks
from .layout_switch import LayoutSwitch, rank_switch_bytes


class ShareRows(torch.autograd.Function):
    """Every rank's row block -> all rows on every rank (per-vertex attention scores, per-edge
    attention weights). Backward sums each rank's partial gradient back to the owner."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, comm, counts: list):
        ctx.comm, ctx.counts = comm, counts
        with comm.phase("share"):
            return comm.all_gather(rows, counts)

    @staticmethod
    def backward(ctx, grad):
        with ctx.comm.phase("share"):
            return ctx.comm.reduce_scatter(grad.contiguous(), ctx.counts), None, None


class TensorView(GraphView):
    """The whole graph on every rank; vertex data in row blocks between aggregations."""

    def __init__(self, adj, switch: LayoutSwitch, engine: ChunkedAggregation, chunk_size: Optional[int],
                 seed: int, device):
        super().__init__(adj, seed=seed, device=device)
        self.switch, self.engine, self.chunk_size = switch, engine, chunk_size
        self._chunks: dict = {}

    @property
    def num_nodes(self) -> int:
        return self.switch.num_owned

    def chunks(self, op: str) -> Chunks:
        if op not in self._chunks:
            self._chunks[op] = Chunks(self.operator(op), self.switch, self.chunk_size, self.device)
        return self._chunks[op]

    def block(self, op: str):
        """In-edges of this rank's rows: everything attention needs for them is here."""
        return row_range(self.operator(op), self.switch.start, self.switch.stop)

    def _entry_range(self, op: str) -> tuple:
        indptr = self.operator(op).indptr
        return int(indptr[self.switch.start]), int(indptr[self.switch.stop])

    def edge_values(self, op: str, values, like: torch.Tensor) -> torch.Tensor:
        """Values of every edge of ``op``: the operator's own, or per-edge ``values`` given for
        this rank's block and shared with all ranks."""
        adj = self.operator(op)
        if values is None:
            return adj.values if adj.values is not None else like.new_ones(adj.nnz)
        indptr = adj.indptr[self.switch.row_bounds]
        counts = (indptr[1:] - indptr[:-1]).tolist()
        return ShareRows.apply(values, self.switch.comm, counts)

    # -- primitives ------------------------------------------------------------------------
    def spmm(self, x, op="gcn", values=None):
        full = self.edge_values(op, values, x)
        return self.engine(self.chunks(op), x, full, x.shape[-1], split_input=True, gather_output=True)

    def sddmm(self, dst, src, op="loop", kind="add"):
        src_all = ShareRows.apply(src, self.switch.comm, self.switch.row_counts)
        return ops.sddmm(self.block(op), dst, src_all, kind)

    def edge_softmax(self, scores, op="loop"):
        return ops.edge_softmax(self.block(op), scores)

    def edge_block(self, op):
        return self.block(op)

    def rows(self):
        return range(self.switch.start, self.switch.stop)

    def entries(self, op):
        return range(*self._entry_range(op))

    def row_sum(self, sums):
        return SumOverRanks.apply(sums, self.switch.comm)  # vertex data in row blocks, one per rank


def aggregation_switches(width: int, mid: int = 1, passes: int = 1, backward: bool = True,
                         input_grad: bool = True) -> list:
    """The layout switches, ``(kind, width, mid)``, of one aggregation of a ``[V, mid, width]``
    tensor (``ChunkedAggregation`` with its input split and its output gathered): a split and
    a gather in each of ``passes`` forward passes; with ``backward`` (autograd reaches it)
    the output's gradient split and, with ``input_grad``, the input's gradient gathered."""
    switches = [("split", width, mid), ("gather", width, mid)] * passes
    if backward:
        switches += [("split", width, mid)] + ([("gather", width, mid)] if input_grad else [])
    return switches


def layout_bytes(row_counts: list, switches, element_size: int = 4) -> list:
    """The bytes each rank sends in ``switches`` (``aggregation_switches``) when the ranks own
    ``row_counts`` rows: what its ``layout`` counters count."""
    out = [0] * len(row_counts)
    for kind, width, mid in switches:
        split, gather = rank_switch_bytes(row_counts, width, mid, element_size)
        out = [a + b for a, b in zip(out, split if kind == "split" else gather)]
    return out


class TensorParallel(DistributedStrategy):
    reported_phases = ("layout", "share")

    name = "tensor"

    def __init__(self, layout: ParallelLayout, device, chunk_size: Optional[int] = None,
                 pipeline: bool = True):
        super().__init__(layout, device, "cols")
        self.chunk_size, self.pipeline = chunk_size, pipeline
        self.switch: Optional[LayoutSwitch] = None
        self.engine: Optional[ChunkedAggregation] = None

    def describe(self) -> str:
        chunks = f"chunks of {self.chunk_size} rows" if self.chunk_size else "one chunk"
        return f"{self.name} ({self.world_size} ranks, {chunks}{', pipelined' if self.pipeline else ''})"

    def rank_data(self, graph, x, seed, device):
        if self.world_size > graph.num_nodes:
            raise ConfigError(f"{self.world_size} ranks for a graph of {graph.num_nodes} nodes: "
                              "every rank needs at least one node")
        self.switch = LayoutSwitch(self.comm, graph.num_nodes)
        self.engine = ChunkedAggregation(self.switch, self.pipeline)
        view = TensorView(graph.adj, self.switch, self.engine, self.chunk_size, seed, device)
        rows = slice(self.switch.start, self.switch.stop)
        pick = (lambda t: t[rows].to(device))
        return RankData(view, pick(x), pick(graph.y), pick(graph.train_mask), pick(graph.val_mask),
                     pick(graph.test_mask))

    def input_rows(self, data):
        return LeafRows(data, data.row_ids().numpy())  # the rank's rows, whose gradient the layout switch brings back

    def rank_data_from_parts(self, parts, seed, device):
        check_manifest(parts, self.rank)
        n = parts.num_nodes
        self.switch = LayoutSwitch(self.comm, n)
        rows = self.switch.stop - self.switch.start

        def read():  # every array checked, on every rank alike
            part = parts.rank(self.rank)
            values = "adj.values" if part.has("adj.values") else None
            adj = part.adjacency("adj", (n, n), values)
            if parts.relations:  # a typed graph: every entry's relations, checked against the topology
                relations = Relations(parts.relations, part.tensor("adj.relation_ptr").to(torch.int64),
                                      part.tensor("adj.relation_ids").to(torch.int64))
                try:
                    adj = adj.with_relations(relations)
                except GraphError as exc:
                    raise GraphError(part.where("adj.relation_ptr") + str(exc)) from None
            return part, adj, part.vertex_data(rows, parts.num_features)

        part, adj, data = agreed(read)
        check_same(part, "adj.indices", _topology(adj), "its copy of the topology (adj.*)")  # every rank holds it
        self.engine = ChunkedAggregation(self.switch, self.pipeline)
        view = TensorView(adj, self.switch, self.engine, self.chunk_size, seed, device)
        return RankData(view, *(t.to(device) for t in data))

    def forward(self, model, view, x):
        if not isinstance(model, Decoupled):
            return model(view, x)
        h0 = model.transform(view, x)  # NN layers on this rank's rows
        values = view.edge_values(model.op, model.edge_weights(view, h0), h0)
        chunks, width, aggregate, last = view.chunks(model.op), h0.shape[-1], self.engine, model.k - 1
        h0_cols = None  # H_0's column slice, which the first step's split brings

        def step(h, i):
            nonlocal h0_cols
            if i == last:  # gathered back to rows; the last combine is row-wise, on h0's own rows
                return aggregate(chunks, h, values, width, split_input=i == 0, gather_output=True), h0
            if i == 0:
                h0_cols, agg = aggregate(chunks, h0, values, width, split_input=True, return_input=True)
                return agg, h0_cols
            return aggregate(chunks, h, values, width), h0_cols

        return model.propagate(h0, step)

    def predicted_layout_bytes(self, widths, backward_widths=None, evaluate: bool = True) -> int:
        """Layout-switch bytes of one epoch, all ranks together. ``widths``: the width (or
        (width, heads)) of every aggregation the strategy switches around (naive: one per
        aggregation; decoupled: the propagated width, once). Each is split and gathered in
        the forward pass, and again, reversed, in backward for those in ``backward_widths``
        (default: all; an aggregation of the input features has no backward); evaluation
        adds one more forward."""
        def shape(w):
            return w if isinstance(w, tuple) else (w, 1)
        backward = widths if backward_widths is None else backward_widths
        switches = [s for w in widths for s in aggregation_switches(*shape(w), passes=1 + evaluate, backward=False)]
        switches += [s for w in backward for s in aggregation_switches(*shape(w), passes=0)]
        return sum(layout_bytes(self.switch.row_counts, switches))

    def report(self, epoch_time: float, peaks: dict) -> dict:
        out = super().report(epoch_time, peaks)
        out["layout_rounds"] = self.engine.rounds if self.engine else 0
        if self.engine:
            self.engine.rounds = 0
        return out


def _topology(adj) -> tuple:
    """The arrays of ``adj`` that every rank of tensor parts holds alike."""
    arrays = (adj.indptr.numpy(), adj.indices.numpy())
    return arrays if adj.values is None else arrays + (adj.values.numpy(),)

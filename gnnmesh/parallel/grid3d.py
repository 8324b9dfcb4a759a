"""3D tensor parallelism for full-graph GCN training (Plexus, SC 2025, §3.1, §3.2, §5.1, §5.2).

Ranks form an X x Y x Z grid (``grid_layout``). Every layer multiplies one 2D block of the
(doubly permuted) normalized adjacency with one block of its input and one block of W,
and sums partial results along grid axes (``grid_collectives``):

    H = sum_cols A_blk F_blk      (row block by row block, each all-reduce overlapping the next SpMM)
    Q = sum_feats H W_blk (+ b)

Q is the next layer's input as it stands, so layers cycle through the three planes of
the grid with no redistribution. Aggregation always comes first (Algorithm 1), whatever
the widths; the single-process GCN may multiply by W first, the same map up to rounding.
The last layer's output goes to the rows each rank scores (disjoint over ranks): the only
all-to-all of an epoch.

Input features (a departure from §3.1): Plexus cuts F^{L0} along layer 0's rows axis too
and all-gathers it in every forward, with a reduce-scatter of its gradient in backward,
because it treats the input as trainable. Ours is data: it has no gradient and never
changes, so each rank keeps its whole layer-0 block (its X node block, its Y feature
block, the same on every Z replica) from setup on, and only the epoch's dropout mask is
applied to it locally. That trades a Z-fold copy of the input for one all-gather of the
widest matrix per forward pass.

Weights: the trainer keeps full replicated parameters and runs Adam on every rank; a
rank multiplies with its block of W (so Algorithm 1's all-gather of W is not needed) and
``sync_gradients`` reduce-scatters each block's gradient along the layer's rows axis
(Algorithm 2 line 3), then one world all-gather gives every rank the whole gradient.
The bias is added by the feats-replica 0 only, so its gradient is counted once.

Other models (only GCN is implemented): a layer whose graph part is ``A_k H`` for a few
operators fits the same pipeline. SAGE is ``[A_mean H | I H] [W_neigh; W_self]``, where
the identity, cut and permuted like A, brings H into the output's row layout and both
halves share the all-reduces. GIN's first linear map is ``(A + (1 + eps) I) H W_1``; its
second one multiplies Q's column block, so it needs one more partial sum per layer.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..comm import agreed
from ..errors import ConfigError
from ..graph import Adjacency
from ..layout import ParallelLayout
from ..models.gcn import GCN
from ..view import GraphView, _apply_mask, rows_mask
from .base import Shard
from .distributed import DistributedStrategy
from .grid_collectives import Aggregate, PartialSum, Replicated, ToLossRows
from .grid_layout import AXES, GridLayout, bounds, cut, output_plan, roles, sizes

__all__ = ["Grid3D", "GridView"]


class GridView(GraphView):
    """One rank's blocks of the adjacency (built per layer on first use, kept) and its part
    of every dropout mask. ``Grid3D.forward`` runs the layers; the generic primitives are
    not available under this layout."""

    operators_on_device = False

    def __init__(self, adj, layout: GridLayout, coords: dict, blocks: int, num_rows: int, seed, device,
                 part=None):
        """``adj``: the whole graph, from which blocks are cut; or ``part``: this rank's folder
        of grid3d parts, from which they are read (``gnnmesh.parts.grid``)."""
        super().__init__(adj, seed=seed, device=device)
        self.layout, self.coords, self.blocks = layout, coords, blocks
        self.part = part
        self._num_rows = num_rows
        self._scipy: dict = {}
        self._blocks: dict = {}

    @property
    def num_nodes(self) -> int:
        return self._num_rows

    def adjacency(self, layer: int, op: str = "gcn"):
        """(this rank's block of layer ``layer``'s operator, the same cut into row blocks).
        Six distinct blocks at most: three planes x two permutations."""
        key = (op, layer % 6)
        if key not in self._blocks:
            mat = self._read_block(layer, op) if self.part is not None else self._cut_block(layer, op)
            cuts = bounds(mat.shape[0], self.blocks)
            self._blocks[key] = (self._on_device(mat), [self._on_device(mat[a:b]) for a, b in zip(cuts[:-1], cuts[1:])])
        return self._blocks[key]

    def _cut_block(self, layer: int, op: str):
        if op not in self._scipy:
            self._scipy[op] = self.operator(op).to_scipy()
        r = roles(layer)
        rows = self.layout.nodes(layer + 1, r.rows, self.coords)
        return self._scipy[op][rows][:, self.layout.nodes(layer, r.cols, self.coords)]

    def _read_block(self, layer: int, op: str):
        k = layer % 6
        if op != "gcn" or not self.part.has(f"adj-{k}.indptr"):
            raise ConfigError(f"{self.part.parts.directory}: these parts hold the gcn operator for "
                              f"{self.part.parts.manifest['layers']} layers; layer {layer + 1} needs "
                              "more (write them with a larger --layers)")
        r = roles(layer)
        shape = (len(self.layout.nodes(layer + 1, r.rows, self.coords)),
                 len(self.layout.nodes(layer, r.cols, self.coords)))
        return sp.csr_matrix((self.part.array(f"adj-{k}.values"), self.part.array(f"adj-{k}.indices"),
                              self.part.array(f"adj-{k}.indptr")), shape=shape)

    def _on_device(self, mat) -> Adjacency:
        adj = Adjacency.from_scipy(mat)
        return adj.with_values(adj.values.to(self.device))

    def block_dropout(self, h, p: float, training: bool, rows, columns: slice, width: int):
        """Dropout on a block (original node ids ``rows``, feature ``columns``) of a
        ``width``-wide vertex matrix: the mask of those rows, cut to those columns."""
        if not training or p == 0.0:
            return h
        return _apply_mask(h, rows_mask(rows, (width,), p, self._next_seed(), self.device, columns), p)

    def spmm(self, x, op="gcn", values=None):
        raise NotImplementedError("the grid3d layout runs its layers in Grid3D.forward")

    sddmm = edge_softmax = spmm


def _gcn_layers(model) -> list:
    if not isinstance(model, GCN):
        raise ConfigError(f"config field 'model': the grid3d strategy runs gcn only, got {type(model).__name__}")
    return list(model.layers)


class Grid3D(DistributedStrategy):
    name = "grid3d"
    reported_phases = ("aggregate_allreduce", "gemm_allreduce", "dh_allreduce", "df_allreduce",
                       "logits", "grad")

    def __init__(self, layout: ParallelLayout, device, permute: bool = True, blocks: int = 1, seed: int = 0):
        super().__init__(layout, device)  # the mesh is (z, x, y): Y groups share a node first, then X
        self.dims = layout.grid.dims()
        self.permute, self.blocks, self.seed = permute, blocks, seed
        self.axis = {a: self.mesh.comm(a) for a in AXES}
        self.everyone = self.comm.all_gather_object(self.coords)  # world rank -> grid coordinates
        self.layout = None
        self._plans: dict = {}
        self._grad_plans: dict = {}

    def describe(self) -> str:
        shape = "x".join(str(self.dims[a]) for a in AXES)
        return (f"grid3d ({shape}{', permuted' if self.permute else ''}"
                f"{f', {self.blocks} blocks' if self.blocks > 1 else ''})")

    def comms(self) -> list:
        return [self.comm, *self.axis.values()]

    # -- data ----------------------------------------------------------------------------------
    def shard(self, graph, x, seed, device):
        self.layout = GridLayout(self.dims, graph.num_nodes, self.permute, self.seed, adj=graph.adj)
        mine = torch.from_numpy(self.layout.loss_rows(self.rank, self.world_size))
        view = GridView(graph.adj, self.layout, self.coords, self.blocks, len(mine), seed, device)
        r = roles(0)
        rows = torch.from_numpy(self.layout.nodes(0, r.cols, self.coords))
        features = x[rows][:, self.layout.width(x.shape[1], r.feats, self.coords)]
        pick = (lambda t: t[mine].to(device))
        return Shard(view, features.to(device), pick(graph.y), pick(graph.train_mask), pick(graph.val_mask),
                     pick(graph.test_mask))

    def shard_parts(self, parts, seed, device):
        part = agreed(lambda: self._my_part(parts))
        self.layout = GridLayout.from_orders(self.dims, part.array("orders"))
        mine = self.layout.loss_rows(self.rank, self.world_size)
        view = GridView(None, self.layout, self.coords, self.blocks, len(mine), seed, device, part=part)
        pick = (lambda name: part.tensor(name).to(device))
        return Shard(view, pick("x"), pick("y"), pick("train_mask"), pick("val_mask"), pick("test_mask"))

    def _my_part(self, parts):
        written = dict(zip(AXES, parts.manifest["grid"]))
        if written != self.dims:
            shape = (lambda d: "x".join(str(d[a]) for a in AXES))
            raise ConfigError(f"{parts.directory}: these parts are for grid {shape(written)}, "
                              f"this run asks for {shape(self.dims)}")
        return parts.rank(self.rank)

    def _plan(self, layers: int, classes: int):
        if (layers, classes) not in self._plans:
            plan = output_plan(self.layout, layers, classes, self.everyone, self.rank)
            self._plans[layers, classes] = plan.to(self.device)
        return self._plans[layers, classes]

    # -- the layers ----------------------------------------------------------------------------
    def forward(self, model, view, x):
        layers = _gcn_layers(model)
        lay, me = self.layout, self.coords
        h = x  # layer 0's input block as it stands: data, so nothing to gather
        for l, layer in enumerate(layers):
            r = roles(l)
            if l:
                h = Replicated.apply(h, self.axis[r.rows])
            fin = lay.width(layer.lin.in_features, r.feats, me)
            fout = lay.width(layer.lin.out_features, r.cols, me)
            h = view.block_dropout(h, model.dropout, model.training, lay.nodes(l, r.cols, me), fin,
                                   layer.lin.in_features)
            h = Aggregate.apply(h, *view.adjacency(l), self.axis[r.cols])
            q = h @ layer.lin.weight[fout, fin].t()
            if me[r.feats] == 0:
                q = q + layer.bias[fout]
            h = PartialSum.apply(q, self.axis[r.feats])
            if l < len(layers) - 1:
                h = model.activation(h)
        classes = layers[-1].lin.out_features
        return ToLossRows.apply(h, self._plan(len(layers), classes), self.comm,
                                self.axis[roles(len(layers) - 1).feats], (view.num_nodes, classes))

    # -- weights -------------------------------------------------------------------------------
    def _grad_plan(self, layers: list) -> list:
        """Per world rank, per layer: the positions (in the layer's flattened [W, b]) of the
        gradient piece that rank completes. Together the pieces cover every position once."""
        key = tuple((layer.lin.in_features, layer.lin.out_features) for layer in layers)
        if key not in self._grad_plans:
            self._grad_plans[key] = [[_piece(l, d_in, d_out, self.dims, coords).to(self.device)
                                      for l, (d_in, d_out) in enumerate(key)] for coords in self.everyone]
        return self._grad_plans[key]

    def sync_gradients(self, model):
        if self.world_size == 1:
            return
        layers = _gcn_layers(model)
        plan = self._grad_plan(layers)
        flats = [torch.cat([_grad(layer.lin.weight).flatten(), _grad(layer.bias)]) for layer in layers]
        pieces = []
        for l, flat in enumerate(flats):
            block, axis = _block(l, layers[l].lin.in_features, layers[l].lin.out_features, self.dims, self.coords)
            comm = self.axis[axis]
            with comm.phase("grad"):
                pieces.append(comm.reduce_scatter(flat[block.to(flat.device)], sizes(len(block), comm.world_size)))
        lengths = [sum(len(idx) for idx in per_layer) for per_layer in plan]
        with self.comm.phase("grad"):
            everything = self.comm.all_gather(torch.cat(pieces), lengths)
        full = [torch.zeros_like(flat) for flat in flats]
        start = 0
        for per_layer in plan:
            for l, idx in enumerate(per_layer):
                full[l][idx] = everything[start:start + len(idx)]
                start += len(idx)
        for layer, flat in zip(layers, full):
            n = layer.lin.weight.numel()
            layer.lin.weight.grad = flat[:n].view_as(layer.lin.weight)
            layer.bias.grad = flat[n:]


def _grad(p: torch.Tensor) -> torch.Tensor:
    return p.grad if p.grad is not None else torch.zeros_like(p)  # bias unused on feats-replicas > 0


def _block(layer: int, d_in: int, d_out: int, dims: dict, coords: dict):
    """Positions in layer ``layer``'s flattened [W (d_out x d_in), b] whose gradient a rank
    at ``coords`` computes (partially: summed over the rows axis), and the rows axis."""
    r = roles(layer)
    fout, fin = cut(d_out, dims[r.cols], coords[r.cols]), cut(d_in, dims[r.feats], coords[r.feats])
    idx = (np.arange(fout.start, fout.stop)[:, None] * d_in + np.arange(fin.start, fin.stop)[None, :]).ravel()
    if coords[r.feats] == 0:
        idx = np.concatenate([idx, d_out * d_in + np.arange(fout.start, fout.stop)])
    return torch.from_numpy(idx.astype(np.int64)), r.rows


def _piece(layer: int, d_in: int, d_out: int, dims: dict, coords: dict) -> torch.Tensor:
    block, axis = _block(layer, d_in, d_out, dims, coords)
    return block[cut(len(block), dims[axis], coords[axis])]

"""3D tensor parallelism for full-graph GNN training (Plexus, SC 2025, §3.1, §3.2, §5.1, §5.2).

Ranks form an X x Y x Z grid (its axes and their roles: ``gnnmesh.layout.grid``; which
blocks a rank holds: ``gnnmesh.parallel.grid3d.blocks``). Every layer multiplies one 2D block of the
(doubly permuted) graph operator with one block of its input and one block of W, and sums
partial results along grid axes (``collectives``):

    H = sum_cols A_blk F_blk      (row block by row block, each all-reduce overlapping the next SpMM)
    Q = sum_feats H W_blk (+ b)

Q is the next layer's input as it stands, so layers cycle through the three planes of
the grid with no redistribution. Aggregation always comes first (Algorithm 1), whatever
the widths; the single-process model may multiply by W first, the same map up to rounding.
The last layer's output goes to the rows each rank scores (disjoint over ranks): the only
all-to-all of an epoch.

Models: a layer describes its maths once (``models.base.Maths``): a sum of terms
``c_k (A_k H) W_k^T`` plus a bias, then for GIN a ReLU and a second linear map. Here the
terms become one block matrix of operator blocks, with a row of blocks per linear map and
a column per coefficient, times the input stacked once per coefficient, so one Aggregate
and one PartialSum serve them all. GCN is ``A_gcn``. SAGE is ``[A_mean; I] H`` then
``[W_neigh | W_self]``: the identity, cut and permuted like A, brings H into the output's
row layout. GIN's first map is ``[A_sum | I] [H; (1 + eps) H] W_1``; its second one
multiplies the output's column block (cut along cols), so each rank's product is summed
over cols and reduce-scattered there by column blocks, which is again the layout the next
layer takes. A model without such a description (gat, decoupled) is refused.

Input features (a departure from §3.1): Plexus cuts F^{L0} along layer 0's rows axis too
and all-gathers it in every forward, with a reduce-scatter of its gradient in backward,
because it treats the input as trainable. Ours is data: it has no gradient and never
changes, so each rank keeps its whole layer-0 block (its X node block, its Y feature
block, the same on every Z replica) from setup on, and only the epoch's dropout mask is
applied to it locally. That trades a Z-fold copy of the input for one all-gather of the
widest matrix per forward pass.

Weights: the trainer keeps full replicated parameters and runs Adam on every rank; a
rank multiplies with its block of W (so Algorithm 1's all-gather of W is not needed).
``sync_gradients`` sums the partial gradients of each group of parameter blocks with a
reduce-scatter (a layer's blocks along its rows axis, Algorithm 2 line 3; GIN's eps, of
which every rank computes a part, over the whole grid, all layers' at once), then one
world all-gather gives every rank the whole gradient. Ranks that compute the same partial
sums (GIN's second map, alike on the feats replicas) each bring a disjoint share of them,
so every entry is completed once. The bias of the summed map is added by the
feats-replica 0 only, so its gradient is counted once.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce

import numpy as np
import scipy.sparse as sp
import torch

from ...comm import agreed
from ...errors import ConfigError
from ...graph import Adjacency
from ...layout import ParallelLayout
from ...layout.grid import AXES, roles
from ...layout.ranges import block_bounds, cut, sizes
from ...models.base import SELF, GraphLayer, LayerStack
from ...parts.agreement import check_manifest, check_same
from ...view import GraphView
from ..distributed import DistributedStrategy
from ..strategy import RankData
from .blocks import GridBlocks
from .collectives import Replicated, ToLossRows, aggregate, logit_route, partial_sum, scatter_columns
from .parts import feature_block

__all__ = ["Grid3D", "GridView"]


class GridView(GraphView):
    """One rank's blocks of the graph operators (built per layer on first use, kept) and its
    part of every dropout mask. ``Grid3D.forward`` runs the layers; the generic primitives are
    not available under this layout."""

    operators_on_device = False

    def __init__(self, adj, grid_blocks: GridBlocks, coords: dict, blocks: int, num_rows: int, seed, device,
                 part=None):
        """``adj``: the whole graph, from which blocks are cut; or ``part``: this rank's folder
        of grid3d parts, from which they are read (``gnnmesh.parallel.grid3d.parts``)."""
        super().__init__(adj, seed=seed, device=device)
        self.grid_blocks, self.coords, self.blocks = grid_blocks, coords, blocks
        self.part = part
        self._num_rows = num_rows
        self._scipy: dict = {}
        self._blocks: dict = {}

    @property
    def num_nodes(self) -> int:
        return self._num_rows

    def adjacency(self, layer: int, op: str = "gcn"):
        """(this rank's block of layer ``layer``'s operator ``op``, the same cut into row blocks)."""
        return self.operators(layer, (((op,),),))

    def operators(self, layer: int, cells: tuple):
        """(this rank's block of a block matrix of layer ``layer``'s operators, the same cut
        into row blocks): block (i, j) is the sum of the operators named in ``cells[i][j]``
        (``SELF``: the identity, cut and permuted like them). Built on first use and kept:
        six distinct blocks per matrix at most, three planes x two permutations."""
        key = (cells, layer % 6)
        if key not in self._blocks:
            grid = [[self._sum(layer, ops) for ops in row] for row in cells]
            mat = grid[0][0] if len(grid) == len(grid[0]) == 1 else sp.bmat(grid, format="csr")
            cuts = block_bounds(mat.shape[0], self.blocks)
            self._blocks[key] = (self._on_device(mat), [self._on_device(mat[a:b]) for a, b in zip(cuts[:-1], cuts[1:])])
        return self._blocks[key]

    def _sum(self, layer: int, ops: tuple):
        r = roles(layer)
        rows, cols = self.grid_blocks.nodes(layer + 1, r.rows, self.coords), self.grid_blocks.nodes(layer, r.cols, self.coords)
        total = None
        for op in ops:
            block = self._identity(rows, cols) if op == SELF else self._block(layer, op, rows, cols)
            total = block if total is None else total + block
        return total if total is not None else sp.csr_matrix((len(rows), len(cols)), dtype=np.float32)

    def _identity(self, rows, cols):
        """``I[rows][:, cols]``: ones where a row's node is a column's node."""
        where = np.full(self.grid_blocks.num_nodes, -1)
        where[cols] = np.arange(len(cols))
        hit = where[rows]
        keep = np.flatnonzero(hit >= 0)
        return sp.csr_matrix((np.ones(len(keep), dtype=np.float32), (keep, hit[keep])), shape=(len(rows), len(cols)))

    def _block(self, layer: int, op: str, rows, cols):
        if self.part is None:
            if op not in self._scipy:
                self._scipy[op] = self.operator(op).to_scipy()
            return self._scipy[op][rows][:, cols]
        k = layer % 6
        if op != "gcn":
            raise ConfigError(f"{self.part.parts.directory}: these parts hold the gcn operator only; this "
                              f"model aggregates with '{op}' (train it from the dataset)")
        if not self.part.has(f"adj-{k}.indptr"):
            raise ConfigError(f"{self.part.parts.directory}: these parts hold the gcn operator for "
                              f"{self.part.parts.manifest['layers']} layers; layer {layer + 1} needs "
                              "more (write them with a larger --layers)")
        # checked as every graph is, on every rank alike (blocks are built once, in the same order)
        block = agreed(lambda: self.part.adjacency(f"adj-{k}", (len(rows), len(cols)), f"adj-{k}.values"))
        return sp.csr_matrix((block.values.numpy(), block.indices.numpy(), block.indptr.numpy()), shape=block.shape)

    def _on_device(self, mat) -> Adjacency:
        adj = Adjacency.from_scipy(mat)
        return adj.with_values(adj.values.to(self.device))

    def spmm(self, x, op="gcn", values=None):
        raise NotImplementedError("the grid3d layout runs its layers in Grid3D.forward")

    sddmm = edge_softmax = spmm


def _maths(model) -> list:
    """Every layer's ``Maths``; a model whose layers have none (gat, decoupled) is refused."""
    if not isinstance(model, LayerStack) or not all(isinstance(layer, GraphLayer) for layer in model.layers):
        raise ConfigError(f"config field 'model': the grid3d strategy runs models whose layers are sums of "
                          f"aggregation terms (gcn, sage, gin, rgcn), got {type(model).__name__}")
    return [layer.maths() for layer in model.layers]


class Grid3D(DistributedStrategy):
    name = "grid3d"
    reported_phases = ("aggregate_allreduce", "gemm_allreduce", "dh_allreduce", "df_allreduce",
                       "gemm2_reducescatter", "dz_allgather", "logits", "grad")

    def __init__(self, layout: ParallelLayout, device, permute: bool = True, blocks: int = 1, seed: int = 0):
        super().__init__(layout, device)  # the mesh is (z, x, y): Y groups share a node first, then X
        self.dims = layout.grid.dims()
        self.permute, self.blocks, self.seed = permute, blocks, seed
        self.axis = {a: self.mesh.comm(a) for a in AXES}
        self.everyone = self.comm.all_gather_object(self.coords)  # world rank -> grid coordinates
        self.grid_blocks = None  # set by rank_data: which block of every matrix this rank holds
        self._routes: dict = {}
        self._grad_reductions: dict = {}
        self._cut_cache: dict = {}

    def describe(self) -> str:
        shape = "x".join(str(self.dims[a]) for a in AXES)
        return (f"grid3d ({shape}{', permuted' if self.permute else ''}"
                f"{f', {self.blocks} blocks' if self.blocks > 1 else ''})")

    def comms(self) -> list:
        return [self.comm, *self.axis.values()]

    # -- data ----------------------------------------------------------------------------------
    def rank_data(self, graph, x, seed, device):
        self.grid_blocks = GridBlocks(self.dims, graph.num_nodes, self.permute, self.seed, adj=graph.adj)
        mine = torch.from_numpy(self.grid_blocks.loss_rows(self.rank, self.world_size))
        view = GridView(graph.adj, self.grid_blocks, self.coords, self.blocks, len(mine), seed, device)
        r = roles(0)
        rows = torch.from_numpy(self.grid_blocks.nodes(0, r.cols, self.coords))
        features = x[rows][:, self.grid_blocks.width(x.shape[1], r.feats, self.coords)]
        pick = (lambda t: t[mine].to(device))
        return RankData(view, features.to(device), pick(graph.y), pick(graph.train_mask), pick(graph.val_mask),
                     pick(graph.test_mask), ids=mine)

    def rank_data_from_parts(self, parts, seed, device):
        check_manifest(parts, self.rank)
        part, data = agreed(lambda: self._read_part(parts))
        check_same(part, "orders", self.grid_blocks.orders, "its node orders")  # peers' blocks follow them
        mine = self.grid_blocks.loss_rows(self.rank, self.world_size)
        view = GridView(None, self.grid_blocks, self.coords, self.blocks, len(mine), seed, device, part=part)
        return RankData(view, *(t.to(device) for t in data), ids=torch.from_numpy(mine))

    def _read_part(self, parts) -> tuple:
        """(this rank's folder, its vertex data), checked: its feature block's rows and the
        rows whose loss it computes."""
        part = self._my_part(parts)
        self.grid_blocks = GridBlocks.from_orders(self.dims, part.orders("orders", parts.num_nodes))
        labels = len(self.grid_blocks.loss_rows(self.rank, self.world_size))
        rows, width = feature_block(parts.manifest, self.rank)  # x: this rank's feature block
        return part, part.vertex_data(labels, width, x_rows=rows)

    def _my_part(self, parts):
        written = dict(zip(AXES, parts.manifest["grid"]))
        if written != self.dims:
            shape = (lambda d: "x".join(str(d[a]) for a in AXES))
            raise ConfigError(f"{parts.directory}: these parts are for grid {shape(written)}, "
                              f"this run asks for {shape(self.dims)}")
        return parts.rank(self.rank)

    def _route(self, layers: int, classes: int):
        if (layers, classes) not in self._routes:
            route = logit_route(self.grid_blocks, layers, classes, self.everyone, self.rank)
            self._routes[layers, classes] = route.to(self.device)
        return self._routes[layers, classes]

    # -- the layers ----------------------------------------------------------------------------
    def forward(self, model, view, x):
        layers = _maths(model)
        h = x  # layer 0's input block as it stands: data, so nothing to gather
        for l, maths in enumerate(layers):
            cuts = self._cuts(l, maths)
            if l:
                h = Replicated.apply(h, self.axis[roles(l).rows])
            h = view.dropout_block(h, model.dropout, model.training, (maths.in_features,), cuts.nodes, cuts.fin)
            h = self._layer(l, maths, cuts, view, h)
            if l < len(layers) - 1:
                h = model.activation(h)
        classes = layers[-1].out_features
        return ToLossRows.apply(h, self._route(len(layers), classes), self.comm,
                                self.axis[roles(len(layers) - 1).feats], (view.num_nodes, classes))

    def _cuts(self, l: int, maths) -> "_Cuts":
        key = (l, maths.in_features, maths.hidden, maths.out_features)
        if key not in self._cut_cache:
            r, lay, me = roles(l), self.grid_blocks, self.coords
            self._cut_cache[key] = _Cuts(lay.nodes(l, r.cols, me), lay.width(maths.in_features, r.feats, me),
                                         lay.width(maths.hidden, r.cols, me),
                                         lay.width(maths.out_features, r.cols, me),
                                         sizes(maths.out_features, self.dims[r.cols]))
        return self._cut_cache[key]

    def _layer(self, l: int, maths, cuts, view, h):
        """Layer ``l`` on this rank's blocks: ``h`` holds the input's rows of node axis ``l`` cut
        along cols and its columns cut along feats; the output, rows of axis ``l + 1`` cut
        along rows and columns cut along cols, is replicated along feats."""
        r, fin, fout = roles(l), cuts.fin, cuts.fout
        groups = maths.by_weight()
        # All terms in one Aggregate: a block matrix with a row of blocks per linear map (each
        # gives its own aggregate) and a column per coefficient, times the input stacked once
        # per coefficient, so that terms sharing a linear map are summed before the all-reduce.
        scales = list({id(t.eps): t for t in maths.terms}.values())
        cells = tuple(tuple(tuple(t.op for t in terms if t.eps is s.eps) for s in scales) for _, terms in groups)
        stacked = torch.cat([s.scaled(h) for s in scales]) if len(scales) > 1 else scales[0].scaled(h)
        aggregated = aggregate(stacked, *view.operators(l, cells), self.axis[r.cols])
        rows = aggregated.shape[0] // len(groups)
        q = reduce(operator.add, (aggregated[g * rows:(g + 1) * rows] @ weight[fout, fin].t()
                                  for g, (weight, _) in enumerate(groups)))
        # added once over the feats replicas; in the product's dtype, as nn.Linear adds it under autocast
        # (a float32 bias would make this rank's sum float32 and the others' bfloat16)
        if maths.bias is not None and self.coords[r.feats] == 0:
            q = q + maths.bias[fout].to(q.dtype)
        z = partial_sum(q, self.axis[r.feats])
        if maths.out is None:
            return z
        # The second linear map takes z's column block (cut along cols), so every rank's
        # product is a partial sum over cols; each keeps its columns of the total.
        lin = maths.out
        q = scatter_columns(maths.act(z) @ lin.weight[:, fout].t(), self.axis[r.cols], cuts.out_sizes)
        return q if lin.bias is None else q + lin.bias[cuts.out].to(q.dtype)

    # -- weights -------------------------------------------------------------------------------
    def prepare(self, model) -> None:
        """Lay out the weights' gradient blocks now: a weight that is neither a parameter nor
        one matrix of one is refused in one line before training, not at its first step."""
        self._reductions(model)

    def _reductions(self, model):
        """(this rank's reductions: positions in the flat gradient as index tensors, and the
        axes to sum over; every world rank's number of completed entries; the positions of
        all ranks' completed entries in all-gather order)."""
        key = (type(model), tuple((name, tuple(p.shape)) for name, p in model.named_parameters()))
        if key not in self._grad_reductions:
            params = list(model.parameters())
            offset = {id(p): int(o) for p, o in zip(params, np.cumsum([0] + [p.numel() for p in params]))}
            layers = _maths(model)
            everyone = [reductions(grad_blocks(layers, self.dims, coords), offset, self.dims, coords)
                        for coords in self.everyone]
            pieces = [[share(positions, sums, self.dims, coords) for positions, sums in mine]
                      for mine, coords in zip(everyone, self.everyone)]
            index = (lambda a: torch.from_numpy(a).to(self.device))
            self._grad_reductions[key] = ([(index(positions), sums) for positions, sums in everyone[self.rank]],
                                     [sum(len(p) for p in mine) for mine in pieces],
                                     index(np.concatenate([p for mine in pieces for p in mine])))
        return self._grad_reductions[key]

    def sync_gradients(self, model):
        """Every reduction's partial gradients summed with a reduce-scatter per axis (Algorithm 2
        line 3), then one world all-gather of the completed entries gives every rank the
        whole gradient, for all layers at once."""
        if self.world_size == 1:
            return
        params = list(model.parameters())
        mine, lengths, order = self._reductions(model)
        flat = torch.cat([_grad(p).flatten() for p in params])
        pieces = []
        for positions, sums in mine:
            values = flat[positions]
            for axis in sums:
                comm = self.comm if axis is WHOLE else self.axis[axis]
                with comm.phase("grad"):
                    values = comm.reduce_scatter(values, sizes(len(values), comm.world_size))
            pieces.append(values)
        with self.comm.phase("grad"):
            everything = self.comm.all_gather(torch.cat(pieces), lengths)
        full = torch.zeros_like(flat)
        full[order] = everything
        start = 0
        for p in params:
            p.grad = full[start:start + p.numel()].view_as(p)
            start += p.numel()


@dataclass(frozen=True, eq=False)
class _Cuts:
    """What a rank takes of a layer's matrices: its input's rows (original ids of node axis
    ``l`` cut along cols) and columns (cut along feats), the summed map's output columns and
    the layer's (both cut along cols), and every cols rank's width of the latter."""

    nodes: np.ndarray
    fin: slice
    fout: slice
    out: slice
    out_sizes: list


def _grad(p: torch.Tensor) -> torch.Tensor:
    return p.grad if p.grad is not None else torch.zeros_like(p)  # e.g. a bias unused on feats-replicas > 0


WHOLE = None  # as a sum axis: the whole grid at once (one collective over the world)


@dataclass(frozen=True, eq=False)
class GradBlock:
    """Entries ``index`` (flat positions) of ``param`` whose gradient a rank computes in part:
    the other parts are on the ranks along the ``sums`` axes. Along the ``replicas`` axes,
    ranks compute the same values."""

    param: torch.Tensor
    index: np.ndarray
    sums: tuple
    replicas: tuple = ()


def grad_blocks(layers: list, dims: dict, coords: dict) -> list:
    """The gradient blocks of the rank at ``coords``, as ``Grid3D._layer`` uses the parameters
    (``layers``: every layer's ``Maths``), in groups summed together: one per layer, over its
    rows axis, then one for the coefficients of all layers, over the whole grid."""
    groups, scalars = [], []
    for l, maths in enumerate(layers):
        r = roles(l)
        fin = cut(maths.in_features, dims[r.feats], coords[r.feats])
        fout = cut(maths.hidden, dims[r.cols], coords[r.cols])
        # The summed linear map: a W block per linear map and the bias (on feats-replica 0),
        # each applied to the rank's rows only.
        group = [_weight_block(w, fout, fin, (r.rows,)) for w, _ in maths.by_weight()]
        if maths.bias is not None and coords[r.feats] == 0:
            group.append(GradBlock(maths.bias, _index(maths.bias, fout), (r.rows,)))
        if maths.out is not None:
            # The second map: its weight's columns that meet the rank's block of its input
            # (every output row), its bias where the rank keeps the output; alike on all
            # feats replicas, whose inputs and output gradients are the same.
            lin, mine = maths.out, cut(maths.out.out_features, dims[r.cols], coords[r.cols])
            group.append(GradBlock(lin.weight, _index(lin.weight, slice(None), fout), (r.rows,), (r.feats,)))
            if lin.bias is not None:
                group.append(GradBlock(lin.bias, _index(lin.bias, mine), (r.rows,), (r.feats,)))
        groups.append(group)
        # A coefficient scales the whole aggregate, of which every rank holds a part.
        coefficients = {id(t.eps): t.eps for t in maths.terms if t.eps is not None}
        scalars += [GradBlock(eps, _index(eps), (WHOLE,)) for eps in coefficients.values()]
    return groups + ([scalars] if scalars else [])


def reductions(groups: list, offset: dict, dims: dict, coords: dict) -> list:
    """(positions in the flat parameters, the axes to sum over) per group of blocks; ``offset``:
    every parameter's (by id) start. Replicas hold the same partial sums, so each brings only
    its share of them: they reduce less, and cover each entry once."""
    out = []
    for group in groups:
        assert len({b.sums for b in group}) == 1, "a group is summed over the same axes"
        out.append((np.concatenate([share(offset[id(b.param)] + b.index, b.replicas, dims, coords) for b in group]),
                    group[0].sums))
    return out


def share(positions: np.ndarray, axes: tuple, dims: dict, coords: dict) -> np.ndarray:
    """The rank's share of ``positions`` cut along each of ``axes`` in turn (``WHOLE``: among
    all ranks, in the world order of Grid3D's mesh): what a reduce-scatter leaves it."""
    for axis in axes:
        if axis is WHOLE:
            parts = dims["x"] * dims["y"] * dims["z"]
            index = (coords["z"] * dims["x"] + coords["x"]) * dims["y"] + coords["y"]
        else:
            parts, index = dims[axis], coords[axis]
        positions = positions[cut(len(positions), parts, index)]
    return positions


def _weight_block(weight: torch.Tensor, rows: slice, cols: slice, sums: tuple) -> GradBlock:
    """The block ``weight[rows, cols]`` of a term's weight: a parameter, or one matrix of a
    parameter that stacks several (R-GCN's ``[relations, out, in]``), whose positions are the
    matrix's within the whole parameter."""
    if isinstance(weight, torch.nn.Parameter):
        return GradBlock(weight, _index(weight, rows, cols), sums)
    base = weight._base
    if not (isinstance(base, torch.nn.Parameter) and weight.is_contiguous() and base.is_contiguous()):
        raise ConfigError("the grid3d strategy lays out weights that are parameters or matrices of one "
                          "(R-GCN with --bases mixes its weights; train it under partition or tensor)")
    start = weight.storage_offset() - base.storage_offset()
    return GradBlock(base, start + _index(weight, rows, cols), sums)


def _index(param, rows: slice = slice(None), cols: slice = None) -> np.ndarray:
    """Flat positions of ``param[rows, cols]`` (``param[rows]`` for a vector)."""
    idx = np.arange(param.numel(), dtype=np.int64).reshape(param.shape)
    return (idx[rows] if cols is None else idx[rows, cols]).ravel()

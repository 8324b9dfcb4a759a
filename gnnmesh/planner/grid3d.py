"""Performance model of 3D-parallel GCN training (Plexus §4): predicted epoch time per grid.

An epoch is a list of operations on one rank: local SpMMs, GEMMs and elementwise work on
block shapes, and collectives over the process group of one grid axis (or of the world). Each is timed
by the machine model (``gnnmesh.planner.machine``: rates measured by ``gnnmesh.planner.probe``
or given, links from where the ranks sit), and the times add up:
nothing is assumed to overlap. Under a uniform spread of nonzeros (what the double
permutation is for) every rank does the same work, so one rank's time is the epoch's.

The operations are those of the grid3d strategy, which follows Plexus Algorithms 1 and 2
with three differences: the input features are data, so each rank keeps its layer-0 block
and nothing is gathered or reduced for them (``trainable_input`` restores Plexus's learned,
row-sharded input); every rank keeps the whole of W, so W is never gathered and the
gradient blocks, reduce-scattered along a layer's rows axis, end in one all-gather over
the world; and the last layer's output reaches the ranks that score it by an all-to-all.

Units: seconds, bytes, and bandwidths in SI bytes per second (1 GB/s = 1e9 B/s).

Rank placement: ranks are numbered row-major over the grid axes in ``RANK_ORDER``, slowest
first. The grid3d strategy's mesh is (z, x, y): rank = (z * X + x) * Y + y, so Y groups are
consecutive ranks and share a node first, then X groups, as Plexus places them. Consecutive
ranks fill a node, ``ranks_per_node`` to a node, as torchrun and Slurm place them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from ..layout.grid import AXES, RANK_ORDER, WORLD, Grid, factorizations, roles
from ..models.base import GraphLayer, LayerStack
from ..view import operator_of
from .estimate import Estimate
from .job import Dropped
from .machine import (GEMM, GPU_NETWORK, GPU_RATES, ComputeRates, Elementwise, Network, SpMM, all_to_all_link,
                      collective_time, group_links)
from .trace import build

ELEMENT_BYTES = 4           # float32
GCN_OPERATOR = "gcn"        # the one graph operator a Workload's layers aggregate with


# ---------------------------------------------------------------------------- the work

@dataclass(frozen=True)
class Workload:
    """A GCN on a graph: ``nnz`` counts the adjacency's stored entries, self-loops included;
    ``widths`` are the feature widths between layers (input, hidden..., classes)."""
    nodes: int
    nnz: int
    widths: tuple
    trainable_input: bool = False   # Plexus learns input embeddings; gnnmesh's features are fixed
    evaluate: bool = False          # one more forward pass per epoch (the trainer's evaluation)
    dropout: bool = False           # dropout on every layer's input in the training step
    element_bytes: int = ELEMENT_BYTES
    inference: bool = False         # priced: one inference pass (that evaluation alone), not an epoch

    @classmethod
    def gcn(cls, nodes: int, edges: int, features: int, hidden: int, classes: int, layers: int,
            self_loops: bool = True, **kwargs) -> "Workload":
        """``edges``: stored adjacency entries (an undirected edge counts twice)."""
        widths = (features,) + (hidden,) * (layers - 1) + (classes,)
        return cls(nodes, edges + (nodes if self_loops else 0), widths, **kwargs)

    @property
    def layers(self) -> int:
        return len(self.widths) - 1

    @property
    def parameters(self) -> int:
        return sum(i * o + o for i, o in zip(self.widths[:-1], self.widths[1:]))


@dataclass(frozen=True)
class Dropout:
    elements: int   # a layer input's block: a keep-mask drawn and applied


@dataclass(frozen=True)
class Collective:
    kind: str       # "all_reduce", "all_gather", "reduce_scatter" or "all_to_all"
    axis: str       # grid axis whose process group runs it, or WORLD
    nbytes: int     # reduced buffer, gathered output, scattered input, or bytes one rank sends


def _split(n: int, parts: int) -> int:
    return -(-n // parts)   # the largest block decides the time


def layer_ops(work: Workload, grid: Grid, layer: int, backward: bool, training: bool = True) -> list:
    """One layer's operations on one rank, in order (``training``: a forward pass of the
    training step, which drops out the layer's input when ``work.dropout``)."""
    r = roles(layer)
    d_in, d_out, b = work.widths[layer], work.widths[layer + 1], work.element_bytes
    out_rows, in_rows = _split(work.nodes, grid[r.rows]), _split(work.nodes, grid[r.cols])
    f_in, f_out = _split(d_in, grid[r.feats]), _split(d_out, grid[r.cols])
    nnz = _split(work.nnz, grid[r.rows] * grid[r.cols])
    learned_input = layer == 0 and work.trainable_input   # cut along rows too, like Plexus
    if not backward:
        gather = [Collective("all_gather", r.rows, in_rows * f_in * b)] if learned_input else []
        dropped = [Dropout(in_rows * f_in)] if training and work.dropout else []
        return gather + dropped + [SpMM(out_rows, in_rows, nnz, f_in),
                         Collective("all_reduce", r.cols, out_rows * f_in * b),    # H, partial over cols
                         GEMM(out_rows, f_in, f_out),
                         Elementwise(2 * out_rows * f_out),                        # bias, activation
                         Collective("all_reduce", r.feats, out_rows * f_out * b)]  # Q, partial over feats
    ops = [Elementwise(out_rows * f_out),                                          # activation
           GEMM(f_in, out_rows, f_out),                                            # dW = H^T dQ
           Collective("reduce_scatter", r.rows, (f_in * f_out + f_out) * b)]       # W and b blocks
    if layer > 0 or work.trainable_input:                                          # dF is wanted
        ops += [GEMM(out_rows, f_out, f_in),                                       # dH = dQ W^T
                Elementwise(out_rows * f_in + in_rows * f_in * (1 + work.dropout)),  # copies, mask
                Collective("all_reduce", r.cols, out_rows * f_in * b),
                SpMM(in_rows, out_rows, nnz, f_in),                                # dF = A^T dH
                Collective("reduce_scatter" if learned_input else "all_reduce", r.rows,
                           in_rows * f_in * b)]
    return ops


def _logits_ops(work: Workload, grid: Grid, backward: bool) -> list:
    """The last layer's output block to the ranks that score its rows, and back."""
    r = roles(work.layers - 1)
    out_rows = _split(work.nodes, grid[r.rows])
    f_out = _split(work.widths[-1], grid[r.cols])
    share = _split(out_rows, grid[r.feats]) * f_out * work.element_bytes
    ops = [Collective("all_to_all", WORLD, share)]
    if backward:   # the feats replicas' shares of the gradient are joined again
        ops.append(Collective("all_gather", r.feats, out_rows * f_out * work.element_bytes))
    return ops


def epoch_ops(work: Workload, grid: Grid) -> list:
    """Forward, loss, backward, gradient exchange, then the evaluation pass if any; for
    ``work.inference``, the evaluation pass alone."""
    if work.inference:
        return _evaluation_ops(work, grid)
    forward = [op for layer in range(work.layers) for op in layer_ops(work, grid, layer, False)]
    forward += _logits_ops(work, grid, backward=False)
    loss = [Collective("all_reduce", WORLD, work.element_bytes)]
    backward = _logits_ops(work, grid, backward=True)
    backward += [op for layer in reversed(range(work.layers)) for op in layer_ops(work, grid, layer, True)]
    backward.append(Collective("all_gather", WORLD, work.parameters * work.element_bytes))
    if not work.evaluate:
        return forward + loss + backward
    return forward + loss + backward + _evaluation_ops(work, grid)


def _evaluation_ops(work: Workload, grid: Grid) -> list:
    """The evaluation pass: a forward without dropout, the logits to the ranks that score
    them, and the hits (train, validation, test) summed over the world."""
    evaluation = [op for layer in range(work.layers) for op in layer_ops(work, grid, layer, False, False)]
    return evaluation + _logits_ops(work, grid, backward=False) + [Collective("all_reduce", WORLD,
                                                                              3 * work.element_bytes)]


# ---------------------------------------------------------------------------- prediction

@dataclass(frozen=True)
class Prediction:
    grid: Grid
    spmm: float
    dense: float        # GEMMs and elementwise work
    comm: dict          # seconds per process group: the grid axes and the world

    @property
    def compute(self) -> float:
        return self.spmm + self.dense

    @property
    def communication(self) -> float:
        return sum(self.comm.values())

    @property
    def total(self) -> float:
        return self.compute + self.communication


def predict(work: Workload, grid: Grid, rates: ComputeRates, network: Network,
            ranks_per_node: Optional[int] = None, order: str = RANK_ORDER) -> Prediction:
    """Predicted epoch time of ``work`` on ``grid``; ``ranks_per_node`` defaults to one node."""
    per_node = ranks_per_node or grid.size
    links = group_links(grid, per_node, network, order)
    spmm, dense = 0.0, rates.overhead(work.inference)
    comm = dict.fromkeys(AXES + (WORLD,), 0.0)
    for op in epoch_ops(work, grid):
        if isinstance(op, SpMM):
            spmm += rates.spmm(op)
        elif isinstance(op, GEMM):
            dense += rates.gemm(op)
        elif isinstance(op, Elementwise):
            dense += rates.elementwise(op)
        elif isinstance(op, Dropout):
            dense += rates.dropout(op.elements)
        else:
            link = (all_to_all_link(grid, per_node, network, links) if op.kind == "all_to_all"
                    else links[op.axis])
            comm[op.axis] += collective_time(op.kind, op.nbytes, grid[op.axis], *link)
    return Prediction(grid, spmm, dense, comm)


def payload_bytes(work: Workload, grid: Grid) -> int:
    """The bytes one rank's collectives carry in an epoch, counted as the strategy's counters
    count them (a run's ``bytes_total`` divided by its ranks, to padding): an all-reduce its
    buffer, an all-gather this rank's piece, a reduce-scatter its whole input, an all-to-all
    what leaves the rank; a group of one rank moves nothing."""
    total = 0.0
    for op in epoch_ops(work, grid):
        ranks = grid[op.axis] if isinstance(op, Collective) else 1
        if ranks == 1:
            continue
        share = {"all_gather": op.nbytes / ranks, "all_to_all": op.nbytes * (ranks - 1) / ranks}
        total += share.get(op.kind, op.nbytes)
    return int(round(total))


def peak_bytes(work: Workload, grid: Grid) -> int:
    """A rough peak of one rank's tensor bytes, by the rule ``Estimate.peak_bytes`` states for
    the other strategies, from the block shapes under an even spread of nonzeros; unlike
    their bytes, not yet checked against a run. It counts each layer's adjacency block (CSR,
    int64 indices, float32 values; six kept at most, three planes x two permutations) twice
    (the block and its row blocks); the layer-0 feature block and the labels and masks of the
    rows the rank scores; the whole of W and b with gradients and Adam's two moments; and
    twice what a training step saves for backward: per layer its input block, the SpMM's
    output and the GEMM's. Not counted: the whole graph a rank training from the dataset
    (not from parts) keeps to cut its blocks from, the permutations and the logit route.
    For one inference pass (``work.inference``, no autograd): W and b alone, and those
    blocks once, an upper bound of what a pass that frees each after its last use holds."""
    b, structure, saved = work.element_bytes, 0, 0
    first = roles(0)
    vertex = (_split(work.nodes, grid[first.cols]) * _split(work.widths[0], grid[first.feats]) * b
              + _split(work.nodes, grid.size) * (8 + 3))
    for layer in range(work.layers):
        r = roles(layer)
        out_rows, in_rows = _split(work.nodes, grid[r.rows]), _split(work.nodes, grid[r.cols])
        f_in, f_out = _split(work.widths[layer], grid[r.feats]), _split(work.widths[layer + 1], grid[r.cols])
        if layer < 6:
            nnz = _split(work.nnz, grid[r.rows] * grid[r.cols])
            structure += 2 * (8 * (out_rows + 1) + nnz * (8 + b))
        saved += in_rows * f_in + out_rows * f_in + out_rows * f_out
    held, kept = (1, 1) if work.inference else (4, 2)   # copies of the parameters; of the saved blocks
    return structure + vertex + held * b * work.parameters + kept * b * saved


def rank_grids(work: Workload, world: int, rates: ComputeRates, network: Network,
               ranks_per_node: Optional[int] = None, order: str = RANK_ORDER,
               grids: Optional[Iterable] = None) -> list:
    """Predictions for every factorization of ``world`` (or for ``grids``), fastest first."""
    grids = factorizations(world) if grids is None else list(grids)
    out = [predict(work, g, rates, network, ranks_per_node, order) for g in grids]
    return sorted(out, key=lambda p: (p.total, p.grid))


def best_grid(world_size: int, nodes: int, nnz: int, widths: Sequence[int], *,
                 ranks_per_node: Optional[int] = None, rates: Optional[ComputeRates] = None,
                 network: Optional[Network] = None) -> dict:
    """The model's best grid, ``{"x": X, "y": Y, "z": Z}``, for a GCN with ``widths`` on a
    graph of ``nodes`` nodes and ``nnz`` stored adjacency entries (self-loops included).
    Without rates the nominal GPU figures are used: the ranking depends on their ratios."""
    work = Workload(nodes, nnz, tuple(widths))
    best = rank_grids(work, world_size, rates or GPU_RATES, network or GPU_NETWORK, ranks_per_node)[0]
    return {"x": best.grid.x, "y": best.grid.y, "z": best.grid.z}


def candidates(job) -> list:
    """The planner model of 3D-parallel training (the ``PlanJob`` protocol): every X x Y x Z
    grid of several ranks, or grid3d dropped with the reason (``grid3d_refusal``). Its peak is
    the rough ``peak_bytes``; its setup (permutations, cutting blocks) is not modelled (0)."""
    if job.ranks == 1:
        return []
    net = build(job.widths, job.model, job.decoupled, **job.options)
    refusal = grid3d_refusal(net, job.model, job.decoupled)
    if refusal:
        return [Dropped("grid3d", refusal)]
    gcn_nnz = (job.graph.operator(GCN_OPERATOR) if job.sized else operator_of(GCN_OPERATOR, getattr(job.graph, "adj", job.graph))).nnz
    work = Workload(job.nodes, gcn_nnz, tuple(int(w) for w in job.widths), evaluate=job.evaluate,
                    dropout=net.dropout > 0, inference=job.inference)
    return [grid3d_estimate(work, predict(work, grid, job.rates, job.network, job.ranks_per_node, job.order))
            for grid in factorizations(job.ranks)]


def grid3d_refusal(net, model: str, decoupled: bool) -> Optional[str]:
    """Why grid3d is not a candidate for ``net`` (the built ``model``), or None. The strategy
    runs models whose layers are sums of aggregation terms (what ``Grid3D`` checks); its
    performance model prices layers of one term on the GCN operator (``Workload``)."""
    name = f"decoupled {model}" if decoupled else model
    if decoupled or not (isinstance(net, LayerStack) and all(isinstance(layer, GraphLayer) for layer in net.layers)):
        return f"the grid3d strategy does not run {name}"
    if any([term.op for term in layer.maths().terms] != [GCN_OPERATOR] for layer in net.layers):
        return f"the grid3d strategy runs {name}, but its performance model prices GCN layers only"
    return None


def grid3d_estimate(work: Workload, prediction: Prediction) -> Estimate:
    """A grid's Prediction as an Estimate: the collectives' seconds per process group
    (``comm x``, ... ``comm world``), one phase ``collectives`` of ``payload_bytes`` per rank
    (every rank alike under an even spread), the rough ``peak_bytes``; no setup."""
    grid, ranks = prediction.grid, prediction.grid.size
    comm = {f"comm {group}": seconds for group, seconds in prediction.comm.items()}
    return Estimate.build({"aggregate": prediction.spmm, "dense": prediction.dense}, comm,
                          {"collectives": [payload_bytes(work, grid)] * ranks}, [peak_bytes(work, grid)] * ranks,
                          strategy="grid3d", grid=f"{grid.x},{grid.y},{grid.z}")

"""Performance model of 3D-parallel GCN training (Plexus §4): predicted epoch time per grid.

An epoch is a list of operations on one rank: local SpMMs, GEMMs and elementwise work on
block shapes, and collectives over the process group of one grid axis (or of the world). Each is timed
from a few rates, measured by ``gnnmesh.planner.probe`` or given, and the times add up:
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

from dataclasses import dataclass, replace
from typing import Iterable, Optional, Sequence

import numpy as np

from ..layout.grid import AXES, RANK_ORDER, WORLD, Grid, factorizations, roles

ELEMENT_BYTES = 4           # float32


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
class SpMM:
    rows: int       # output rows
    common: int     # rows of the dense operand (columns of the sparse block)
    nnz: int
    width: int      # dense columns


@dataclass(frozen=True)
class GEMM:
    m: int
    k: int
    n: int


@dataclass(frozen=True)
class Elementwise:
    elements: int   # bias, activation and gradient copies over dense blocks


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
    """Forward, loss, backward, gradient exchange, then the evaluation pass if any."""
    forward = [op for layer in range(work.layers) for op in layer_ops(work, grid, layer, False)]
    forward += _logits_ops(work, grid, backward=False)
    loss = [Collective("all_reduce", WORLD, work.element_bytes)]
    backward = _logits_ops(work, grid, backward=True)
    backward += [op for layer in reversed(range(work.layers)) for op in layer_ops(work, grid, layer, True)]
    backward.append(Collective("all_gather", WORLD, work.parameters * work.element_bytes))
    if not work.evaluate:
        return forward + loss + backward
    evaluation = [op for layer in range(work.layers) for op in layer_ops(work, grid, layer, False, False)]
    evaluation += _logits_ops(work, grid, backward=False) + [Collective("all_reduce", WORLD, 3 * work.element_bytes)]
    return forward + loss + backward + evaluation


# ---------------------------------------------------------------------------- rates

@dataclass(frozen=True)
class ComputeRates:
    """Per-rank compute costs in seconds.

    SpMM time = call + nnz * (per_nnz + width * per_nnz_col)
                + width * (rows * per_out + common * per_in)

    ``per_nnz`` is the tall-skinny penalty of Plexus §4.1 in linear form: index and value
    traffic paid once per nonzero whatever the width, so the same flops spread over a
    narrower dense operand and more nonzeros per rank take longer. ``per_out`` and
    ``per_in`` price the output block written and the dense operand read."""
    spmm_call: float
    spmm_per_nnz: float
    spmm_per_nnz_col: float
    spmm_per_out: float
    spmm_per_in: float
    gemm_call: float
    gemm_flops: float        # flop/s
    elementwise_call: float = 0.0
    elementwise_per: float = 0.0   # per element of a dense block
    dropout_per: float = 0.0       # per element of a dropout's mask, drawn and applied
    epoch_overhead: float = 0.0    # per epoch: the training loop's own work (optimizer, loss, bookkeeping)
    crowding: float = 1.0          # ranks per core's worth of threads, already in the costs (``rates.sharing_cores``)
    source: str = "given"

    def spmm(self, op: SpMM) -> float:
        return (self.spmm_call + op.nnz * (self.spmm_per_nnz + op.width * self.spmm_per_nnz_col)
                + op.width * (op.rows * self.spmm_per_out + op.common * self.spmm_per_in))

    def gemm(self, op: GEMM) -> float:
        return self.gemm_call + 2.0 * op.m * op.k * op.n / self.gemm_flops

    def elementwise(self, op: Elementwise) -> float:
        return self.elementwise_call + op.elements * self.elementwise_per

    def dropout(self, elements: int) -> float:
        return self.elementwise_call + elements * self.dropout_per

    def scaled(self, factor: float) -> "ComputeRates":
        """Every cost times ``factor`` (e.g. ranks sharing a core run that much slower)."""
        costs = ("spmm_call", "spmm_per_nnz", "spmm_per_nnz_col", "spmm_per_out", "spmm_per_in", "gemm_call",
                 "elementwise_call", "elementwise_per", "dropout_per", "epoch_overhead")
        return replace(self, gemm_flops=self.gemm_flops / factor,
                       **{name: getattr(self, name) * factor for name in costs})


# Nominal data-center GPU (H100 class), for planning without a probe: a width-128 SpMM runs
# at about 0.8 TFLOP/s and the per-nonzero cost is worth 28 columns, which reproduces the ~8x
# gap Plexus measured between two grids of equal flops (§4.1, configurations U and V).
GPU_RATES = ComputeRates(spmm_call=10e-6, spmm_per_nnz=56e-12, spmm_per_nnz_col=2e-12,
                         spmm_per_out=2e-12, spmm_per_in=2e-12, gemm_call=10e-6, gemm_flops=40e12,
                         elementwise_call=5e-6, elementwise_per=4e-12, dropout_per=12e-12, source="nominal GPU")


@dataclass(frozen=True)
class Network:
    """Link costs: ``intra_bw`` is one rank's bandwidth to the others on its node;
    ``inter_bw`` is one node's total injection bandwidth, shared by the rings that leave the
    node at the same time. Latencies are per message step."""
    intra_bw: float
    inter_bw: float
    intra_latency: float = 5e-6
    inter_latency: float = 15e-6
    host_bw: float = 25e9    # host memory <-> the device, each way (out-of-core transfers)
    gather_bw: float = 10e9  # scattered rows read from host memory (a mini-batch's feature reads)
    source: str = "given"


# NVLink-class links inside a node, 4 x 100 Gb/s NICs per node, PCIe 4 x16 to the host.
GPU_NETWORK = Network(intra_bw=200e9, inter_bw=50e9, source="nominal GPU cluster")


def ring_time(kind: str, nbytes: float, ranks: int, bandwidth: float, latency: float) -> float:
    """Ring algorithms (Thakur et al.): all-gather and reduce-scatter move (p-1)/p of the
    whole buffer in p-1 steps, an all-reduce is one of each; an all-to-all sends (p-1)/p of
    a rank's bytes in p-1 messages."""
    if ranks <= 1:
        return 0.0
    steps = ranks - 1
    once = steps * latency + steps / ranks * nbytes / bandwidth
    if kind == "all_reduce":
        return 2.0 * once
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return once
    raise ValueError(f"unknown collective {kind!r}")


def tree_time(kind: str, nbytes: float, ranks: int, bandwidth: float, latency: float) -> float:
    """Logarithmic algorithms (binomial tree, recursive doubling, Bruck): ceil(log2 p) steps
    per phase, each moving up to the whole buffer (half of it for an all-to-all)."""
    if ranks <= 1:
        return 0.0
    steps = (ranks - 1).bit_length()
    share = 0.5 if kind == "all_to_all" else 1.0
    once = steps * (latency + share * nbytes / bandwidth)
    return 2.0 * once if kind == "all_reduce" else once


def collective_time(kind: str, nbytes: float, ranks: int, bandwidth: float, latency: float) -> float:
    """The faster of the two, as NCCL picks: rings for large buffers, where bandwidth rules,
    trees for small ones, where the latency of p-1 ring steps would (a loss all-reduce over
    1024 ranks)."""
    return min(ring_time(kind, nbytes, ranks, bandwidth, latency),
               tree_time(kind, nbytes, ranks, bandwidth, latency))


# ---------------------------------------------------------------------------- placement

def group_links(grid: Grid, ranks_per_node: int, network: Network, order: str = RANK_ORDER) -> dict:
    """``{axis: (bandwidth, latency)}`` for each grid axis's process groups and the world.

    A group inside one node gets ``intra_bw``. A group spanning nodes is bound by its
    inter-node hop, whose NIC it shares with every other spanning group of the same axis
    that has a rank on that node (Plexus eq. 4.6, for any placement)."""
    node = np.arange(grid.size).reshape([grid[a] for a in order]) // max(1, ranks_per_node)
    links = {}
    for axis in AXES + (WORLD,):
        if axis == WORLD:
            groups = node.reshape(1, -1)
        else:
            groups = np.moveaxis(node, order.index(axis), -1).reshape(-1, grid[axis])
        spans = groups.min(axis=1) != groups.max(axis=1)
        if not spans.any():
            links[axis] = (network.intra_bw, network.intra_latency)
            continue
        # a group's ranks rise along it, so its node ids do too: count each node once per group
        crossing = groups[spans]
        first = np.ones_like(crossing, dtype=bool)
        first[:, 1:] = crossing[:, 1:] != crossing[:, :-1]
        sharing = int(np.bincount(crossing[first]).max())   # spanning groups on the busiest node
        links[axis] = (min(network.intra_bw, network.inter_bw / sharing), network.inter_latency)
    return links


def _all_to_all_link(grid: Grid, ranks_per_node: int, network: Network, links: dict) -> tuple:
    """Every rank of a node sends off the node at once: they share its NIC."""
    bandwidth, latency = links[WORLD]
    if grid.size > ranks_per_node:
        bandwidth = min(network.intra_bw, network.inter_bw / min(ranks_per_node, grid.size))
    return bandwidth, latency


def world_links(world: int, ranks_per_node: Optional[int], network: Network) -> tuple:
    """For a strategy whose ranks form one process group: ((bandwidth, latency) of a
    collective over all ``world`` ranks, that of an all-to-all or of messages leaving a node,
    whose ranks share its NIC). ``ranks_per_node`` defaults to one node."""
    grid, per_node = Grid(world, 1, 1), ranks_per_node or world
    links = group_links(grid, per_node, network)
    return links[WORLD], _all_to_all_link(grid, per_node, network, links)


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
    spmm, dense = 0.0, rates.epoch_overhead
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
            link = (_all_to_all_link(grid, per_node, network, links) if op.kind == "all_to_all"
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
    (not from parts) keeps to cut its blocks from, the permutations and the logit route."""
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
    return structure + vertex + 4 * b * work.parameters + 2 * b * saved


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

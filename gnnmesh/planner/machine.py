"""The machine model every planner prices with: the rates of one rank's compute (SpMM, GEMM
and elementwise work, measured by ``gnnmesh.planner.probe`` or given), the links between
ranks and to the host (``Network``), what a collective costs over them, and which link a
process group gets from where its ranks are placed.

Units: seconds, bytes, and bandwidths in SI bytes per second (1 GB/s = 1e9 B/s).

Rank placement: consecutive ranks fill a node, ``ranks_per_node`` to a node, as torchrun
and Slurm place them; a grid's ranks are numbered row-major over the axes in ``RANK_ORDER``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from ..layout.grid import AXES, RANK_ORDER, WORLD, Grid


# ---------------------------------------------------------------------------- operations the rates price

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

    def overhead(self, inference: bool = False) -> float:
        """The loop's own work in what is priced: ``epoch_overhead`` in a training epoch;
        none in one inference pass, which runs no optimizer, loss or training loop."""
        return 0.0 if inference else self.epoch_overhead

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


def all_to_all_link(grid: Grid, ranks_per_node: int, network: Network, links: dict) -> tuple:
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
    return links[WORLD], all_to_all_link(grid, per_node, network, links)

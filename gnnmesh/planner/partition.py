"""Performance model of 1D partition parallelism (``--strategy partition``) for a given partition.

Bytes are exact: they come from the halo structure of the partition (``partition.rank_halos``,
what every rank's ``PartitionView`` builds) and from the model's calls (``trace``). Every
aggregation and every attention score gather sends, forward, the rows each rank lists for each
peer, one message per peer; backward, when its input wants a gradient, each rank returns the
halo rows' gradients to their owners. The trainer's evaluation repeats the forward pass.
Gradients and metrics are all-reduced over all ranks. One inference pass (``inference``) is
that evaluation alone: its forward exchanges, compute and metrics, with the partitioning as
its setup.

Time: each rank's compute from its block's nonzeros and rows and the model's widths
(``trace.epoch_compute``); an exchange lasts as long as its busiest rank takes to send or to
receive, one latency per message plus bytes over the link's bandwidth (within a node, or
leaving it through the node's NIC, shared by its ranks); nothing overlaps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Optional

import numpy as np

from ..partition import rank_halos
from ..partition.halo import check_assignment
from ..partition.registry import spec as partitioner_spec
from ..view import operator_of
from .estimate import Estimate
from .job import Dropped
from .machine import ComputeRates, Network, SpMM, world_links
from .sized import SizedGraph
from .trace import (ELEMENT_BYTES, Aggregate, EdgeScores, build, epoch_compute, peak_bytes, replicated_phases,
                    slowest, trace)


@dataclass(frozen=True)
class HaloCounts:
    """One operator's halo structure under a partition, in counts."""
    send: np.ndarray    # [ranks, ranks]: rows rank r sends rank p in one exchange
    nnz: np.ndarray     # entries of each rank's block
    valued: bool        # whether the operator stores values

    @cached_property   # asked once per rank: a sum over [ranks, ranks] each time would be quadratic
    def halo(self) -> np.ndarray:
        """Rows each rank receives in one exchange."""
        return self.send.sum(axis=0)


def halo_counts(op, assignment: np.ndarray, parts: int) -> HaloCounts:
    send, nnz = np.zeros((parts, parts), dtype=np.int64), np.zeros(parts, dtype=np.int64)
    for halo in rank_halos(op, assignment, parts):
        send[halo.rank], nnz[halo.rank] = halo.send_counts, halo.block.nnz
    return HaloCounts(send, nnz, op.values is not None)


def exchanges(calls, backward: bool):
    """``(op, row elements, transposed)`` of every halo exchange of ``calls``, in order."""
    out = []
    for call in calls:
        if isinstance(call, (Aggregate, EdgeScores)):
            out.append((call.op, call.row_elements, False))
            grad = call.input_grad if isinstance(call, Aggregate) else call.src_grad
            if backward and grad:
                out.append((call.op, call.row_elements, True))
    return out


def estimate(graph, assignment, widths, model: str, rates: ComputeRates, network: Network,
             ranks_per_node: Optional[int] = None, evaluate: bool = True, *, decoupled: bool = False,
             method: Optional[str] = None, setup_s: Optional[float] = None, inference: bool = False,
             **options) -> Estimate:
    """The predicted epoch of ``model`` (``decoupled``: its decoupled form; ``options``: the
    constructor's, e.g. ``heads``, ``k``) with ``widths`` (input, hidden..., classes; GAT's
    hidden per head) on ``graph`` (a Graph or its Adjacency) cut by ``assignment`` (a
    Partition, or the rank of every vertex); ``ranks_per_node`` defaults to one node.
    ``setup_s``: the partitioning time (default: a Partition's ``seconds``, else 0);
    ``method`` names the partitioner (default: a Partition's). ``inference``: one inference
    pass instead of an epoch (``trace.Trace``)."""
    adj = getattr(graph, "adj", graph)
    vector, parts = check_assignment(assignment, getattr(assignment, "parts", None), adj.shape[0])
    net = build(widths, model, decoupled, **options)
    traced = trace(net, widths[0], inference=inference)
    halos = {op: halo_counts(operator_of(op, adj), vector, parts) for op in sorted(traced.ops())}
    name = method or getattr(assignment, "method", None)
    setup = setup_s if setup_s is not None else (getattr(assignment, "seconds", None) or 0.0)
    return priced(net, traced, halos, np.bincount(vector, minlength=parts), widths[0], rates, network,
                  ranks_per_node, evaluate, setup, name)


def single_candidates(job) -> list:
    """The planner model of the single process (the ``PlanJob`` protocol, ``job.py``): the
    whole graph on one rank, the one candidate on one rank and none on several."""
    return [one_process(job)] if job.ranks == 1 else []


def one_process(job) -> Estimate:
    """The single process's Estimate for ``job`` (its ranks aside): 1D partitioning on one part."""
    if job.sized:
        one = random_estimate(job.graph, 1, job.widths, job.model, job.rates, job.network, 1, job.evaluate,
                              **job.model_args)
    else:
        alone = np.zeros(job.nodes, dtype=np.int64)
        one = estimate(job.graph, alone, job.widths, job.model, job.rates, job.network, 1, job.evaluate,
                       **job.model_args)
    return replace(one, strategy="single", settings={"strategy": "single"})


def candidates(job) -> list:
    """The planner model of 1D partitioning (the ``PlanJob`` protocol): one candidate per
    partitioner on several ranks. A graph known by its size has only the random partition's
    expected halos; a partitioner whose package is missing is dropped with the reason."""
    if job.ranks == 1:
        return []
    if job.sized:
        return [random_estimate(job.graph, job.ranks, job.widths, job.model, job.rates, job.network,
                                job.ranks_per_node, job.evaluate, **job.model_args)
                if not partitioner_spec(method).structural
                else Dropped(f"partition {method}", "it partitions the graph's own structure: give --dataset")
                for method in job.methods]
    return [Dropped(f"partition {method}", str(part)) if isinstance(part, Exception)
            else estimate(job.graph, part, job.widths, job.model, job.rates, job.network, job.ranks_per_node,
                          job.evaluate, **job.model_args) for method, part in job.partitions]


def random_estimate(graph: SizedGraph, parts: int, widths, model: str, rates: ComputeRates, network: Network,
                    ranks_per_node: Optional[int] = None, evaluate: bool = True, *, decoupled: bool = False,
                    inference: bool = False, **options) -> Estimate:
    """``estimate`` for a graph known by its size: the random partition (``rp``) with the
    halos ``SizedGraph.random_halos`` expects, an upper bound on a real graph's."""
    net = build(widths, model, decoupled, **options)
    traced = trace(net, widths[0], inference=inference)
    halos = {op: HaloCounts(*graph.random_halos(op, parts), graph.operator(op).valued)
             for op in sorted(traced.ops())}
    return priced(net, traced, halos, graph.rows(parts), widths[0], rates, network, ranks_per_node, evaluate,
                  0.0, "rp")


def priced(net, traced, halos: dict, owned: np.ndarray, in_dim: int, rates: ComputeRates, network: Network,
           ranks_per_node: Optional[int], evaluate: bool, setup_s: float, method: Optional[str]) -> Estimate:
    """The Estimate of ``net`` (``traced``) given each operator's HaloCounts and the rows each
    rank owns."""
    parts = len(owned)
    moves = [move for calls, training in traced.passes(evaluate) for move in exchanges(calls, training)]
    halo_bytes = np.zeros(parts, dtype=np.int64)
    for op, elements, back in moves:
        rows = halos[op].send.T if back else halos[op].send
        halo_bytes += rows.sum(axis=1) * elements * ELEMENT_BYTES
    collective, leaving = world_links(parts, ranks_per_node, network)
    counted, comm = replicated_phases(parts, traced, evaluate, collective)
    comm["halo"] = _halo_seconds(moves, halos, parts, ranks_per_node or parts, network, leaving)
    # Ranks alike in what a rank's compute and peak depend on are priced once (on a large mesh
    # most are: a random partition has two kinds of rank).
    kinds, rank_kind = {}, []
    for r in range(parts):
        key = (int(owned[r]),) + tuple((int(h.halo[r]), int(h.nnz[r]), int(h.send[r].sum())) for h in halos.values())
        if key not in kinds:
            kinds[key] = (_rank_compute(traced, halos, rates, int(owned[r]), r, evaluate),
                          _peak(net, traced, halos, in_dim, int(owned[r]), r))
        rank_kind.append(kinds[key])
    compute = slowest([kind[0] for kind in rank_kind], rates)
    return Estimate.build(compute, comm, {"halo": halo_bytes.tolist(), **counted},
                          [kind[1] for kind in rank_kind], setup_s, strategy="partition", partitioner=method)


def _rank_compute(traced, halos: dict, rates: ComputeRates, owned: int, r: int, evaluate: bool) -> dict:
    def aggregation(call):
        h = halos[call.op]
        return SpMM(owned, owned + int(h.halo[r]), int(h.nnz[r]), call.row_elements)

    return epoch_compute(traced, rates, owned, aggregation, lambda op: int(halos[op].nnz[r]), evaluate)


def _halo_seconds(moves, halos: dict, parts: int, per_node: int, network: Network, leaving: tuple) -> float:
    node = np.arange(parts) // per_node
    same = node[:, None] == node[None, :]
    latency = np.where(same, network.intra_latency, leaving[1])
    inverse_bw = np.where(same, 1.0 / network.intra_bw, 1.0 / leaving[0])
    total = 0.0
    for op, elements, back in moves:
        rows = halos[op].send.T if back else halos[op].send
        seconds = (rows > 0) * (latency + rows * elements * ELEMENT_BYTES * inverse_bw)
        total += float(max(seconds.sum(axis=1).max(), seconds.sum(axis=0).max()))
    return total


def _peak(net, traced, halos: dict, in_dim: int, owned: int, r: int) -> int:
    """Structure: each operator's block (CSR, int64 indices, float32 values) twice (the block
    and its owned/halo split) with the entries' positions and the send lists; an aggregation
    saves its output and the halo it received, a score gather the halo and the edges' scores."""
    structure = 0
    for h in halos.values():
        nnz = int(h.nnz[r])
        csr = 8 * (owned + 1) + nnz * (8 + (ELEMENT_BYTES if h.valued else 0))
        structure += 2 * csr + 8 * nnz + 8 * int(h.send[r].sum())

    def aggregated(call):
        return call.steps * (owned + int(halos[call.op].halo[r])) * call.row_elements

    def gathered(call):
        return (int(halos[call.op].halo[r]) + int(halos[call.op].nnz[r])) * call.row_elements

    return peak_bytes(net, traced, in_dim, owned, structure, aggregated, gathered, lambda op: int(halos[op].nnz[r]))

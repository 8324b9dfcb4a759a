"""Performance model of tensor parallelism over feature columns (``--strategy tensor``), plain
and ``--decoupled``.

Bytes are exact, from the model's calls (``trace``) and the strategy's own rules: each
aggregation's layout switches (``parallel.tensor.aggregation_switches``, priced per rank by
``layout_bytes``, the rule ``TensorParallel.predicted_layout_bytes`` uses too); attention's
source scores and per-edge weights shared with every rank (``share``: an all-gather forward,
a reduce-scatter of the gradient backward, padded as ``comm.all_gather_bytes`` and
``comm.reduce_scatter_bytes`` count); gradients and metrics all-reduced. A decoupled model
runs its NN layers (and attention) on rows, then one split, k propagation steps on column
slices and one gather, whatever k is. Chunking (``--chunk-size``) moves the same bytes and is
not modelled otherwise. One inference pass (``inference``) is the evaluation alone: its
forward switches and shares (all-gathers), compute and metrics.

Time: each rank's dense work on its V/N rows and its aggregations on its column slice of all
V rows (``trace.epoch_compute``); every switch is an all-to-all as long as its busiest rank's
share, every share an all-gather or reduce-scatter over all ranks (``machine.collective_time``);
nothing overlaps.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

import numpy as np

from ..comm import all_gather_bytes, reduce_scatter_bytes
from ..layout.ranges import even_bounds
from ..parallel.tensor.strategy import aggregation_switches, layout_bytes
from ..view import operator_of
from .estimate import Estimate
from .machine import ComputeRates, Network, SpMM, collective_time, world_links
from .sized import OperatorSize, SizedGraph
from .trace import (ELEMENT_BYTES, Aggregate, EdgeScores, build, epoch_compute, peak_bytes, replicated_phases,
                    slowest, trace)


def _decoupled_pass(net, view, x):
    """What ``TensorParallel.forward`` asks of the view for a decoupled model: the transform
    and attention on rows, the operator's edge weights shared, and one aggregation standing
    for the k steps between the split of H_0 and the gather of the output."""
    h0 = net.transform(view, x)
    return view.spmm(h0, net.op, net.edge_weights(view, h0))


def _switched(call: Aggregate) -> tuple:
    """(width, mid) of the ``[V, mid, width]`` tensor an aggregation switches."""
    shape = call.shape or (1,)
    return shape[-1], math.prod(shape[:-1])


def switches(traced, evaluate: bool) -> list:
    """Every layout switch of an epoch, in order."""
    out = []
    for calls, training in traced.passes(evaluate):
        for call in calls:
            if isinstance(call, Aggregate) and call.steps:
                out += aggregation_switches(*_switched(call), backward=training and call.backward,
                                            input_grad=call.input_grad)
    return out


def shares(traced, evaluate: bool, row_counts: list, entries: dict) -> list:
    """``(kind, sizes, row elements)`` of every share of an epoch: the rows (or an operator's
    entries per row block) each rank contributes."""
    out = []
    for calls, training in traced.passes(evaluate):
        for call in calls:
            if isinstance(call, EdgeScores):
                sizes, elements, grad = row_counts, call.row_elements, call.src_grad
            elif isinstance(call, Aggregate) and call.values is not None:
                sizes, elements, grad = entries[call.op], math.prod(call.values), call.values_grad
            else:
                continue
            out.append(("all_gather", sizes, elements))
            if training and grad:
                out.append(("reduce_scatter", sizes, elements))
    return out


def estimate(graph, ranks: int, widths, model: str, rates: ComputeRates, network: Network,
             ranks_per_node: Optional[int] = None, evaluate: bool = True, *, decoupled: bool = False,
             inference: bool = False, **options) -> Estimate:
    """The predicted epoch of ``model`` (``decoupled``: its decoupled form; ``options``: the
    constructor's, e.g. ``heads``, ``k``) with ``widths`` (input, hidden..., classes; GAT's
    hidden per head) on ``graph`` (a Graph or its Adjacency) over ``ranks`` ranks;
    ``ranks_per_node`` defaults to one node. ``inference``: one inference pass instead of an
    epoch (``trace.Trace``)."""
    adj = getattr(graph, "adj", graph)
    bounds = even_bounds(adj.shape[0], ranks)
    net, traced = _traced(widths, model, decoupled, inference, **options)
    ops = {name: operator_of(name, adj) for name in sorted(traced.ops())}
    sizes = {name: OperatorSize(op.nnz, op.values is not None) for name, op in ops.items()}
    entries = {name: np.diff(op.indptr.numpy()[bounds]).tolist() for name, op in ops.items()}
    return priced(net, traced, sizes, entries, np.diff(bounds).tolist(), widths[0], rates, network,
                  ranks_per_node, evaluate, decoupled)


def sized_estimate(graph: SizedGraph, ranks: int, widths, model: str, rates: ComputeRates, network: Network,
                   ranks_per_node: Optional[int] = None, evaluate: bool = True, *, decoupled: bool = False,
                   inference: bool = False, **options) -> Estimate:
    """``estimate`` for a graph known by its size: each row block holds its rows' share of an
    operator's entries."""
    row_counts = graph.rows(ranks).tolist()
    net, traced = _traced(widths, model, decoupled, inference, **options)
    sizes = {name: graph.operator(name) for name in sorted(traced.ops())}
    entries = {name: [round(size.nnz * rows / graph.nodes) for rows in row_counts] for name, size in sizes.items()}
    return priced(net, traced, sizes, entries, row_counts, widths[0], rates, network, ranks_per_node, evaluate,
                  decoupled)


def candidates(job) -> list:
    """The planner model of tensor parallelism (the ``PlanJob`` protocol): one candidate on
    several ranks, the decoupled form's when the model is decoupled."""
    if job.ranks == 1:
        return []
    price = sized_estimate if job.sized else estimate
    return [price(job.graph, job.ranks, job.widths, job.model, job.rates, job.network, job.ranks_per_node,
                  job.evaluate, **job.model_args)]


def _traced(widths, model: str, decoupled: bool, inference: bool, **options) -> tuple:
    """(the model, its Trace as tensor parallelism runs it)."""
    net = build(widths, model, decoupled, **options)
    traced = trace(net, widths[0], _decoupled_pass if decoupled else None, inference)
    if decoupled:   # the one aggregation stands for the k steps (none: no switches either)
        def steps(calls):
            return tuple(replace(c, steps=net.k) if isinstance(c, Aggregate) else c for c in calls)
        traced = replace(traced, train=steps(traced.train), evaluation=steps(traced.evaluation))
    return net, traced


def priced(net, traced, operators: dict, entries: dict, row_counts: list, in_dim: int, rates: ComputeRates,
           network: Network, ranks_per_node: Optional[int], evaluate: bool, decoupled: bool) -> Estimate:
    """The Estimate of ``net`` (``traced``) given each operator's OperatorSize (``operators``),
    its entries per row block, and the rows of each block."""
    ranks = len(row_counts)
    switched, shared = switches(traced, evaluate), shares(traced, evaluate, row_counts, entries)
    count = {"all_gather": all_gather_bytes, "reduce_scatter": reduce_scatter_bytes}
    share_bytes = sum(count[kind](sizes, elements, ELEMENT_BYTES) for kind, sizes, elements in shared)
    collective, all_to_all = world_links(ranks, ranks_per_node, network)
    counted, comm = replicated_phases(ranks, traced, evaluate, collective)
    counted = {"layout": layout_bytes(row_counts, switched, ELEMENT_BYTES), "share": [share_bytes] * ranks, **counted}
    comm["layout"] = sum(_all_to_all_seconds(layout_bytes(row_counts, [s], ELEMENT_BYTES), ranks, all_to_all)
                         for s in switched)
    comm["share"] = sum(collective_time(kind, ranks * all_gather_bytes(sizes, elements, ELEMENT_BYTES), ranks,
                                        *collective) for kind, sizes, elements in shared)
    compute = slowest([_rank_compute(traced, operators, entries, rates, row_counts, r, evaluate)
                       for r in range(ranks)], rates)
    peaks = [_peak(net, traced, operators, entries, in_dim, row_counts, r) for r in range(ranks)]
    return Estimate.build(compute, comm, counted, peaks, strategy="tensor", decoupled=decoupled)


def _all_to_all_seconds(sent: list, ranks: int, link: tuple) -> float:
    """An all-to-all takes as long as its busiest rank: what it sends, as ``collective_time``
    takes it (the whole buffer, its own share included)."""
    return collective_time("all_to_all", max(sent) * ranks / (ranks - 1), ranks, *link) if ranks > 1 else 0.0


def _columns(width: int, ranks: int, r: int) -> int:
    bounds = even_bounds(width, ranks)
    return bounds[r + 1] - bounds[r]


def _rank_compute(traced, ops: dict, entries: dict, rates: ComputeRates, row_counts: list, r: int,
                  evaluate: bool) -> dict:
    nodes, ranks = sum(row_counts), len(row_counts)

    def aggregation(call):
        width, mid = _switched(call)
        return SpMM(nodes, nodes, ops[call.op].nnz, mid * _columns(width, ranks, r))

    return epoch_compute(traced, rates, row_counts[r], aggregation, lambda op: entries[op][r], evaluate)


def _peak(net, traced, ops: dict, entries: dict, in_dim: int, row_counts: list, r: int) -> int:
    """Structure: every operator whole (CSR, int64 indices, float32 values) twice (it and its
    chunks' blocks); an aggregation saves its input's column slice of all rows (each step's),
    its output rows and any shared edge weights, a score gather the scores of all rows and of
    the rank's rows' in-edges."""
    nodes, ranks, rows = sum(row_counts), len(row_counts), row_counts[r]
    structure = sum(2 * (8 * (nodes + 1) + op.nnz * (8 + (ELEMENT_BYTES if op.valued else 0)))
                    for op in ops.values())

    def aggregated(call):
        width, mid = _switched(call)
        weights = ops[call.op].nnz * math.prod(call.values) if call.values is not None else 0
        return call.steps * nodes * mid * _columns(width, ranks, r) + rows * call.row_elements + weights

    def gathered(call):
        return (nodes + entries[call.op][r]) * call.row_elements

    return peak_bytes(net, traced, in_dim, rows, structure, aggregated, gathered, lambda op: entries[op][r])

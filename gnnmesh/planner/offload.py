"""Performance model of out-of-core training (``--strategy offload``) under a fast-tier budget,
for a given partition.

Bytes are the strategy's own plan's: the chunks ``build_plan`` picks for the budget (the fewest
that fit, dedup ``both``, reorganized, the run's defaults), the rows they move between the
host tier and the fast tier (``offload.plan.epoch_traffic``) and to other ranks (the ``offload``
phase the run counts), and the fast tier's estimated peak (``offload.plan.footprint``).

Time: the compute of 1D partitioning on the same partition (``partition.estimate``; layers the
plan recomputes in the backward pass are not priced again), every byte between the tiers at
``network.host_bw``, and one all-to-all per batch and stage of each pass for the rows other
ranks read; nothing overlaps.

One inference pass (``inference``) is the evaluation pass alone: its traffic between the
tiers and to other ranks, and its compute. Its peak stays the training plan's
(``offload.plan.footprint``, which keeps the logits' gradient and the loss beside each chunk's
working set): an upper bound of the forward's, on the plan a run with that budget builds.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import ConfigError
from ..partition.halo import check_assignment
from ..parallel.offload import build_plan
from ..parallel.offload.pipeline import stages_of
from ..parallel.offload.plan import epoch_traffic, footprint, trained_params
from . import partition as partition_model
from .estimate import Estimate
from .job import Dropped
from .machine import ComputeRates, Network, collective_time, world_links
from .trace import build


def estimate(graph, assignment, widths, model: str, rates: ComputeRates, network: Network,
             ranks_per_node: Optional[int] = None, evaluate: bool = True, *, budget: int,
             decoupled: bool = False, method: Optional[str] = None, inference: bool = False,
             **options) -> Estimate:
    """The predicted epoch of ``model`` (as ``partition.estimate`` takes it) trained out of
    core on ``graph`` cut by ``assignment``, each rank's fast tier holding ``budget`` bytes;
    a ConfigError when no plan fits the budget. ``inference``: one inference pass instead."""
    adj = getattr(graph, "adj", graph)
    vector, parts = check_assignment(assignment, getattr(assignment, "parts", None), adj.shape[0])
    owned = [np.flatnonzero(vector == r) for r in range(parts)]
    net = build(widths, model, decoupled, **options)
    stages = stages_of(net, widths[0])
    heads = getattr(net, "heads", 1)
    plan = build_plan(adj=adj, owned=owned, rank=0, in_dim=widths[0], stages=stages, classes=stages[-1].width,
                      heads=heads, budget=budget, chunks=None, dedup="both", reorganize=True,
                      params=trained_params(net))
    trained, evaluated = (0, 1) if inference else (1, int(evaluate))   # passes: training, evaluation
    traffic = epoch_traffic(plan, stages, trained, evaluated)
    inner = partition_model.estimate(graph, assignment, widths, model, rates, network, ranks_per_node, evaluate,
                                     decoupled=decoupled, method=method, inference=inference, **options)
    _, all_to_all = world_links(parts, ranks_per_node, network)
    replicated = ("grad", "metrics")   # all-reduced as under 1D partitioning
    counted = {phase: inner.rank_phase_bytes[phase] for phase in replicated}
    comm = {phase: inner.terms[phase] for phase in replicated}
    exchanges = plan.batches * len(stages) * (2 * trained + evaluated)   # a training pass: forward, backward
    sent = max(traffic.peer)
    comm["offload"] = exchanges * collective_time("all_to_all", sent * parts / max(parts - 1, 1) / exchanges,
                                                  parts, *all_to_all) if parts > 1 and sent else 0.0
    moved = [traffic.load[r] + traffic.store[r] for r in range(parts)]
    comm["host"] = max(moved) / network.host_bw
    compute = {term: inner.terms[term] for term in ("aggregate", "dense")}
    peaks = footprint(plan, stages, stages[-1].width, heads)   # the training step's, also for inference
    settings = {"partitioner": method or getattr(assignment, "method", None)} if parts > 1 else {}
    return Estimate.build(compute, comm, {"offload": list(traffic.peer), **counted}, peaks, inner.setup_s,
                          strategy="offload", device_memory=str(int(budget)), **settings)


def candidates(job) -> list:
    """The planner model of out-of-core training (the ``PlanJob`` protocol): a candidate only
    under a memory limit, the fast tier's budget, on each partition (or the single process),
    dropped with the reason where no plan fits. A graph known by its size has no chunks."""
    if job.memory_limit is None:
        return []
    if job.sized:
        return [Dropped("offload", "its chunks follow the graph's own structure: give --dataset")]
    if job.ranks == 1:
        return [_or_dropped(job, np.zeros(job.nodes, dtype=np.int64), "offload")]
    return [_or_dropped(job, part, f"offload {method}") for method, part in job.partitions
            if not isinstance(part, Exception)]


def _or_dropped(job, assignment, name: str):
    try:
        return estimate(job.graph, assignment, job.widths, job.model, job.rates, job.network, job.ranks_per_node,
                        job.evaluate, budget=job.memory_limit, **job.model_args)
    except ConfigError as err:
        return Dropped(name, str(err))

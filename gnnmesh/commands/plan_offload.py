"""``gnnmesh plan --strategy offload``: the out-of-core plan of a dataset and model under a
fast-tier budget, without training: the chosen K, the fast tier's estimated peak, the host
tier's size and the bytes an epoch moves (what the training run's counters will show)."""

from __future__ import annotations

import numpy as np

from ..config import Config
from ..errors import ConfigError
from ..parallel.offload import build_plan
from ..parallel.offload.pipeline import stages_of, tables
from ..parallel.offload.plan import FLOAT, epoch_traffic, footprint, savings, trained_params
from ..planner.trace import within_bounds
from ..validate import parse_bytes
from .. import trained
from ..report.plan_file import Candidate, write_plan

MiB = 2**20


def run(args) -> int:
    if not args.dataset:
        raise ConfigError("--strategy offload plans a dataset's own topology: give --dataset")
    if not args.device_memory:
        raise ConfigError("--strategy offload needs --device-memory SIZE (e.g. 512MiB)")
    nproc = args.nproc or 1
    config = Config.of(dataset=args.dataset, data_root=args.data_root, model=args.model, model_args=args.model_args,
                       decoupled=args.decoupled,
                    hidden=args.hidden, layers=args.layers,
                    strategy="offload", nproc=nproc, device_memory=args.device_memory, chunks=args.chunks,
                    dedup=args.dedup, intermediates=args.intermediates, reorganize=args.reorganize,
                    overlap=args.overlap,
                    partitioner=args.partitioner).resolved()
    from .. import datasets
    graph = datasets.load(config.data.dataset, root=config.data.data_root)
    graph.require_node_classification()
    in_dim = args.features or graph.num_features or (2 if graph.directed else 1)
    classes = args.classes or graph.num_classes
    model = within_bounds(lambda: trained.build(config, trained.Widths(in_dim, classes)))
    stages = stages_of(model, in_dim, config.offload.intermediates)
    owned = _owned(graph, nproc, config)
    budget = parse_bytes(config.host_tier.device_memory, "device_memory")
    chunks = None if config.host_tier.chunks == "auto" else int(config.host_tier.chunks)
    heads = getattr(model, "heads", 1)
    plan = build_plan(adj=graph.adj, owned=owned, rank=0, in_dim=in_dim, stages=stages, classes=stages[-1].width,
                      heads=heads, budget=budget, chunks=chunks, dedup=config.host_tier.dedup,
                      reorganize=config.host_tier.reorganize, params=trained_params(model),
                      overlap=bool(config.host_tier.overlap))
    if args.json:
        write_plan(args.json, "offload", [candidate(plan, stages, stages[-1].width, heads)])
    for line in describe(graph, config, plan, stages, stages[-1].width, heads, budget, chunks is None):
        print(line)
    return 0


def candidate(plan, stages: list, classes: int, heads: int) -> Candidate:
    """The plan's entry in the plan file. The offload model predicts bytes and memory, not
    time: no epoch time and nothing dominant."""
    traffic = epoch_traffic(plan, stages, 1, 1)
    moved = [traffic.load[r] + traffic.store[r] + traffic.peer[r] for r in range(plan.world)]
    return Candidate("offload", None, int(max(moved)), int(max(footprint(plan, stages, classes, heads))),
                     None)


def _owned(graph, nproc: int, config: Config) -> list:
    if nproc == 1:
        return [np.arange(graph.num_nodes)]
    from .. import partition
    result = partition.partition(graph, nproc, config.partition.partitioner, epsilon=config.partition.epsilon, seed=config.training.seed)
    assignment = np.asarray(result.assignment)
    return [np.flatnonzero(assignment == r) for r in range(nproc)]


def host_bytes(plan, stages: list) -> list:
    """Each rank's host tier: the features and every table a run creates."""
    width = plan.in_dim + sum(tables(stages, plan.in_dim).values())
    return [plan.chunks[r][-1].hi * width * FLOAT for r in range(plan.world)]


def describe(graph, config, plan, stages, classes, heads, budget, auto) -> list:
    traffic = epoch_traffic(plan, stages, 1, 1)
    base = epoch_traffic(plan, stages, 1, 1, mode="none").total("load")
    inter = epoch_traffic(plan, stages, 1, 1, mode="inter").total("load")
    load = traffic.total("load")
    saved = savings(load, base, inter, plan.mode)
    peaks = footprint(plan, stages, classes, heads)
    host = host_bytes(plan, stages)
    widths = "-".join(str(w) for w in [plan.in_dim] + [s.width for s in stages])
    how = ", ".join(sorted({"cached aggregates" if s.cached else "recomputed" for s in stages}))
    model = f"{'decoupled ' if config.model.decoupled else ''}{config.model.name} {widths} ({how})"
    return [
        f"offload plan: {graph.name}, {graph.num_nodes:,} nodes, {graph.adj.nnz:,} adjacency entries; "
        f"{model} on {plan.world} rank{'s' if plan.world > 1 else ''}",
        f"budget {budget / MiB:.1f} MiB: {plan.k} chunks per rank ({'auto' if auto else 'given'}), dedup "
        f"{plan.mode}{', reorganized' if plan.reorganized else ''}{', overlapped' if plan.overlap else ''}; "
        f"alpha {plan.replication():.2f}",
        f"fast tier (estimate): {max(peaks) / MiB:.1f} MiB per rank at most",
        f"host tier: {max(host) / MiB:.1f} MiB per rank of vertex data, gradients and cached aggregates "
        f"({sum(host) / max(budget, 1):.1f}x the budget in all)",
        "per epoch (a training pass and an evaluation pass):",
        f"  host -> fast  {load / MiB:12.2f} MiB  (no dedup {base / MiB:.2f} MiB: saved "
        f"{saved['dedup_saving_pct']:.1f}%, inter {saved['dedup_inter_pct']:.1f}%, intra "
        f"{saved['dedup_intra_pct']:.1f}%)",
        f"  fast -> host  {traffic.total('store') / MiB:12.2f} MiB",
        f"  between ranks {traffic.total('peer') / MiB:12.2f} MiB",
        f"  kept in place {traffic.total('kept') / MiB:12.2f} MiB",
    ]


"""From a Config to a finished run: load the data, train, print progress and a summary.

Runs as one process, or as one rank of a distributed job when the torchrun environment is
set (by ``gnnmesh train --nproc N``, by ``torchrun`` or by Slurm). Only rank 0 prints.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch

from .. import comm, datasets, memory, strategies, tasks
from ..config import Config
from ..errors import ConfigError, GraphError
from ..graph import Graph
from ..launch import check_job_env, ranks_share_cores, world_from_env
from ..ops import buffers, compiled
from ..parts import open_parts
from ..transforms import ORDERS, permute
from .model_check import check_before_training
from .trainer import EpochResult, Summary, Trainer, rank_device



def given_dataset(config: Config):
    """The ``--dataset`` the user gave (None where it was left to its default), which a run
    from parts checks against the dataset the parts hold: given, it is never ignored."""
    return config.data.dataset if "dataset" in config.given else None


def load_graph(config: Config) -> tuple:
    """(the dataset renumbered as ``--reorder`` asks, the original id of each of its nodes or
    None)."""
    graph = datasets.load(config.data.dataset, root=config.data.data_root)
    if config.data.reorder == "none":
        return graph, None
    order = np.asarray(ORDERS[config.data.reorder](graph), dtype=np.int64)
    return permute(graph, order), order


def run_training(config: Config, quiet: bool = False, check_model: bool = True) -> Summary:
    """Train as ``config`` says. ``check_model``: on several ranks, first check that a model
    of the user's own equals the single process split among them (``model_check``)."""
    check_job_env()
    world = world_from_env()
    rank, world_size = world or (0, 1)
    config, parts = adopt_parts(config)
    if world and strategies.spec(config.run.strategy).one_process and world_size > 1:
        raise ConfigError(f"this job has {world_size} ranks; choose a parallel --strategy (e.g. partition)")
    config = config.resolved()  # once, before anything is built from it
    device = rank_device(config)
    if world:
        comm.init(device)
    try:
        summary = _train(config, parts, quiet, rank, world_size, device, check_model)
    except BaseException:
        comm.shutdown()
        raise
    comm.shutdown(clean=True)
    return summary


def adopt_parts(config: Config) -> tuple:
    """(``config`` with what it leaves unsaid decided by its parts directory, the parts opened;
    or ``config`` and None without ``--parts``)."""
    if not config.data.parts:
        return config, None
    parts = open_parts(config.data.parts)
    if strategies.spec(config.run.strategy).one_process:
        config = config.updated(strategy=parts.kind)
    for name in strategies.spec(parts.kind).from_parts:   # what the parts were written with
        if config.get(name) is None:
            config = config.updated(**{name: ",".join(map(str, parts.manifest[name]))})
    return config, parts


def _train(config, parts, quiet, rank, world_size, device, check_model=True) -> Summary:
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    torch.set_num_threads(config.run.threads or (ranks_share_cores(local_ranks) if world_size > 1
                                             else torch.get_num_threads()))
    say = (lambda *a: None) if quiet or rank != 0 else print
    t0 = time.perf_counter()
    planned, planned_on, order = {}, None, None
    if config.planned:
        def load():
            nonlocal planned_on
            planned_on = load_graph(config)
            return planned_on[0]
        from .auto import choose
        config, planned = choose(config, load, rank, world_size, say)
        say(f"planned in {time.perf_counter() - t0:.2f}s")
        t0 = time.perf_counter()
    if parts is not None:
        data = parts
        data.check_run(config.run.strategy, world_size, given_dataset(config))
        config = config.updated(dataset=data.dataset)  # what checkpoints and metrics record
    else:
        data, order = load_once_per_host(lambda: planned_on or load_graph(config), rank, world_size)
    loaded = data.describe() if parts is not None else repr(data)
    # the CPU kernels load now, not in the first epoch's time nor in a strategy's memory
    # baseline: they are code
    if device.type == "cpu" and compiled.wanted(data.adj.nnz if isinstance(data, Graph) else 0):
        compiled.load()
    minibatch = config.training.minibatch
    if config.training.task:
        trainer_class = tasks.spec(config.training.task).trainer_class(minibatch)
    else:
        from .minibatch import MiniBatchTrainer
        trainer_class = MiniBatchTrainer if minibatch else Trainer
    # a link split is drawn on the graph as the user numbers it, whatever --reorder renumbers
    renumbered = {"original": order} if order is not None and config.learns_links else {}
    trainer = trainer_class(config, data, **renumbered)
    cfg, strategy = trainer.config, trainer.strategy
    trainer.labels.update(planned)
    if device.type == "cpu":
        # kernel outputs reuse freed memory from epoch to epoch (no fresh pages to fault in),
        # unless the strategy plans its resident memory, where idle buffers would count
        buffers.pool(not strategy.holds_memory_budget)
    say(f"{loaded} loaded in {time.perf_counter() - t0:.2f}s")
    if trainer.task_note:
        say(f"task {trainer.task_note}")
    say(f"model {cfg.model.name}: {sum(p.numel() for p in trainer.model.parameters()):,} parameters, "
        f"strategy {strategy.describe()}, device {device}, {torch.get_num_threads()} threads per rank")
    if check_model and world_size > 1 and cfg.model.user:
        _check_model(trainer, say)
    lines = strategy.dry_run_lines()
    if lines:
        say("dry run (one epoch sampled, nothing moved; predicted time per epoch of what the strategies do "
            "differently, the slowest rank's):")
        for line in lines:
            say("  " + line)

    metric = "acc" if trainer.task.metric == "accuracy" else trainer.task.metric

    def progress(r: EpochResult):
        if r.epoch % cfg.run.log_every == 0 or r.epoch in (1, cfg.training.epochs):
            say(f"epoch {r.epoch:4d} | loss {r.loss:.4f} | {metric} train {r.train_acc:.3f} val {r.val_acc:.3f} "
                f"test {r.test_acc:.3f} | {1e3 * r.epoch_time:7.1f} ms (aggregate {1e3 * r.aggregate_time:.1f}, "
                f"dense {1e3 * r.dense_time:.1f}, other {1e3 * r.other_time:.1f})")
            for line in strategy.report_lines(r.extra) + [memory.describe(r.extra)]:
                say("           " + line)

    def restarted(record: dict):
        if rank == 0:  # on stderr, like a warning, and under --quiet too: the job lost ranks
            print(restart_line(record), file=sys.stderr, flush=True)

    summary = trainer.fit(progress, restarted)
    if rank == 0:  # --quiet keeps the summary
        print(f"done: {summary.epochs} epochs in {summary.total_time:.2f}s ({1e3 * summary.mean_epoch_time:.1f} ms/epoch); "
        f"{_best(summary, metric)}, final loss {summary.final_loss:.4f}{_peak(summary, world_size)}")
        if summary.stopped:
            print(f"stopped early: {summary.stopped}; the run keeps the best parameters")
    return summary


def _check_model(trainer: Trainer, say) -> None:
    """Before a model of the user's own trains on several ranks: its outputs split among them
    equal the single process's, or the run stops with one line."""
    gaps = check_before_training(trainer.config, trainer.num_features, trainer.num_classes)
    say(f"model check: {'; '.join(gap.line() for gap in gaps)} (--no-check-model skips it)")


def restart_line(record: dict) -> str:
    """The one line a restart of an elastic job prints (its metrics record: ``Trainer._restart``)."""
    failed = f" ({record['failed']})" if record.get("failed") else ""
    where = (f"resumed from epoch {record['epoch']} of {record['checkpoint']}" if record["checkpoint"]
             else "started over (no checkpoint of this job yet)")
    return f"gnnmesh: restart {record['restart']}{failed}: {record['ranks']} ranks {where}"


def _best(summary: Summary, metric: str) -> str:
    """The best validation epoch in words. Epoch 0 is none: no evaluation gave the metric a value
    (a ROC-AUC where every target is constant over the validation rows, say), which no number says."""
    name = "" if metric == "acc" else metric + " "
    if summary.best_epoch == 0:
        return (f"best val {name}undefined (no evaluation gave it a value: a ROC-AUC needs a target that takes "
                "both values on the validation rows)")
    return f"best val {name}{summary.val_acc:.4f} at epoch {summary.best_epoch}, test {summary.test_acc:.4f}"


def _peak(summary: Summary, world_size: int) -> str:
    peak = summary.memory.get("peak_rss_mib_max")  # absent from histories recorded before it was
    if peak is None:
        return ""
    return f"; peak memory {peak:,.0f} MiB" + (" (largest rank)" if world_size > 1 else "")


def load_once_per_host(load, rank: int, world_size: int):
    """``load()`` (the graph, or what a command loads with it) on every rank: rank 0 first,
    filling the on-disk cache, then the others from the cache. Bad input found by rank 0 is
    sent to every rank, so that all stop with the same error."""
    if world_size == 1:
        return load()
    world = comm.setup_comm()
    error = loaded = None
    if rank == 0:
        try:
            loaded = load()
        except (GraphError, ConfigError) as err:
            error = err
    error = world.broadcast_object(error)
    if error is not None:
        raise error
    return loaded if rank == 0 else load()

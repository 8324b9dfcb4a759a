"""Mini-batch training (``--minibatch``): every epoch shuffles the training nodes into batches
of ``--batch-size`` seeds, samples their blocks (``--fanouts``) and takes one optimizer step
per batch. Evaluation predicts every labelled node from its ``--eval-fanouts`` neighbourhood,
in batches, or by default from all its neighbours in one whole-graph pass (the same numbers
a block holding every in-edge gives, without batches' overlapping work).

The shuffle and the sampling depend on (seed, epoch, step) only, so every rank draws the same
batches; under a parallel strategy each rank takes its share of a batch's seeds, and the
step's loss and gradient are the single process's, summed over ranks.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..errors import ConfigError
from ..ops.precision import widened
from ..parallel.minibatch import BatchSetup, share
from ..sampling import DEFAULT_BATCH, BlockView, draw_batches, sampled_graph, sampled_operator, sampler_of
from .trainer import Trainer


class MiniBatchTrainer(Trainer):
    holds_every_row = True
    trains_minibatches = True

    def __init__(self, config, data, strategy=None, task=None, model=None):
        """As ``Trainer``'s (``model``: one built by the caller instead of the config's)."""
        super().__init__(config, data, strategy, task=task, model=model)
        cfg, s = self.config, self.rank_data
        self.split_sizes = [float(m.sum()) for m in (s.train_mask, s.val_mask, s.test_mask)]  # every rank has all
        self.train_ids = torch.nonzero(s.train_mask.cpu()).flatten().numpy()
        self.batch_size = cfg.minibatch.batch_size or min(DEFAULT_BATCH, len(self.train_ids))
        if self.batch_size > len(self.train_ids):
            raise ConfigError(f"config field 'batch_size': {self.batch_size} is larger than the training set "
                              f"({len(self.train_ids)} nodes of dataset '{self.name}')")
        self.op = sampled_operator(self.model)
        operator = sampled_graph(self.op, s.view.adj)
        self.sampler = sampler_of(self.op, operator, cfg.minibatch.fanouts, cfg.training.seed)
        # All neighbours (the default): one whole-graph pass computes every node's exact output,
        # which a block with every in-edge would too, at a fraction of batches' overlapping work.
        self.eval_sampler = None
        if cfg.minibatch.eval_fanouts:
            self.eval_sampler = sampler_of(self.op, operator, cfg.minibatch.eval_fanouts, cfg.training.seed,
                                           "eval_fanouts")
            self.eval_sampler = None if self.eval_sampler.takes_all else self.eval_sampler
        self.labelled = torch.nonzero((s.train_mask | s.val_mask | s.test_mask).cpu()).flatten().numpy()
        self.sampled_edges = 0
        self.operator = operator
        self.strategy.place(data, dict(fanouts=self.sampler.fanouts, batch_size=self.batch_size,
                                       seeds_pool=self.train_ids, operator=self.op))
        supply = self.strategy.choose_route(BatchSetup(cfg, s, self.sampler, self.model, self.op, operator,
                                                       self.device, self.batches(1)))
        self.features, self.eval_features, self.dry_run = supply.features, supply.eval_features, supply.predictions
        if s.x is None and self.eval_sampler is None:  # features spread over hosts: no whole-graph pass
            self.eval_sampler = sampler_of(self.op, operator, [-1] * len(self.sampler.fanouts), cfg.training.seed)

    def batches(self, epoch: int) -> list:
        """The epoch's batches of seeds: a shuffle keyed by (seed, epoch), cut in batch-size runs
        (as ``shp`` draws them)."""
        return draw_batches(self.train_ids, self.batch_size, self.config.training.seed, epoch)

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.train_ids) / self.batch_size)

    def _mine(self, ids: np.ndarray) -> np.ndarray:
        """This rank's share of a batch."""
        return share(ids, self.strategy.world_size, self.strategy.rank)

    def _logits(self, sampler, seeds: np.ndarray, epoch: int, step: int) -> torch.Tensor:
        sample = sampler.sample(seeds, epoch, step)
        view = BlockView(sample, self.op, self.config.training.seed, self.device)
        view.set_epoch((epoch << 32) | step)  # one stream of dropout draws per step
        if not self.model.training:  # evaluation reads the features directly where this rank has them all
            x = self.rank_data.x
            return self.model(view, self.eval_features.load(sample.input_nodes) if x is None else
                              x[torch.from_numpy(sample.input_nodes).to(x.device)])
        self.sampled_edges += sample.sampled_entries()
        first = self.strategy.first_layer(self.model, view, sample, self.features)
        return self.model(view, first, start=1)

    def train_step(self) -> float:
        epoch = self.epoch
        self.model.train()
        total = 0.0
        for step, batch in enumerate(self.batches(epoch)):
            seeds = self._mine(batch)
            with self.forward_precision():
                logits = widened(self._logits(self.sampler, seeds, epoch, step))  # a float32 loss
            self.check_output(logits)
            targets = self.targets[torch.from_numpy(seeds).to(self.targets.device)]
            # the sum over this rank's share / the whole batch's divisor: the ranks add up to its mean
            loss = self.task.loss(logits, targets) / self._divisor(batch)
            value = self.update(loss, f"epoch {epoch}, step {step}", every_grad=True)
            total += value
        return total / self.steps_per_epoch

    def _divisor(self, batch: np.ndarray):
        """The loss's divisor for one batch: its size, or the sum of its rows' shares
        (``Task.count``: class weights, targets per row), the same on every rank."""
        return self.task.count(self.targets[torch.from_numpy(batch).to(self.targets.device)])

    @torch.no_grad()
    def evaluate(self) -> list:
        s = self.rank_data
        self.model.eval()
        evaluation = self._evaluation()
        masks = [m.cpu() for m in (s.train_mask, s.val_mask, s.test_mask)]
        targets = self.targets.cpu()

        def count(seeds: np.ndarray, logits: torch.Tensor) -> None:
            ids = torch.from_numpy(seeds)
            evaluation.add(logits.cpu(), targets[ids], [m[ids] for m in masks], ids)

        if self.eval_sampler is None:  # every rank computes all rows, counts its share
            with self.forward_precision():
                logits = widened(self.model(s.view, s.x))
            mine = self._mine(self.labelled)
            count(mine, logits[torch.from_numpy(mine).to(logits.device)])
        else:
            size = max(self.batch_size, DEFAULT_BATCH)  # no gradients kept: larger batches
            with self.eval_features.uncounted():  # an epoch's counts are its training steps'
                for step, start in enumerate(range(0, len(self.labelled), size)):
                    seeds = self._mine(self.labelled[start:start + size])
                    with self.forward_precision():
                        logits = widened(self._logits(self.eval_sampler, seeds, self.epoch, step))
                    count(seeds, logits)
        self.metrics = evaluation.result(self.strategy.all_reduce, self.split_sizes, self.strategy.metrics_comm())
        return self._selected(self.metrics)

    def run_epoch(self):
        return counted_epoch(self, super().run_epoch)


def counted_epoch(trainer, run_epoch):
    """``run_epoch()``'s result with the epoch's sampling and feature-read counts, summed over
    ranks, in its extra fields: those of a mini-batch ``trainer`` (its ``sampled_edges``,
    ``features``, ``steps_per_epoch``, ``batch_size`` and ``dry_run``)."""
    trainer.sampled_edges = 0
    trainer.features.take()
    result = run_epoch()
    reads = trainer.features.take()
    mine = dict(reads, sampled_edges=trainer.sampled_edges)
    everyone = trainer.strategy.epoch_counts(mine)

    def total(key):
        return sum(r[key] for r in everyone)

    result.extra.update(sampled_edges=total("sampled_edges"), steps=trainer.steps_per_epoch,
                        batch_size=trainer.batch_size, cache_hits=total("hits"), cache_misses=total("misses"),
                        load_bytes=total("load_bytes"), rank_load_bytes=[r["load_bytes"] for r in everyone],
                        rank_load_seconds=[r["load_seconds"] for r in everyone],
                        rank_cache_bytes=[r["cache_bytes"] for r in everyone])
    if "remote_bytes" in reads:  # features spread over hosts
        result.extra.update(remote_bytes=total("remote_bytes"),
                            rank_remote_bytes=[r["remote_bytes"] for r in everyone])
    if trainer.dry_run and trainer.epoch == 1:
        result.extra["dry_run"] = [p.as_dict() for p in trainer.dry_run]
    return result

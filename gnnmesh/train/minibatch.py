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
import torch.nn.functional as F

from ..errors import ConfigError
from ..models.base import SELF, GraphLayer, LayerStack
from ..view import OPERATORS
from ..sampling import BlockView, NeighborSampler, parse_fanouts
from .trainer import Trainer

DEFAULT_BATCH = 1024


def sampled_operator(model) -> str:
    """The one graph operator every layer of ``model`` aggregates with (what is sampled)."""
    if not isinstance(model, LayerStack):
        raise ConfigError("mini-batch training runs layer stacks (gcn, sage, gin, gat), not decoupled models")
    names = set()
    for layer in model.layers:
        if isinstance(layer, GraphLayer):
            names |= {t.op for t in layer.maths().terms if t.op != SELF}
        else:  # attention over in-edges and a self-loop
            names.add("loop")
    if len(names) != 1:
        raise ConfigError(f"mini-batch training samples one operator; this model's layers use {sorted(names)}")
    return names.pop()


class MiniBatchTrainer(Trainer):
    def __init__(self, config, data, strategy=None):
        super().__init__(config, data, strategy)
        cfg, s = self.config, self.shard
        self.split_sizes = [float(m.sum()) for m in (s.train_mask, s.val_mask, s.test_mask)]  # every rank has all
        self.train_ids = torch.nonzero(s.train_mask.cpu()).flatten().numpy()
        self.batch_size = cfg.batch_size or min(DEFAULT_BATCH, len(self.train_ids))
        if self.batch_size > len(self.train_ids):
            raise ConfigError(f"config field 'batch_size': {self.batch_size} is larger than the training set "
                              f"({len(self.train_ids)} nodes of dataset '{self.name}')")
        self.op = sampled_operator(self.model)
        operator = OPERATORS[self.op](s.view.adj)
        self.sampler = NeighborSampler(operator, parse_fanouts(cfg.fanouts), cfg.seed)
        # All neighbours (the default): one whole-graph pass computes every node's exact output,
        # which a block with every in-edge would too, at a fraction of batches' overlapping work.
        eval_fanouts = parse_fanouts(cfg.eval_fanouts, "eval_fanouts") if cfg.eval_fanouts else [-1]
        self.eval_sampler = NeighborSampler(operator, eval_fanouts, cfg.seed) if set(eval_fanouts) != {-1} else None
        self.labelled = torch.nonzero((s.train_mask | s.val_mask | s.test_mask).cpu()).flatten().numpy()
        self.sampled_edges = 0

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.train_ids) / self.batch_size)

    def _mine(self, ids: np.ndarray) -> np.ndarray:
        """This rank's share of a batch: a contiguous run, the runs' sizes differing by at most one."""
        n, world, rank = len(ids), self.strategy.world_size, self.strategy.rank
        return ids[(n * rank) // world:(n * (rank + 1)) // world]

    def _logits(self, sampler, seeds: np.ndarray, epoch: int, step: int) -> torch.Tensor:
        sample = sampler.sample(seeds, epoch, step)
        if self.model.training:
            self.sampled_edges += sample.sampled_entries()
        view = BlockView(sample, self.op, self.config.seed, self.device)
        view.set_epoch((epoch << 32) | step)  # one stream of dropout draws per step
        x = self.shard.x[torch.from_numpy(sample.input_nodes).to(self.shard.x.device)]
        return self.model(view, x)

    def train_step(self) -> float:
        s, epoch = self.shard, self.epoch
        self.model.train()
        order = np.random.default_rng([self.config.seed, epoch]).permutation(self.train_ids)
        total = 0.0
        for step in range(self.steps_per_epoch):
            batch = order[step * self.batch_size:(step + 1) * self.batch_size]
            seeds = self._mine(batch)
            logits = self._logits(self.sampler, seeds, epoch, step)
            labels = s.y[torch.from_numpy(seeds).to(s.y.device)]
            loss = F.cross_entropy(logits, labels, reduction="sum") / len(batch)
            value = self.update(loss, f"epoch {epoch}, step {step}", every_grad=True)
            total += value
        return total / self.steps_per_epoch

    @torch.no_grad()
    def evaluate(self) -> list:
        s = self.shard
        self.model.eval()
        hits = torch.zeros(3)
        masks = [m.cpu() for m in (s.train_mask, s.val_mask, s.test_mask)]

        def count(seeds: np.ndarray, pred: torch.Tensor) -> None:
            nonlocal hits
            ids = torch.from_numpy(seeds)
            correct = pred.cpu() == s.y.cpu()[ids]
            hits += torch.tensor([float(correct[m[ids]].sum()) for m in masks])

        if self.eval_sampler is None:  # every rank computes all rows, counts its share
            pred = self.model(s.view, s.x).argmax(dim=-1)
            mine = self._mine(self.labelled)
            count(mine, pred[torch.from_numpy(mine).to(pred.device)])
        else:
            size = max(self.batch_size, DEFAULT_BATCH)  # no gradients kept: larger batches
            for step, start in enumerate(range(0, len(self.labelled), size)):
                seeds = self._mine(self.labelled[start:start + size])
                count(seeds, self._logits(self.eval_sampler, seeds, self.epoch, step).argmax(dim=-1))
        hits = self.strategy.all_reduce(hits)
        return [h / max(n, 1.0) for h, n in zip(hits.tolist(), self.split_sizes)]

    def run_epoch(self):
        self.sampled_edges = 0
        result = super().run_epoch()
        sampled = self.strategy.all_reduce(torch.tensor([float(self.sampled_edges)]))
        result.extra.update(sampled_edges=int(sampled[0]), steps=self.steps_per_epoch, batch_size=self.batch_size)
        return result

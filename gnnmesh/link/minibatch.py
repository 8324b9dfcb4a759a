"""``LinkMiniBatchTrainer``: link prediction in sampled mini-batches (``--task link --minibatch``),
as PyG's ``LinkNeighborLoader`` trains it.

A batch is ``--edge-batch-size`` training positives (by default 1,024, or all of them if
fewer), in an order drawn from the seed and the epoch, each with the negatives the
full-graph trainer draws for it (keyed on the seed, the epoch, the positive and the draw).
Its seeds are the pairs' ends (sources, destinations and the negatives' ends), deduplicated;
their ``--fanouts`` neighbourhoods are sampled from the training graph alone (held-out edges
never reach the encoder), the encoder computes the seeds' rows and the decoder scores the
pairs. Evaluation scores the held-out pairs from every node's whole neighbourhood, in one
whole-graph pass, as mini-batch training of node tasks does by default.

Under a mini-batch strategy (``gdp``, ``nfp``, ``snp``, ``dnp``) each rank takes a share of
the batch's positives and samples its own pairs' ends. Sampling is keyed by node, so a seed's
row is the same on any rank and in any batch of seeds: every rank's loss, a sum over its
pairs divided by the batch's count, adds up to the single process's mini-batch step, and so
do the gradients, summed over ranks.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..errors import ConfigError
from ..ops.precision import widened
from ..parallel.minibatch import BatchSetup, share
from ..sampling import DEFAULT_BATCH, BlockView, sampled_graph, sampled_operator, sampler_of
from ..train.minibatch import counted_epoch
from .trainer import LinkTrainer, edge_batches


class LinkMiniBatchTrainer(LinkTrainer):
    """As ``LinkTrainer``, each optimizer step on the sampled neighbourhoods of a batch's pairs."""

    trains_minibatches = True

    def __init__(self, config, data, strategy=None, widths=None, model=None, task=None, split=None, original=None):
        super().__init__(config, data, strategy, widths=widths, model=model, task=task, split=split,
                         original=original)
        cfg, s = self.config, self.rank_data
        total = self.split.train.shape[1]
        self.batch_size = min(cfg.link.edge_batch_size or DEFAULT_BATCH, total)
        self.op = sampled_operator(self.model)
        operator = sampled_graph(self.op, s.view.adj)  # the training graph's: held-out edges are never sampled
        self.sampler = sampler_of(self.op, operator, cfg.minibatch.fanouts, cfg.training.seed)
        self.sampled_edges = 0
        ends = np.unique(self.split.train.numpy())
        self.strategy.place(self.split.graph, dict(fanouts=self.sampler.fanouts, batch_size=self.batch_size,
                                                   seeds_pool=ends, operator=self.op))
        first = [self._seeds(batch, 1)[0] for batch in self.batches(1)]
        supply = self.strategy.choose_route(BatchSetup(cfg, s, self.sampler, self.model, self.op, operator,
                                                       self.device, first))
        self.features, self.dry_run = supply.features, supply.predictions
        if s.x is None:
            raise ConfigError(f"config field 'task': --task link --minibatch scores held-out pairs in one "
                              f"whole-graph pass, which reads every feature row on every rank; these are spread "
                              f"over {self.strategy.hosts} hosts")

    def own_rows(self) -> torch.Tensor:
        """Every rank computes every row in evaluation; each serves a contiguous share of them."""
        return torch.from_numpy(share(np.arange(self.num_nodes), self.strategy.world_size, self.strategy.rank))

    def batches(self, epoch: int) -> list:
        """The epoch's batches of training positives (global positions)."""
        return edge_batches(self.split.train.shape[1], self.batch_size, self.config.training.seed, epoch)

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.split.train.shape[1] / self.batch_size)

    def _seeds(self, positives: torch.Tensor, epoch: int) -> tuple:
        """(the seeds, the distinct ends of the pairs of ``positives`` and their negatives,
        ascending; each end's place among them, in ``train_ends``' order)."""
        saved, self.epoch = self.epoch, epoch  # the negatives are drawn for ``epoch``
        try:
            ends = self.train_ends(positives).numpy()
        finally:
            self.epoch = saved
        seeds, back = np.unique(ends, return_inverse=True)
        return seeds, torch.from_numpy(back.reshape(-1))

    def train_step(self) -> float:
        epoch = self.epoch
        self.model.train()
        self.decoder.train()
        total = 0.0
        for step, batch in enumerate(self.batches(epoch)):
            mine = torch.from_numpy(share(batch.numpy(), self.strategy.world_size, self.strategy.rank))
            seeds, back = self._seeds(mine, epoch)
            with self.forward_precision():  # the encoder under --precision; its rows, the decoder and the loss float32
                z = widened(self._rows(seeds, epoch, step))
            self.check_output(z)
            loss = self.pairs_loss(z[back.to(z.device)], len(mine), len(batch), self.split.relation_of("train", mine))
            total += self.update(loss, f"epoch {epoch}, step {step}", every_grad=True)
        return total / self.steps_per_epoch

    def _rows(self, seeds: np.ndarray, epoch: int, step: int) -> torch.Tensor:
        """The encoder's rows of ``seeds``, from their sampled neighbourhoods (training mode)."""
        sample = self.sampler.sample(seeds, epoch, step)
        view = BlockView(sample, self.op, self.config.training.seed, self.device)
        view.set_epoch((epoch << 32) | step)  # one stream of dropout draws per step
        self.sampled_edges += sample.sampled_entries()
        first = self.strategy.first_layer(self.model, view, sample, self.features)
        return self.model(view, first, start=1)

    def _embeddings(self) -> torch.Tensor:
        """This rank's share of the rows (``own_rows``), from one whole-graph pass over the
        training graph, without gradients (in the model's current mode)."""
        s = self.rank_data
        with torch.no_grad(), self.forward_precision():
            z = self.model(s.view, s.x)
        self.check_output(z)
        return widened(z)[self.own_rows().to(z.device)]

    def run_epoch(self):
        return counted_epoch(self, super().run_epoch)

"""``LinkTrainer``: link prediction over the whole graph, exact on any number of ranks.

Each step the strategy runs the encoder (any model, its output read as node embeddings) over
the graph of training edges, and every rank ends with its own nodes' rows. A pair is scored
on the rank that owns its source, which fetches the rows its pairs read (``rows``); the
loss is a sum over the rank's pairs divided by the count of every rank's pairs, so the
ranks' losses and gradients add up to the single process's. The decoder's parameters are
replicated; their gradients are summed over ranks like the encoder's.

Negatives are drawn per training positive from a counter keyed on the seed, the epoch, the
positive and the draw (``counter``); evaluation ranks each held-out positive among its fixed
negatives, or among the negative pairs its split shares (OGB's collab and ddi, PyG), each
scored once on the rank owning its source. Neither depends on the strategy or the rank count.
"""

from __future__ import annotations

import copy
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from .. import checkpoint
from ..errors import ConfigError
from ..graph import Graph
from ..ops.precision import widened
from ..settings import parse_hits
from ..tasks import LinkTask
from ..train.trainer import Trainer, labelled
from . import counter, decoders
from .metrics import link_metrics, shared_link_metrics
from .rows import RowDirectory, fetch_rows
from .sources import load_split, source_of
from .split import BATCH_KEY, TRAIN_NEGATIVES_KEY, TRAIN_SAMPLE_KEY, LinkSplit

MARGIN = 1.0
SPLIT_NAMES = ("train", "valid", "test")


class LinkTrainer(Trainer):
    def __init__(self, config, data, strategy=None, widths=None, model=None, task=None,
                 split: Optional[LinkSplit] = None):
        """As ``Trainer``, for ``--task link`` on ``data``, a Graph: its edges are split by
        ``--link-split`` (fractions or a directory of split files, ``sources``; by default the
        split of an OGB link-prediction directory loaded as the dataset; ``split``: a
        split of the caller's instead, e.g. ``LinkSplit.from_pyg``) and the encoder runs on the
        training edges alone, less the ``--disjoint-train`` share."""
        if not isinstance(data, Graph):
            raise ConfigError("config field 'parts': --task link trains on the whole graph, loaded from a dataset")
        cfg = config.resolved()
        if split is None:
            source = source_of(data, cfg.link.link_split, "link_split" in cfg.link.given())
            split = load_split(data, source, cfg.training.seed, cfg.link.eval_negatives, cfg.link.disjoint_train)
        self.split = split
        width = widths.classes if widths is not None else embedding_width(cfg)
        super().__init__(config, labelled(split.graph, width), strategy, widths=widths, model=model,
                         task=task or LinkTask(parse_hits(cfg.link.hits)))

    def _task(self, data, given) -> tuple:
        self.output_width = self.num_classes_hint = embedding_width(self.config)
        return given, None

    def _setup_task(self) -> None:
        cfg = self.config
        s = self.rank_data
        self.directory = RowDirectory(s.row_ids(), self.num_nodes, getattr(self.strategy, "comm", None))
        torch.manual_seed(cfg.training.seed + 1)  # the decoder's weights: the same on every rank
        self.decoder = decoders.build(cfg.link.decoder, self.num_classes, cfg.link.link_loss == "bce").to(self.device)
        self.best_decoder = None
        self.split_sizes = [float(self.split.pairs(k).shape[1]) for k in SPLIT_NAMES]
        # this rank's pairs: those whose source it owns (global positions in each split)
        self.mine = {k: torch.nonzero(self.directory.mine[self.split.pairs(k)[0]]).flatten() for k in SPLIT_NAMES}
        self.train_sample = self._train_sample()

    def _train_sample(self) -> torch.Tensor:
        """The training positives the train metrics rank (as many as the validation split
        holds, at least one; chosen by the seed): ranking every training edge among its
        negatives each epoch would cost more than the training step."""
        total = self.split.train.shape[1]
        size = min(total, max(self.split.valid.shape[1], self.split.test.shape[1], 1))
        order = np.argsort(counter.uniform(self.config.training.seed, TRAIN_SAMPLE_KEY, np.arange(total)),
                           kind="stable")
        return torch.from_numpy(np.sort(order[:size]))

    # -- parameters --------------------------------------------------------------------------------
    def trained_parameters(self) -> list:
        return list(self.model.parameters()) + list(self.decoder.parameters())

    def sync_gradients(self) -> None:
        super().sync_gradients()
        grads = [p.grad for p in self.decoder.parameters() if p.grad is not None]
        if grads and self.strategy.world_size > 1:  # each rank's pairs are its own: their sum is the gradient
            flat = self.strategy.all_reduce(torch.cat([g.flatten() for g in grads]))
            start = 0
            for g in grads:
                g.copy_(flat[start:start + g.numel()].view_as(g))
                start += g.numel()

    # -- one epoch ---------------------------------------------------------------------------------
    def check_output(self, logits: torch.Tensor) -> None:
        if logits.dim() != 2 or logits.shape[1] != self.num_classes:
            raise ConfigError(f"config field 'model' ({self.config.model.name}): it gives outputs of shape "
                              f"{list(logits.shape)}; --task link reads rows of {self.num_classes} (the embedding "
                              f"width: --embedding-width, by default --hidden)")

    def train_step(self) -> float:
        s = self.rank_data
        self.model.train()
        self.decoder.train()
        losses = []
        batches = self._batches()
        for b, batch in enumerate(batches):
            # each step's dropout masks are drawn for the step (one per epoch without batches),
            # afresh at its start: a strategy that passes twice draws the same masks both times
            s.view.set_epoch((self.epoch - 1) * len(batches) + b + 1)
            if self.strategy.outputs_at_once:
                with self.forward_precision():  # the encoder under --precision; its rows, the decoder and the loss float32
                    z = widened(self.strategy.forward(self.model, s.view, s.x))
                self.check_output(z)
                loss = self._loss(z, batch)
            else:
                loss = self._loss_in_two_passes(batch)
            losses.append(self.update(loss, f"epoch {self.epoch}", every_grad=True))
        return float(np.mean(losses))

    def _loss_in_two_passes(self, batch: torch.Tensor) -> torch.Tensor:
        """The batch's loss under a strategy whose rows come a chunk at a time (out of core):
        a first pass gives this rank's embeddings without a graph of their computation, and
        the loss's gradient G with respect to them (and the decoder's); the strategy's own
        training pass then takes, chunk by chunk, the loss sum(rows * G[rows]), whose gradient
        reaches the encoder as the true loss's does (the chain rule). Dropout masks are drawn
        from the seed and the epoch, so both passes run the same network. The tensor returned
        has the loss's value and, backward, gives every parameter its gradient."""
        s = self.rank_data
        z = self._embeddings().requires_grad_()
        loss = self._loss(z, batch)
        params = [p for p in self.decoder.parameters() if p.requires_grad]
        grads = torch.autograd.grad(loss, [z] + params, allow_unused=True)
        g = grads[0]
        with self.forward_precision():
            surrogate = self.strategy.train_loss(self.model, s.view, s.x,
                                                 lambda logits, rows: (widened(logits) * g[rows]).sum())
        injected = sum(((p * d).sum() for p, d in zip(params, grads[1:]) if d is not None), torch.zeros(()))
        return loss.detach() + (surrogate - surrogate.detach()) + (injected - injected.detach())

    def _embeddings(self) -> torch.Tensor:
        """This rank's output rows, assembled from the strategy's chunks, without gradients
        (in the model's current mode)."""
        s = self.rank_data
        out = None

        def add(logits, rows):
            nonlocal out
            self.check_output(logits)
            if out is None:
                out = logits.new_empty((len(s.row_ids()), logits.shape[1]))
            out[rows] = logits

        with torch.no_grad(), self.forward_precision():
            self.strategy.evaluate_rows(self.model, s.view, s.x, add)
        return widened(out) if out is not None else torch.zeros(0, self.num_classes, device=self.device)

    def _batches(self) -> list:
        """Each optimizer step's training positives (global positions): all of them, or
        ``--edge-batch-size`` at a time in an order drawn for the epoch."""
        total = self.split.train.shape[1]
        size = self.config.link.edge_batch_size
        if not size or size >= total:
            return [torch.arange(total)]
        order = np.argsort(counter.uniform(self.config.training.seed, BATCH_KEY, self.epoch, np.arange(total)),
                           kind="stable")
        return [torch.from_numpy(np.sort(order[i:i + size])) for i in range(0, total, size)]

    def _loss(self, z: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        """This rank's part of the batch's loss: the sum over its positives and their negatives,
        divided by the batch's count of terms over every rank."""
        cfg = self.config.link
        mine = batch[self.directory.mine[self.split.train[0, batch]]]
        src, dst = self.split.train[:, mine]
        k, n = cfg.negatives, self.num_nodes
        draws = (self.config.training.seed, TRAIN_NEGATIVES_KEY, self.epoch, mine.numpy()[:, None], np.arange(k)[None])
        neg_dst = torch.from_numpy(counter.below(n, *draws, 1))
        neg_src = (torch.from_numpy(counter.below(n, *draws, 0)) if cfg.corrupt == "both"
                   else src[:, None].expand(-1, k))
        rows = fetch_rows(z, self.directory.plan(torch.cat([src, dst, neg_src.reshape(-1), neg_dst.reshape(-1)])))
        m = len(src)
        zs, zd, zns, znd = rows[:m], rows[m:2 * m], rows[2 * m:2 * m + m * k], rows[2 * m + m * k:]
        pos = self.decoder(zs, zd)
        neg = self.decoder(zns, znd).view(m, k)
        terms = len(batch)
        if cfg.link_loss == "bce":
            return (F.softplus(-pos).sum() + F.softplus(neg).sum()) / (terms * (1 + k))
        gap = pos[:, None] - neg
        if cfg.link_loss == "bpr":
            return F.softplus(-gap).sum() / (terms * k)
        return torch.relu(MARGIN - gap).sum() / (terms * k)

    # -- evaluation --------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> list:
        self.model.eval()
        self.decoder.eval()
        z = self._embeddings()
        self.metrics = [self._split_metrics(z, k) for k in SPLIT_NAMES]
        return self._selected(self.metrics)

    def _split_metrics(self, z: torch.Tensor, split: str) -> dict:
        """The metrics of ``split``, from every rank's scores of its pairs (each rank writes its
        pairs' scores at their places in a zero table; the sum over ranks is the whole table)."""
        pairs, negatives = self._evaluated(split)
        chosen = self._chosen(split)
        mine = chosen[self.directory.mine[pairs[0, chosen]]]
        k = negatives.shape[1]
        src, dst, neg = pairs[0, mine], pairs[1, mine], negatives[mine]
        m = len(src)
        rows = fetch_rows(z, self.directory.plan(torch.cat([src, dst, neg.reshape(-1)])))
        zs = rows[:m]
        pos = self.decoder(zs, rows[m:2 * m])
        negs = self.decoder(zs.repeat_interleave(k, 0), rows[2 * m:]).view(m, k)
        at = torch.searchsorted(chosen, mine)  # their rows in the table of the chosen pairs
        table = torch.zeros(len(chosen), 1 + k, dtype=torch.float64)
        table[at, 0] = pos.double().cpu()
        table[at, 1:] = negs.double().cpu()
        table = self.strategy.all_reduce(table)
        shared = self.split.negative_pairs(split) if split != "train" else None
        if shared is not None:
            return shared_link_metrics(table[:, 0].numpy(), self._shared_scores(z, shared), self.task.hits)
        return link_metrics(table[:, 0].numpy(), table[:, 1:].numpy(), self.task.hits)

    def _shared_scores(self, z: torch.Tensor, pairs: torch.Tensor) -> np.ndarray:
        """The scores of negative ``pairs`` [2, E'] shared by a split's positives, each scored on
        the rank owning its source and summed over ranks into one table."""
        mine = torch.nonzero(self.directory.mine[pairs[0]]).flatten()
        m = len(mine)
        rows = fetch_rows(z, self.directory.plan(torch.cat([pairs[0, mine], pairs[1, mine]])))
        table = torch.zeros(pairs.shape[1], dtype=torch.float64)
        table[mine] = self.decoder(rows[:m], rows[m:]).double().cpu()
        return self.strategy.all_reduce(table).numpy()

    def _evaluated(self, split: str) -> tuple:
        """(positives, their fixed negatives) of ``split``; the training positives are ranked
        among negatives drawn as the validation ones are."""
        if split != "train":
            return self.split.pairs(split), self.split.negatives(split)
        from .split import fixed_negatives
        if not hasattr(self, "_train_negatives"):
            self._train_negatives = fixed_negatives(self.split.train, self.num_nodes, self.config.training.seed,
                                                    len(SPLIT_NAMES), self.config.link.eval_negatives)
        return self.split.train, self._train_negatives

    def _chosen(self, split: str) -> torch.Tensor:
        return self.train_sample if split == "train" else torch.arange(self.split.pairs(split).shape[1])

    # -- selection and checkpoints -----------------------------------------------------------------
    def _select(self, accs):
        before = self.best["epoch"]
        super()._select(accs)
        if self.best["epoch"] != before or self.best_decoder is None:
            self.best_decoder = copy.deepcopy(self.decoder.state_dict())

    def fit(self, *args, **kwargs):
        summary = super().fit(*args, **kwargs)
        if summary.stopped and self.best_decoder is not None:
            self.decoder.load_state_dict(self.best_decoder)
        return summary

    def state(self, path=None) -> dict:
        state = super().state(path)
        state["decoder"] = {"last": self.decoder.state_dict(), "best": self.best_decoder}
        return state

    def restore(self, state: dict) -> None:
        super().restore(state)
        saved = checkpoint.decoder(state)
        if saved is None:
            raise ConfigError("the checkpoint holds no link decoder (it is not a --task link run's)")
        self.decoder.load_state_dict(saved["last"])
        self.best_decoder = saved["best"]


def embedding_width(config) -> int:
    """The encoder's output width under --task link: --embedding-width, else its hidden width."""
    return int(config.link.embedding_width or config.model.hidden or 64)

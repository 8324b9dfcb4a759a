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

import contextlib
import copy
from dataclasses import fields
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from .. import checkpoint
from ..errors import ConfigError
from ..graph import Graph
from ..ops.precision import widened
from ..settings import LinkSection, flag_name, parse_hits
from ..tasks import LinkTask
from ..train.trainer import Trainer, labelled
from . import counter, decoders, full_ranking, ranking, renumber, typed
from .chunks import pair_chunks
from .metrics import ranks_link_metrics, ranks_shared_link_metrics
from .rows import RowDirectory, fetch_rows, fetch_table, score_rows
from .sources import load_split, source_of
from .split import BATCH_KEY, TRAIN_NEGATIVES_KEY, TRAIN_SAMPLE_KEY, LinkSplit, fixed_negatives

MARGIN = 1.0
SPLIT_NAMES = ("train", "valid", "test")


class LinkTrainer(Trainer):
    def __init__(self, config, data, strategy=None, widths=None, model=None, task=None,
                 split: Optional[LinkSplit] = None, original=None):
        """As ``Trainer``, for ``--task link`` on ``data``, a Graph: its edges are split by
        ``--link-split`` (fractions or a directory of split files, ``sources``; by default the
        split of an OGB link-prediction directory loaded as the dataset; ``split``: a
        split of the caller's instead, e.g. ``LinkSplit.from_pyg``) and the encoder runs on the
        training edges alone, less the ``--disjoint-train`` share. ``original``: where ``data``
        was renumbered (``--reorder``), the user's id of each of its nodes: the split is then
        drawn as on the user's numbering (``renumber``), and pairs and top-K lists are taken
        and given in the user's ids."""
        if not isinstance(data, Graph):
            raise ConfigError("config field 'parts': --task link trains on the whole graph, loaded from a dataset")
        cfg = config.resolved()
        self.original = None if original is None else np.asarray(original, dtype=np.int64)
        self.node_of = None if original is None else torch.from_numpy(renumber.inverse(original))
        if cfg.link.link_relation is not None:
            split, config = typed.split_for(config, data, split, original)
            cfg = config.resolved()
        if split is None:
            users = data if original is None else renumber.user_graph(data, original)
            source = source_of(users, cfg.link.link_split, "link_split" in cfg.link.given())
            split = load_split(users, source, cfg.training.seed, cfg.link.eval_negatives, cfg.link.disjoint_train)
            split = split if original is None else renumber.renumbered(split, original)
        self.split = split
        if cfg.link.rank_all:
            full_ranking.check_hits(parse_hits(cfg.link.hits), split.graph.num_nodes)
        width = widths.classes if widths is not None else embedding_width(cfg)
        super().__init__(config, labelled(split.graph, width), strategy, widths=widths, model=model,
                         task=task or LinkTask(parse_hits(cfg.link.hits)))

    def _task(self, data, given) -> tuple:
        self.output_width = self.num_classes_hint = embedding_width(self.config)
        return given, None

    def _setup_task(self) -> None:
        cfg = self.config
        self.directory = RowDirectory(self.own_rows(), self.num_nodes, getattr(self.strategy, "comm", None))
        torch.manual_seed(cfg.training.seed + 1)  # the decoder's weights: the same on every rank
        self.decoder = decoders.build(cfg.link.decoder, self.num_classes, cfg.link.link_loss == "bce",
                                      max(len(self.split.relations), 1)).to(self.device)
        self.ends = typed.Ends.of(self.split.graph, self.split.relations) if self.split.relations else None
        self.best_decoder = None
        self.split_sizes = [float(self.split.pairs(k).shape[1]) for k in SPLIT_NAMES]
        # this rank's pairs: those whose source it owns (global positions in each split)
        self.mine = {k: torch.nonzero(self.directory.mine[self.split.pairs(k)[0]]).flatten() for k in SPLIT_NAMES}
        self.train_sample = self._train_sample()
        # for the sample alone: a table for every training positive would hold eval_negatives
        # ids each, gigabytes on a large graph, of which the sample's rows are all ever read
        if self.ends is None:
            self.train_negatives = fixed_negatives(self.split.train, self.num_nodes, cfg.training.seed,
                                                   len(SPLIT_NAMES), cfg.link.eval_negatives, self.train_sample)
        else:
            self.train_negatives = typed.typed_negatives(self.ends, self.split.train_relation, cfg.training.seed,
                                                         len(SPLIT_NAMES), cfg.link.eval_negatives, self.train_sample)

    def own_rows(self) -> torch.Tensor:
        """The nodes whose rows this rank serves to the pairs that read them (disjoint across
        ranks, covering the graph): its strategy's output rows."""
        return self.rank_data.row_ids()

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
        return edge_batches(self.split.train.shape[1], self.config.link.edge_batch_size, self.config.training.seed,
                            self.epoch)

    def _loss(self, z: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        """This rank's part of the batch's loss: the sum over its positives and their negatives,
        divided by the batch's count of terms over every rank."""
        mine = batch[self.directory.mine[self.split.train[0, batch]]]
        table, at = fetch_table(z, self.directory, self.train_ends(mine))
        return self.table_loss(table, at, len(mine), len(batch), self.split.relation_of("train", mine))

    def train_ends(self, positives: torch.Tensor) -> torch.Tensor:
        """The nodes whose rows the loss reads for the training ``positives`` (global positions):
        their sources, their destinations, then their negatives' sources and destinations
        ([m, K] each, row by row). A negative is drawn from the seed, the epoch, the positive
        and the draw, whichever rank or batch scores it; on a typed graph, among the ends' types
        of the positive's relation (``typed``)."""
        cfg = self.config.link
        src, dst = self.split.train[:, positives]
        k = cfg.negatives
        draws = (self.config.training.seed, TRAIN_NEGATIVES_KEY, self.epoch, positives.numpy()[:, None],
                 np.arange(k)[None])
        neg_dst = torch.from_numpy(self._negative_ends("dst", positives, draws, 1))
        neg_src = (torch.from_numpy(self._negative_ends("src", positives, draws, 0)) if cfg.corrupt == "both"
                   else src[:, None].expand(-1, k))
        return torch.cat([src, dst, neg_src.reshape(-1), neg_dst.reshape(-1)])

    def _negative_ends(self, end: str, positives: torch.Tensor, draws: tuple, which: int) -> np.ndarray:
        """The negatives' sources (``end`` "src", ``which`` 0) or destinations ("dst", 1), keyed
        on ``draws``: any node, or on a typed graph a node of that end's type of each positive's
        relation."""
        if self.ends is None:
            return counter.below(self.num_nodes, *draws, which)
        return self.ends.draw(end, self.split.train_relation[positives].numpy(), *draws, which)

    def pairs_loss(self, rows: torch.Tensor, m: int, terms: int, relations=None) -> torch.Tensor:
        """The loss of ``m`` positives and their negatives from the rows of their ends (in
        ``train_ends``' order), summed and divided by ``terms``, the batch's positives on every
        rank. ``relations``: a typed graph's relation of each positive (its negatives' too)."""
        return self.table_loss(rows, torch.arange(len(rows), device=rows.device), m, terms, relations)

    def table_loss(self, table: torch.Tensor, at: torch.Tensor, m: int, terms: int, relations=None) -> torch.Tensor:
        """As ``pairs_loss``, the rows of the ends being ``table[at]``: each pair is scored from
        the table by its ends' places (``rows.score_rows``; the dot decoder copies no row per
        pair, and a negative's source under --corrupt destination is its positive's row)."""
        cfg = self.config.link
        k = cfg.negatives
        at_src, at_dst, at_neg_src, at_neg_dst = at.split([m, m, m * k, m * k])
        relation = None if relations is None else torch.cat([relations, relations.repeat_interleave(k)])
        scores = score_rows(self.decoder, table, torch.cat([at_src, at_neg_src]), torch.cat([at_dst, at_neg_dst]),
                            relation)
        pos, neg = scores[:m], scores[m:].view(m, k)
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
        """The metrics of ``split``: each rank scores the pairs whose source it owns, a chunk of
        pairs at a time (``chunks``), and the metrics come from every rank's scores without any
        rank holding them all (``ranks_link_metrics``: sums over positives, and a distributed
        sort for the AUC and AP). Under ``--rank-all`` a held-out split's MRR and Hits@K rank
        each positive against every node instead (``full_ranking``)."""
        pairs, negatives = self._evaluated(split)
        chosen = self._chosen(split)
        owners = self.directory.owner[pairs[0, chosen]]
        mine = chosen[owners == self.directory.rank]
        k = negatives.shape[1]
        positive, negative = torch.zeros(len(mine), dtype=torch.float64), torch.zeros(len(mine), k, dtype=torch.float64)
        for part in pair_chunks(mine, owners, 2 + k):
            at = torch.searchsorted(chosen, part)  # their rows among the chosen pairs
            where = torch.searchsorted(mine, part)  # and among this rank's
            src, dst, neg = pairs[0, part], pairs[1, part], negatives[at]
            m = len(src)
            rows = fetch_rows(z, self.directory.plan(torch.cat([src, dst, neg.reshape(-1)])))
            zs = rows[:m]
            relation = self.split.relation_of(split, part)
            positive[where] = decoders.score(self.decoder, zs, rows[m:2 * m], relation).double().cpu()
            negative[where] = decoders.score(self.decoder, zs.repeat_interleave(k, 0), rows[2 * m:],
                                             None if relation is None else relation.repeat_interleave(k)
                                             ).view(m, k).double().cpu()
        shared = self.split.negative_pairs(split) if split != "train" else None
        with self._metrics_phase():
            if shared is not None:
                out = ranks_shared_link_metrics(positive.numpy(), self._shared_scores(z, shared), self.task.hits,
                                                self.directory.comm)
            else:
                out = ranks_link_metrics(positive.numpy(), negative.numpy(), self.task.hits, self.directory.comm)
        if self.config.link.rank_all and split != "train":
            out.update(self._full_ranking().metrics(self.decoder, z, split, self.task.hits,
                                                    self.strategy.all_reduce))
        return out

    def _full_ranking(self) -> full_ranking.FullRanking:
        """The held-out positives this rank ranks under ``--rank-all`` and the candidates each
        leaves out, gathered at the first evaluation."""
        if getattr(self, "_ranked_all", None) is None:
            self._ranked_all = full_ranking.FullRanking(self.split, self.directory)
        return self._ranked_all

    def _shared_scores(self, z: torch.Tensor, pairs: torch.Tensor) -> np.ndarray:
        """This rank's scores of the negative ``pairs`` [2, E'] shared by a split's positives:
        those whose source it owns, scored a chunk at a time."""
        owners = self.directory.owner[pairs[0]]
        mine = torch.nonzero(owners == self.directory.rank).flatten()
        scores = torch.zeros(len(mine), dtype=torch.float64)
        for part in pair_chunks(mine, owners, 2):
            m = len(part)
            rows = fetch_rows(z, self.directory.plan(torch.cat([pairs[0, part], pairs[1, part]])))
            scores[torch.searchsorted(mine, part)] = self.decoder(rows[:m], rows[m:]).double().cpu()
        return scores.numpy()

    def _metrics_phase(self):
        """The metrics' traffic counted as ``metrics`` (as ``strategy.all_reduce`` counts it)."""
        comm = self.directory.comm
        return comm.phase("metrics") if comm is not None else contextlib.nullcontext()

    def _evaluated(self, split: str) -> tuple:
        """(positives, the fixed negatives of those ``_chosen``) of ``split``; the training
        positives are ranked among negatives drawn as the validation ones are."""
        if split != "train":
            return self.split.pairs(split), self.split.negatives(split)
        return self.split.train, self.train_negatives

    def _chosen(self, split: str) -> torch.Tensor:
        return self.train_sample if split == "train" else torch.arange(self.split.pairs(split).shape[1])

    # -- using the trained model -------------------------------------------------------------------
    @torch.no_grad()
    def embeddings(self) -> torch.Tensor:
        """This rank's rows of the node embeddings (the encoder's output, ``rank_data.row_ids()``),
        in eval mode: what evaluation scores pairs with."""
        training = self.model.training
        self.model.eval()
        try:
            return self._embeddings()
        finally:
            self.model.train(training)

    def predict(self, output: str = "embeddings", layer: Optional[int] = None, nodes="all",
                original=None) -> tuple:
        """As ``Trainer.predict``; a link model's node outputs are its embeddings: by default the
        encoder's output, what the decoder reads (``layer``: a hidden layer's). Logits,
        probabilities and labels are refused."""
        return super().predict(output, layer, nodes, self.original if original is None else original)

    def node_outputs(self, out) -> torch.Tensor:
        if out.what == "embeddings" and out.layer is None:
            self.task.check_output(out.what)
            return self.embeddings()
        return super().node_outputs(out)

    def output_layer(self, output: str, layer: Optional[int]) -> Optional[int]:
        """None for the encoder's output (the embeddings the decoder reads)."""
        return layer

    @torch.no_grad()
    def score_pairs(self, pairs, relation: Optional[str] = None) -> tuple:
        """``(places, scores)``: the decoder's scores of the pairs whose source this rank owns,
        of ``pairs`` ([P, 2] global node ids, the same on every rank), and their places in it.
        ``relation``: on a typed graph, the trained relation the pairs are scored as (default:
        the one the model was trained on). Every rank calls it together."""
        pairs = torch.as_tensor(np.asarray(pairs, dtype=np.int64)).reshape(-1, 2)
        if len(pairs) and (int(pairs.min()) < 0 or int(pairs.max()) >= self.num_nodes):
            raise ConfigError(f"pairs: node ids must be 0 to {self.num_nodes - 1}")
        r = self._relation(relation)
        if r is not None:
            self.ends.check_pairs(pairs.numpy(), r, self.split.relations[r], "pairs")
        pairs = self._nodes(pairs)
        self.decoder.eval()
        z = self.embeddings()
        places = torch.nonzero(self.directory.mine[pairs[:, 0]]).flatten()
        src, dst = pairs[places, 0], pairs[places, 1]
        rows = fetch_rows(z, self.directory.plan(torch.cat([src, dst])))
        scores = decoders.score(self.decoder, rows[:len(src)], rows[len(src):], r)
        return places.numpy(), scores.float().cpu().numpy()

    def _relation(self, relation: Optional[str]) -> Optional[int]:
        """The place among the trained relations of ``relation`` (None: an untyped model's pairs,
        or the one relation a typed model was trained on); a ConfigError where it names none."""
        if not self.split.relations:
            if relation is not None:
                raise ConfigError(f"--link-relation {relation}: the model was trained on a graph without relations")
            return None
        return typed.relation_index(self.split.relations, relation)

    @torch.no_grad()
    def top_k(self, k: int, queries=None, exclude_known: bool = False, relation: Optional[str] = None) -> tuple:
        """``(queries, candidates, scores)``: for each query node this rank owns (of ``queries``,
        global ids; default every node), its ``k`` best candidates among every node, best
        first, ties by the lower id, and their scores ([q, k] each). ``exclude_known``: leave
        out the query and its known positives (the training edges). ``relation``: on a typed
        graph, the trained relation ranked (as ``score_pairs``): its queries are of its source
        type (default: all of them), its candidates of its destination type, its known
        positives its own training edges. Every rank calls it together; candidates are scored
        a block of ids at a time (``ranking``)."""
        n = self.num_nodes
        r = self._relation(relation)
        first, end = 0, n
        if r is not None:
            first, end = int(self.ends.dst_lo[r]), int(self.ends.dst_lo[r] + self.ends.dst_count[r])
        if queries is None and r is not None:
            queries = np.arange(self.ends.src_lo[r], self.ends.src_lo[r] + self.ends.src_count[r])
        queries = np.arange(n) if queries is None else np.unique(np.asarray(queries, dtype=np.int64))
        if len(queries) and (queries[0] < 0 or queries[-1] >= n):
            raise ConfigError(f"queries: node ids must be 0 to {n - 1}")
        if r is not None:
            self.ends.check_sources(queries, r, self.split.relations[r], "queries")
            known = typed.known_positives(self.split, r) if exclude_known else None
            ranking.check_enough(k, queries, end - first, known)  # the candidates: the destination type
        else:
            known = ranking.known_positives(self.split.graph, self.split.train) if exclude_known else None
            if known is not None and self.original is not None:
                known = renumber.known_in_user_ids(known, self.original)
            ranking.check_enough(k, queries, n, known)
        self.decoder.eval()
        z = self.embeddings()
        owners = self.directory.owner[self._nodes(torch.from_numpy(queries))]
        mine = queries[(owners == self.directory.rank).numpy()]
        zq = z[self.directory.place[self._nodes(torch.from_numpy(mine))].to(z.device)]
        mask = ranking.KnownMask(mine, known) if known is not None else None
        largest = int(torch.bincount(owners, minlength=self.strategy.world_size).max()) if len(queries) else 0
        best = ranking.RunningTopK(len(mine), k)
        # the blocks go over the user's ids: ties go to the lower
        decoder = self.decoder if r is None else decoders.ForRelation(self.decoder, r)
        for ids, scores in ranking.scored_blocks(decoder, z, self.directory, zq, largest, end, mask,
                                                 node_of=self._nodes, first=first):
            best.add(scores, ids)
        return mine, best.ids.numpy(), best.scores.numpy()

    def _nodes(self, ids: torch.Tensor) -> torch.Tensor:
        """The graph's nodes of the user's ``ids`` (themselves unless it was renumbered)."""
        return ids if self.node_of is None else self.node_of[ids]

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

    def state(self, path=None, embedded: Optional[dict] = None) -> dict:
        state = super().state(path, embedded)
        state["decoder"] = {"last": self.decoder.state_dict(), "best": self.best_decoder}
        return state

    @classmethod
    def settings_of_checkpoint(cls, saved) -> dict:
        """The link settings a checkpoint was trained with: the split (recomputed from them, so
        the encoder runs on the training edges it learned from) and the decoder."""
        return {flag_name(f): saved.get(flag_name(f)) for f in fields(LinkSection)}

    def load_task_weights(self, state: dict, weights: str, where: str) -> None:
        """The decoder of the checkpoint ``state``: its best epoch's (where one was chosen) or its last."""
        saved = checkpoint.decoder(state)
        if saved is None:
            raise ConfigError(f"{where}: it holds no link decoder (it is not a --task link run's)")
        self.decoder.load_state_dict(saved["best"] if weights == "best" and saved["best"] is not None
                                     else saved["last"])

    def restore(self, state: dict) -> None:
        super().restore(state)
        saved = checkpoint.decoder(state)
        if saved is None:
            raise ConfigError("the checkpoint holds no link decoder (it is not a --task link run's)")
        self.decoder.load_state_dict(saved["last"])
        self.best_decoder = saved["best"]


def edge_batches(total: int, size: Optional[int], seed: int, epoch: int) -> list:
    """The training positives (global positions of ``total``) of each optimizer step of
    ``epoch``: all of them, or ``size`` at a time in an order drawn from the seed and the epoch."""
    if not size or size >= total:
        return [torch.arange(total)]
    order = np.argsort(counter.uniform(seed, BATCH_KEY, epoch, np.arange(total)), kind="stable")
    return [torch.from_numpy(np.sort(order[i:i + size])) for i in range(0, total, size)]


def embedding_width(config) -> int:
    """The encoder's output width under --task link: --embedding-width, else its hidden width."""
    return int(config.link.embedding_width or config.model.hidden or 64)

"""Which edges the encoder passes messages over, which it learns to score, and which are
held out to validate and test it (``LinkSplit``).

``split_edges`` holds out a fraction of a graph's edges as a function of the seed and of
each edge alone: an edge's place is its rank by a counter-based draw keyed on its two ends
(``counter``), so every strategy and rank count sees the same split. Both directions of an
undirected edge are one edge, placed together. Held-out edges never reach the encoder: the
graph it runs on (``LinkSplit.graph``) holds the training edges alone.

The pairs are [2, E] tensors of (source, destination) ids, PyG's convention; each held-out
positive comes with K destinations that are not its own (``*_negatives``, [E, K]): fixed
once per split from the seed, as OGB's citation2 gives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ..errors import ConfigError
from ..graph import Adjacency, Graph
from . import counter

# Keys that keep the draws of different purposes apart (counter.words' second key).
SPLIT_KEY, EVAL_NEGATIVES_KEY, TRAIN_NEGATIVES_KEY, BATCH_KEY, TRAIN_SAMPLE_KEY = 1, 2, 3, 4, 5
HELD_OUT = ("valid", "test")


@dataclass
class LinkSplit:
    """The edges of a link-prediction run. ``graph``: what the encoder runs on (the training
    edges, both ways where undirected, with the original vertex data); ``train``: the pairs
    the loss scores as positives; ``valid``/``test``: held-out positives, each with its row of
    ``valid_negatives``/``test_negatives`` (destination ids). A split whose negatives are
    shared by all its positives (OGB's collab and ddi, PyG's RandomLinkSplit) holds them as
    pairs in ``valid_negative_pairs``/``test_negative_pairs`` ([2, E']), its rows of
    ``*_negatives`` then empty ([E, 0]): each positive is ranked against every one of them."""

    graph: Graph
    train: torch.Tensor
    valid: torch.Tensor
    test: torch.Tensor
    valid_negatives: torch.Tensor
    test_negatives: torch.Tensor
    valid_negative_pairs: Optional[torch.Tensor] = None
    test_negative_pairs: Optional[torch.Tensor] = None
    # a typed graph's (``typed``, --link-relation): the relations scored, the decoder's relation
    # i being relations[i], and each positive's relation among them; none on an untyped graph
    relations: tuple = ()
    train_relation: Optional[torch.Tensor] = None
    valid_relation: Optional[torch.Tensor] = None
    test_relation: Optional[torch.Tensor] = None

    @classmethod
    def from_pyg(cls, data, graph: Optional[Graph] = None) -> "LinkSplit":
        """The split of PyG's ``RandomLinkSplit``: ``data`` is its (train_data, val_data,
        test_data); ``graph`` gives the vertex data (default: train_data's). See
        ``from_pyg``."""
        train_data, val_data, test_data = data
        return from_pyg(train_data, val_data, test_data, graph)

    def pairs(self, split: str) -> torch.Tensor:
        return getattr(self, split)

    def negatives(self, split: str) -> torch.Tensor:
        return getattr(self, f"{split}_negatives")

    def negative_pairs(self, split: str) -> Optional[torch.Tensor]:
        """The negatives every positive of ``split`` is ranked against, as pairs, or None
        where each positive has its own (``negatives``)."""
        return getattr(self, f"{split}_negative_pairs", None)

    def relation_of(self, split: str, places: torch.Tensor) -> Optional[torch.Tensor]:
        """The relation (its place in ``relations``) of the positives of ``split`` at ``places``;
        None on an untyped graph."""
        relation = getattr(self, f"{split}_relation")
        return None if relation is None else relation[places]

    def describe(self) -> str:
        shared = self.valid_negative_pairs
        each = (f"{self.valid_negatives.shape[1]} negatives each held out" if shared is None else
                f"{shared.shape[1]:,} validation negatives shared")
        of = f" of {', '.join(self.relations)}" if self.relations else ""
        return (f"{self.train.shape[1]:,} training, {self.valid.shape[1]:,} validation and "
                f"{self.test.shape[1]:,} test edges{of} ({each})")


def parse_fractions(text: str, name: str = "link_split") -> dict:
    """``'valid=0.05,test=0.10'`` -> {"valid": 0.05, "test": 0.1}; a ConfigError naming ``name``
    for anything else, or fractions that leave no edge to train on."""
    fractions = {"valid": 0.0, "test": 0.0}
    for item in text.split(","):
        key, eq, value = item.partition("=")
        key = key.strip()
        try:
            fraction = float(value) if eq else float("nan")
        except ValueError:
            fraction = float("nan")
        if key not in fractions or not 0.0 <= fraction < 1.0:
            raise ConfigError(f"config field '{name}': {item.strip()!r} is not valid=F or test=F with F in [0, 1) "
                              f"(e.g. valid=0.05,test=0.10)")
        fractions[key] = fraction
    if sum(fractions.values()) >= 1.0:
        raise ConfigError(f"config field '{name}': {text!r} holds out every edge; leave some to train on")
    return fractions


def edge_pairs(graph: Graph) -> tuple:
    """(sources, destinations) of the graph's edges as pairs to learn: each undirected edge
    once (its lower id first), each directed edge as stored; self-loops are no pairs."""
    dst, src = graph.adj.row().numpy(), graph.adj.indices.numpy()
    keep = src != dst
    if not graph.directed:
        keep &= src < dst
    return src[keep], dst[keep]


def split_edges(graph: Graph, fractions: dict, seed: int, eval_negatives: int) -> LinkSplit:
    """Hold out ``fractions`` (``parse_fractions``) of ``graph``'s edges, placed by a draw of
    ``seed`` and each edge; ``eval_negatives`` fixed negatives per held-out positive."""
    src, dst = edge_pairs(graph)
    total = len(src)
    counts = {k: int(round(fractions[k] * total)) for k in HELD_OUT}
    if total - sum(counts.values()) < 1:
        raise ConfigError(f"dataset '{graph.name}': --link-split leaves no training edge of its {total:,}")
    order = np.argsort(counter.uniform(seed, SPLIT_KEY, src, dst), kind="stable")
    test_at, valid_at = order[:counts["test"]], order[counts["test"]:counts["test"] + counts["valid"]]
    train_at = np.sort(order[counts["test"] + counts["valid"]:])
    pairs = (lambda at: torch.from_numpy(np.stack([src[np.sort(at)], dst[np.sort(at)]])))
    held = {"test": pairs(test_at), "valid": pairs(valid_at)}
    negatives = {k: fixed_negatives(held[k], graph.num_nodes, seed, i, eval_negatives)
                 for i, k in enumerate(HELD_OUT)}
    return LinkSplit(without_pairs(graph, np.concatenate([test_at, valid_at]), src, dst), pairs(train_at),
                     held["valid"], held["test"], negatives["valid"], negatives["test"])


def fixed_negatives(pairs: torch.Tensor, num_nodes: int, seed: int, split: int, k: int,
                    places: "torch.Tensor | None" = None) -> torch.Tensor:
    """[E, k] destinations drawn uniformly for each of ``pairs``' positives, keyed on the seed,
    the split and the positive's place: the same for every run of the seed. ``places``: draw
    for the positives at these places alone ([len(places), k])."""
    at = (np.arange(pairs.shape[1]) if places is None else np.asarray(places))[:, None]
    return torch.from_numpy(counter.below(max(num_nodes, 1), seed, EVAL_NEGATIVES_KEY, split, at, np.arange(k)[None]))


def without_pairs(graph: Graph, held_at: np.ndarray, src: np.ndarray, dst: np.ndarray) -> Graph:
    """``graph`` without the edges ``(src[held_at], dst[held_at])`` (both ways where undirected)."""
    if not len(held_at):
        return graph
    n = graph.num_nodes
    held = src[held_at] * n + dst[held_at]
    if not graph.directed:
        held = np.concatenate([held, dst[held_at] * n + src[held_at]])
    adj = graph.adj
    rows, cols = adj.row().numpy(), adj.indices.numpy()
    keep = ~np.isin(cols * n + rows, held)
    values = None if adj.values is None else adj.values[torch.from_numpy(keep)]
    kept = torch.from_numpy(keep)
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(torch.bincount(adj.row()[kept], minlength=n), 0)
    return graph.replace(adj=Adjacency(indptr, adj.indices[kept], values, adj.shape))


# -- PyG -------------------------------------------------------------------------------------------
def from_pyg(train_data, val_data, test_data, graph: Optional[Graph] = None) -> LinkSplit:
    """The split of PyG's ``RandomLinkSplit`` outputs: the graph messages pass over is
    ``train_data.edge_index`` (its vertex data ``graph``'s, else ``train_data``'s); positives
    are each split's ``edge_label_index`` columns whose ``edge_label`` is not 0 (or its
    ``pos_edge_label_index`` under ``split_labels=True``), and the rest, its negatives, are
    shared by the split's every positive. PyG scores validation and test over growing graphs
    (train_data.edge_index plus the validation edges for test); here all three use the training
    graph, as every other source does."""
    base = graph if graph is not None else Graph.from_pyg(train_data, name="pyg")
    train_graph = Graph.from_edge_index(train_data.edge_index, base.num_nodes, directed=True, source="train_data")
    split = {}
    for name, data in (("train", train_data), ("valid", val_data), ("test", test_data)):
        split[name] = _pyg_labels(data, name, base.num_nodes)
    held = {k: split[k][0] for k in HELD_OUT}
    shared = {k: split[k][1] for k in HELD_OUT}
    negatives = {k: torch.zeros(held[k].shape[1], 0, dtype=torch.int64) for k in HELD_OUT}
    graph_out = base.replace(adj=train_graph.adj)
    return LinkSplit(graph_out, split["train"][0], held["valid"], held["test"], negatives["valid"],
                     negatives["test"], shared["valid"], shared["test"])


def _pyg_labels(data, name: str, n: int) -> tuple:
    """(positive pairs [2, E], negative pairs [2, E']) of one RandomLinkSplit output."""
    where = f"{name} data"
    if getattr(data, "pos_edge_label_index", None) is not None:
        pos = data.pos_edge_label_index
        neg = getattr(data, "neg_edge_label_index", None)
        neg = torch.zeros(2, 0, dtype=torch.int64) if neg is None else neg
    elif getattr(data, "edge_label_index", None) is not None:
        index = data.edge_label_index
        label = getattr(data, "edge_label", None)
        positive = torch.ones(index.shape[1], dtype=torch.bool) if label is None else label.reshape(-1) != 0
        pos, neg = index[:, positive], index[:, ~positive]
    else:
        raise ConfigError(f"{where}: no edge_label_index (nor pos_edge_label_index): not an output of "
                          f"RandomLinkSplit")
    for what, pairs in (("positive", pos), ("negative", neg)):
        if pairs.dim() != 2 or pairs.shape[0] != 2 or (pairs.numel() and (pairs.min() < 0 or pairs.max() >= n)):
            raise ConfigError(f"{where}: its {what} pairs are not a [2, E] tensor of node ids below {n}")
    return pos.to(torch.int64).contiguous(), neg.to(torch.int64).contiguous()

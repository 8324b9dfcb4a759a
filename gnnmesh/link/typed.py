"""Link prediction on a typed graph's relations (``--link-relation``).

The positives are triples (u, r, v): an edge of a chosen relation r. A relation's held-out
edges leave the graph messages pass over under r alone (a pair that another relation joins
too keeps that relation's entry), and with them their twins under r's reverse, the
relation ``rev_NAME`` that ``to_graph(add_reverse=True)`` adds (or, for a reverse, the
relation it reverses): otherwise the encoder would read each held-out edge backwards.
Negatives keep the positive's relation and draw its destination (and, under
``--corrupt both``, its source) among the relation's destination (source) type alone: a
node of another type is no candidate for it.

Every draw is keyed as the untyped task's are, on the seed and each triple, so that every
strategy and rank count sees the same split and the same negatives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ConfigError
from ..graph import Graph
from ..typed.union import NodeTypes, REVERSE_PREFIX, union_adjacency, union_name
from . import counter
from .sources import is_directory
from .split import EVAL_NEGATIVES_KEY, HELD_OUT, SPLIT_KEY, LinkSplit, parse_fractions

ALL = "all"
FIELD = "config field 'link_relation'"
DISJOINT_KEY = 6  # as sources.DISJOINT_KEY: --disjoint-train's draw


# -- which relations -------------------------------------------------------------------------------
def chosen_relations(graph: Graph, text: str) -> tuple:
    """The union relation names ``--link-relation`` names for ``graph``: full names
    (``src__name__dst``), short names where one relation has them, or ``all`` (every relation
    but the reverses ``add_reverse`` added); a ConfigError in one line otherwise."""
    relations, types = graph.adj.relations, graph.meta.get("node_types")
    if relations is None or not isinstance(types, NodeTypes):
        raise ConfigError(f"{FIELD}: {graph.name!r} is not a typed graph (it needs node types and relations, "
                          "as gnnmesh.typed.to_graph gives); leave --link-relation out to predict its edges")
    names = relations.names
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ConfigError(f"{FIELD}: name a relation of {', '.join(names)} (or all)")
    chosen = []
    for item in items:
        if item == ALL:
            chosen += [name for name in names if not is_added_reverse(name, names)]
            continue
        matches = [item] if item in names else [name for name in names if name.split("__")[1:2] == [item]]
        if not matches:
            raise ConfigError(f"{FIELD}: no relation {item!r}; the graph has {', '.join(names)}")
        if len(matches) > 1:
            raise ConfigError(f"{FIELD}: {item!r} is the name of {', '.join(matches)}; give one in full")
        chosen.append(matches[0])
    chosen = tuple(dict.fromkeys(chosen))
    for name in chosen:
        twin = twin_of(name, names)
        if twin in chosen:
            raise ConfigError(f"{FIELD}: {name} and {twin} are one relation both ways (its edges' twins are held "
                              "out with it); choose one")
    return chosen


def twin_of(name: str, names: tuple):
    """The relation whose edges are ``name``'s reversed (``rev_NAME`` both ways), or None."""
    parts = name.split("__")
    if len(parts) != 3:
        return None
    src, rel, dst = parts
    other = rel[len(REVERSE_PREFIX):] if rel.startswith(REVERSE_PREFIX) else REVERSE_PREFIX + rel
    twin = union_name(dst, other, src)
    return twin if twin in names else None


def is_added_reverse(name: str, names: tuple) -> bool:
    """Whether ``name`` is ``rev_NAME`` of another relation of ``names`` (``add_reverse``'s)."""
    parts = name.split("__")
    return len(parts) == 3 and parts[1].startswith(REVERSE_PREFIX) and twin_of(name, names) is not None


@dataclass(frozen=True)
class Ends:
    """The node types at each end of the chosen relations: relation ``i``'s sources are global
    ids ``src_lo[i]`` to ``src_lo[i] + src_count[i] - 1``, its destinations likewise."""

    src_lo: np.ndarray
    src_count: np.ndarray
    dst_lo: np.ndarray
    dst_count: np.ndarray

    @classmethod
    def of(cls, graph: Graph, names: tuple) -> "Ends":
        types = graph.meta["node_types"]
        ends = [[types.ids(part) for part in (name.split("__")[0], name.split("__")[2])] for name in names]
        lo = [np.array([r[end].start for r in ends], dtype=np.int64) for end in (0, 1)]
        count = [np.array([max(r[end].stop - r[end].start, 1) for r in ends], dtype=np.int64) for end in (0, 1)]
        return cls(lo[0], count[0], lo[1], count[1])

    def draw(self, end: str, relation: np.ndarray, *keys) -> np.ndarray:
        """Uniform ids of the ``end`` ("src" or "dst") type of each ``relation`` (broadcast
        with the keys' shape along its first axis), keyed on ``keys``."""
        lo, count = getattr(self, f"{end}_lo")[relation], getattr(self, f"{end}_count")[relation]
        words = counter.words(*keys)
        shape = (-1,) + (1,) * (words.ndim - 1)
        return (words % count.astype(np.uint64).reshape(shape)).astype(np.int64) + lo.reshape(shape)

    def check_pairs(self, pairs: np.ndarray, relation: int, name: str, where: str) -> None:
        """A ConfigError naming the first of ``pairs`` ([P, 2]) that does not join the types of ``name``."""
        src_lo, dst_lo = self.src_lo[relation], self.dst_lo[relation]
        src_hi, dst_hi = src_lo + self.src_count[relation], dst_lo + self.dst_count[relation]
        ok = (pairs[:, 0] >= src_lo) & (pairs[:, 0] < src_hi) & (pairs[:, 1] >= dst_lo) & (pairs[:, 1] < dst_hi)
        bad = np.nonzero(~ok)[0]
        if len(bad):
            u, v = pairs[bad[0]]
            raise ConfigError(f"{where}: pair {bad[0]} ({u}, {v}) does not join relation {name}'s types (sources "
                              f"{src_lo}..{src_hi - 1}, destinations {dst_lo}..{dst_hi - 1})")

    def check_sources(self, nodes: np.ndarray, relation: int, name: str, where: str) -> None:
        """A ConfigError naming the first of ``nodes`` that is not of relation ``name``'s source type."""
        src_lo, src_hi = self.src_lo[relation], self.src_lo[relation] + self.src_count[relation]
        bad = np.nonzero((nodes < src_lo) | (nodes >= src_hi))[0]
        if len(bad):
            raise ConfigError(f"{where}: node {nodes[bad[0]]} is not of relation {name}'s source type (ids "
                              f"{src_lo}..{src_hi - 1})")


def relation_index(names: tuple, relation) -> int:
    """The place among the trained relations ``names`` of ``relation`` (a name, a short name,
    or None where the model knows one relation); a ConfigError in one line otherwise."""
    if relation is None:
        if len(names) == 1:
            return 0
        raise ConfigError(f"--link-relation: the model scores {len(names)} relations ({', '.join(names)}); "
                          "choose one")
    matches = [i for i, name in enumerate(names) if relation in (name, *name.split("__")[1:2])]
    if len(matches) != 1:
        raise ConfigError(f"--link-relation: {relation!r} is not one relation the model was trained on "
                          f"({', '.join(names)})")
    return matches[0]


# -- the split -------------------------------------------------------------------------------------
def split_for(config, graph: Graph, split, original) -> tuple:
    """(the split of ``--link-relation`` on ``graph``, or ``split`` where the caller gives one
    of the same relations; ``config`` naming the relations in full, as checkpoints record
    them). What cannot be told apart by relation is refused in one line."""
    cfg = config.resolved()
    if not isinstance(graph, Graph):
        raise ConfigError(f"{FIELD}: --task link trains on the whole graph, loaded from a dataset")
    if original is not None:
        raise ConfigError(f"{FIELD}: --reorder renumbers a typed graph's nodes across its types; leave it out")
    if cfg.link.rank_all:
        raise ConfigError(f"{FIELD}: --rank-all ranks against every node, of any type; leave it out (each held-out "
                          "edge is ranked among negatives of its relation's destination type)")
    if cfg.training.minibatch:
        raise ConfigError(f"{FIELD}: --minibatch samples one operator for a link step, and a relational model "
                          "reads one per relation; train on the full graph (leave --minibatch out)")
    names = chosen_relations(graph, cfg.link.link_relation)
    if graph.adj.edge_features is not None:
        raise ConfigError(f"{FIELD}: {graph.name!r} carries edge features, each entry's the sum of its relations' "
                          "edges', which holding out one relation's edges cannot take apart; load it without them")
    config = config.updated(link_relation=",".join(names))
    if split is not None:
        if tuple(split.relations) != names:
            raise ConfigError(f"{FIELD}: the split given is of relations {list(split.relations)}, not {list(names)}")
        return split, config
    if is_directory(cfg.link.link_split):
        raise ConfigError(f"{FIELD}: --link-split {cfg.link.link_split} is a directory of pairs, which name no "
                          "relation; on a typed graph give fractions (valid=F,test=F)")
    split = split_relations(graph, names, parse_fractions(cfg.link.link_split), cfg.training.seed,
                            cfg.link.eval_negatives, cfg.link.disjoint_train)
    return split, config


def relation_pairs(graph: Graph, name: str) -> tuple:
    """(sources, destinations) of relation ``name``'s edges, each once, in the union's order."""
    relations = graph.adj.relations
    entries = torch.from_numpy(relations.entries(relations.index(name)))
    return graph.adj.indices[entries].numpy(), graph.adj.row()[entries].numpy()


def split_relations(graph: Graph, names: tuple, fractions: dict, seed: int, eval_negatives: int,
                    disjoint_train: float = 0.0) -> LinkSplit:
    """Hold out ``fractions`` of each chosen relation's edges (self-loops are no pairs), placed by
    a draw of the seed, the relation and each edge; ``eval_negatives`` fixed negatives per
    held-out positive among its relation's destination type; ``disjoint_train`` of each
    relation's training edges kept out of message passing too."""
    relations = graph.adj.relations
    held = {k: [] for k in ("train", *HELD_OUT)}
    removed = []
    for i, name in enumerate(names):
        src, dst = relation_pairs(graph, name)
        keep = src != dst
        src, dst = src[keep], dst[keep]
        total = len(src)
        counts = {k: int(round(fractions[k] * total)) for k in HELD_OUT}
        if total - sum(counts.values()) < 1 or any(fractions[k] > 0 and not counts[k] for k in HELD_OUT):
            raise ConfigError(f"{FIELD}: relation {name} has {total:,} edges, too few to hold out "
                              f"valid={fractions['valid']},test={fractions['test']} of them and train on the rest")
        key = relations.index(name)
        order = np.argsort(counter.uniform(seed, SPLIT_KEY, key, src, dst), kind="stable")
        at = {"test": order[:counts["test"]], "valid": order[counts["test"]:counts["test"] + counts["valid"]],
              "train": order[counts["test"] + counts["valid"]:]}
        for k, places in at.items():
            places = np.sort(places)
            held[k].append((src[places], dst[places], np.full(len(places), i, dtype=np.int64)))
        out = np.concatenate([at["test"], at["valid"]])
        if disjoint_train:
            train = np.sort(at["train"])
            count = int(round(disjoint_train * len(train)))
            if count >= len(train):
                raise ConfigError(f"config field 'disjoint_train': {disjoint_train} keeps every one of relation "
                                  f"{name}'s {len(train):,} training edges out of message passing")
            draws = counter.uniform(seed, DISJOINT_KEY, key, src[train], dst[train])
            out = np.concatenate([out, train[np.argsort(draws, kind="stable")[:count]]])
        removed.append((name, src[out], dst[out]))
    pairs = {k: torch.from_numpy(np.stack([np.concatenate([p[0] for p in held[k]]),
                                           np.concatenate([p[1] for p in held[k]])])) for k in held}
    relation_of = {k: torch.from_numpy(np.concatenate([p[2] for p in held[k]])) for k in held}
    ends = Ends.of(graph, names)
    negatives = {k: typed_negatives(ends, relation_of[k], seed, s, eval_negatives) for s, k in enumerate(HELD_OUT)}
    return LinkSplit(without_edges(graph, removed), pairs["train"], pairs["valid"], pairs["test"],
                     negatives["valid"], negatives["test"], relations=tuple(names),
                     train_relation=relation_of["train"], valid_relation=relation_of["valid"],
                     test_relation=relation_of["test"])


def typed_negatives(ends: Ends, relation: torch.Tensor, seed: int, split: int, k: int,
                    places=None) -> torch.Tensor:
    """[E, k] destinations of each positive's relation's destination type, keyed on the seed,
    the split and the positive's place as ``split.fixed_negatives``' are (``relation``: each
    positive's relation; ``places``: draw for the positives at these places alone)."""
    at = np.arange(len(relation)) if places is None else np.asarray(places)
    rel = relation.numpy()[at]
    if not len(at):
        return torch.zeros(0, k, dtype=torch.int64)
    return torch.from_numpy(ends.draw("dst", rel, seed, EVAL_NEGATIVES_KEY, split, at[:, None], np.arange(k)[None]))


def without_edges(graph: Graph, removed: list) -> Graph:
    """``graph`` without each ``(name, sources, destinations)``'s edges under relation ``name``
    and their twins under its reverse; an entry no relation joins any more leaves the
    adjacency. The meta that names the union's entries (each relation's edge order, edge
    features) no longer fits them and is dropped."""
    relations = graph.adj.relations
    names, n = relations.names, graph.num_nodes
    drop = {name: [] for name in names}
    for name, src, dst in removed:
        drop[name].append(src.astype(np.int64) * n + dst)
        twin = twin_of(name, names)
        if twin is not None:
            drop[twin].append(dst.astype(np.int64) * n + src)
    ends = []
    for name in names:
        src, dst = relation_pairs(graph, name)
        if drop[name]:
            keep = ~np.isin(src.astype(np.int64) * n + dst, np.concatenate(drop[name]))
            src, dst = src[keep], dst[keep]
        ends.append((src.astype(np.int64), dst.astype(np.int64)))
    adj, _ = union_adjacency(n, list(names), ends)
    meta = {k: v for k, v in graph.meta.items() if k not in ("relation_edges", "edge_features")}
    return graph.replace(adj=adj, meta=meta)


def known_positives(split: LinkSplit, relation: int) -> tuple:
    """``(indptr, destinations)``: each node's training positives under the ``relation``-th
    chosen relation, CSR by source, each once (``ranking.known_positives``' form)."""
    n = split.graph.num_nodes
    src, dst = split.train[:, split.train_relation == relation].numpy()
    keep = src != dst
    keys = np.unique(src[keep].astype(np.int64) * n + dst[keep])
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(np.bincount(keys // n, minlength=n))
    return indptr, keys % n

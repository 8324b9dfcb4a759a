"""A synthetic typed graph with IGBH's schema, generated with vectorised numpy in O(E).

Node types ``paper``, ``author``, ``institute``, ``fos`` (fields of study); relations
``paper-cites-paper``, ``paper-written_by-author``, ``author-affiliated_to-institute`` and
``paper-topic-fos``. Papers are the target type.

The labels depend on the relations: every author, institute and field of study has a hidden
class; a paper leans to a class, draws its fields of study and authors from that class with
probability ``homophily`` (else from all), and its label is the class most of its fields of study
and authors hold (ties go to the class it leant to). Its features are the label's mean vector plus
noise. Citations ignore the classes, so a model that averages them in with the other relations (a
homogeneous one) dilutes what the topic and author edges tell; one that weighs each relation on
its own need not. Authors draw their institute from their own class with probability
``homophily`` too.

Each relation's edges are distinct (a repeated draw is dropped, so a paper may have fewer
authors or topics than asked); a paper never cites itself.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import progress
from ..errors import GraphError
from ..graph import Graph
from ..typed import NodeType, Relation, TypedGraph, to_graph
from ._build import random_split, sorted_unique
from .options import SPLIT, Option

IGBH_OPTIONS = {
    "papers": Option(2000, int, "number of papers (the target type)"),
    "authors": Option(1000, int, "number of authors"),
    "institutes": Option(50, int, "number of institutes"),
    "fos": Option(100, int, "number of fields of study"),
    "cites": Option(5.0, float, "citations per paper, on average (uniformly random papers)"),
    "authors_per_paper": Option(3, int, "authors drawn per paper (repeats dropped)"),
    "topics_per_paper": Option(3, int, "fields of study drawn per paper (repeats dropped)"),
    "classes": Option(8, int, "number of classes"),
    "homophily": Option(0.8, float, "probability that a paper's author or field of study, or an author's "
                                    "institute, is drawn from its own class"),
    "features": Option(32, int, "feature dimension (0 for no features)"),
    "feature_noise": Option(4.0, float, "std of the gaussian noise added to the class means"),
    "features_on": Option("paper", str, "which node types have features: papers only, or all (each "
                                        "node its hidden class's mean plus noise)", choices=("paper", "all")),
    "add_reverse": Option(True, bool, "add every relation's reverse (rev_<name>), so messages flow both ways"),
    "seed": Option(0, int, "random seed", seed=True),
    **SPLIT,
}


class _ByClass:
    """Draws members of a given hidden class (uniformly among them; among all where a class has none)."""

    def __init__(self, hidden: np.ndarray, classes: int):
        self.order = np.argsort(hidden, kind="stable")
        self.size = np.bincount(hidden, minlength=classes)
        self.first = np.concatenate(([0], np.cumsum(self.size)[:-1]))
        self.count = hidden.shape[0]

    def draw(self, wanted: np.ndarray, homophily: float, rng: np.random.Generator) -> np.ndarray:
        picks = rng.integers(0, self.count, wanted.shape[0])
        same = (rng.random(wanted.shape[0]) < homophily) & (self.size[wanted] > 0)
        c = wanted[same]
        picks[same] = self.order[self.first[c] + (rng.random(c.shape[0]) * self.size[c]).astype(np.int64)]
        return picks


def _distinct(src: np.ndarray, dst: np.ndarray, n_dst: int) -> np.ndarray:
    """``[2, E]`` of the distinct pairs, sorted by source then destination."""
    keys = sorted_unique(src * n_dst + dst)
    return np.stack([keys // n_dst, keys % n_dst])


def igbh_typed(**options) -> TypedGraph:
    """The generated typed graph (``igbh`` is its union Graph); ``options``: those of ``igbh``
    but ``add_reverse``."""
    return _generate(**options)[0]


def _generate(papers, authors, institutes, fos, cites, authors_per_paper, topics_per_paper, classes,
              homophily, features, feature_noise, features_on, seed, split_seed, train_frac,
              val_frac) -> tuple:
    """(the typed graph, its split's description)."""
    sizes = {"paper": papers, "author": authors, "institute": institutes, "fos": fos}
    small = [f"{k}={v}" for k, v in sizes.items() if v < 1]
    if small or classes < 1:
        raise GraphError(f"igbh-synth: need at least one node of every type and one class, got "
                         f"{', '.join(small) or f'classes={classes}'}")
    if cites < 0 or authors_per_paper < 0 or topics_per_paper < 0 or features < 0 or feature_noise < 0:
        raise GraphError("igbh-synth: cites, authors_per_paper, topics_per_paper, features and feature_noise "
                         "must be >= 0")
    if not 0.0 <= homophily <= 1.0:
        raise GraphError(f"igbh-synth: option 'homophily' must be in [0, 1], got {homophily}")
    edge_rng, feat_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    hidden = {name: edge_rng.integers(0, classes, n) for name, n in sizes.items() if name != "paper"}
    lean = edge_rng.integers(0, classes, papers)

    with progress.phase(f"igbh-synth: drawing the edges of {papers:,} papers"):
        paper_ids = np.arange(papers, dtype=np.int64)
        topic = np.repeat(paper_ids, topics_per_paper)
        topic = _distinct(topic, _ByClass(hidden["fos"], classes).draw(lean[topic], homophily, edge_rng), fos)
        wrote = np.repeat(paper_ids, authors_per_paper)
        wrote = _distinct(wrote, _ByClass(hidden["author"], classes).draw(lean[wrote], homophily, edge_rng),
                          authors)
        author_ids = np.arange(authors, dtype=np.int64)
        affiliated = np.stack([author_ids, _ByClass(hidden["institute"], classes).draw(
            hidden["author"], homophily, edge_rng)])
        count = int(round(papers * cites))
        src, dst = edge_rng.integers(0, papers, count), edge_rng.integers(0, papers, count)
        keep = src != dst
        cited = _distinct(src[keep], dst[keep], papers)

    # A paper's label: the class most of its fields of study and authors hold; ties to its lean.
    votes = np.bincount(np.concatenate([topic[0] * classes + hidden["fos"][topic[1]],
                                        wrote[0] * classes + hidden["author"][wrote[1]]]),
                        minlength=papers * classes).reshape(papers, classes)
    votes *= 2
    votes[paper_ids, lean] += 1
    y = votes.argmax(axis=1).astype(np.int64)
    del votes
    masks, split = random_split(papers, y, train_frac, val_frac, split_seed)

    x = {}
    if features:
        means = feat_rng.standard_normal((classes, features), dtype=np.float32)
        for name in (("paper", "author", "institute", "fos") if features_on == "all" else ("paper",)):
            rows = y if name == "paper" else hidden[name]
            block = means[rows]
            block += np.float32(feature_noise) * feat_rng.standard_normal(block.shape, dtype=np.float32)
            x[name] = torch.from_numpy(block)
    node_types = [NodeType("paper", papers, x=x.get("paper"), y=torch.from_numpy(y), **masks)]
    node_types += [NodeType(name, sizes[name], x=x.get(name)) for name in ("author", "institute", "fos")]
    relations = [Relation("paper", "cites", "paper", torch.from_numpy(cited)),
                 Relation("paper", "written_by", "author", torch.from_numpy(wrote)),
                 Relation("author", "affiliated_to", "institute", torch.from_numpy(affiliated)),
                 Relation("paper", "topic", "fos", torch.from_numpy(topic))]
    return TypedGraph(node_types, relations, name=f"igbh-synth-{papers}"), split


def igbh(papers, authors, institutes, fos, cites, authors_per_paper, topics_per_paper, classes, homophily,
         features, feature_noise, features_on, add_reverse, seed, split_seed, train_frac, val_frac) -> Graph:
    """The union Graph of ``igbh_typed`` (``add_reverse``: with every relation's reverse)."""
    params = dict(papers=papers, authors=authors, institutes=institutes, fos=fos, cites=cites,
                  authors_per_paper=authors_per_paper, topics_per_paper=topics_per_paper, classes=classes,
                  homophily=homophily, features=features, feature_noise=feature_noise, features_on=features_on)
    typed, split = _generate(**params, seed=seed, split_seed=split_seed, train_frac=train_frac, val_frac=val_frac)
    with progress.phase("igbh-synth: building the union graph"):
        graph = to_graph(typed, add_reverse=add_reverse)
    graph.meta.update({"generator": "igbh-synth", "params": {**params, "seed": seed, "add_reverse": add_reverse},
                       "split": split})
    return graph

"""A link model on a renumbered graph (``gnnmesh predict --reorder``): the user names nodes by
the graph's own ids, the strategy runs on the graph renumbered for locality.

The split is a function of node ids (each edge's draw is keyed on its two ends), so it is
drawn on the graph as the user numbers it and then carried to the renumbered graph
(``renumbered``): the encoder runs on the training edges it learned from, whatever the
numbering. ``original[k]`` is the user's id of the renumbered graph's node ``k``
(``transforms.permute``'s order).
"""

from __future__ import annotations

import numpy as np
import torch

from ..graph import Graph
from ..transforms import permute
from .split import LinkSplit


def inverse(original) -> np.ndarray:
    """Each user id's node in the renumbered graph."""
    original = np.asarray(original, dtype=np.int64)
    node = np.empty_like(original)
    node[original] = np.arange(len(original))
    return node


def user_graph(graph: Graph, original) -> Graph:
    """``graph`` (renumbered) numbered back as the user numbers it."""
    return permute(graph, inverse(original))


def renumbered(split: LinkSplit, original) -> LinkSplit:
    """``split``, drawn on the user's numbering, in the renumbered graph's: its graph permuted,
    every pair and negative's ids mapped (their order kept)."""
    node = torch.from_numpy(inverse(original))
    pairs = (lambda ids: None if ids is None else node[ids])
    return LinkSplit(permute(split.graph, original), pairs(split.train), pairs(split.valid), pairs(split.test),
                     pairs(split.valid_negatives), pairs(split.test_negatives), pairs(split.valid_negative_pairs),
                     pairs(split.test_negative_pairs))


def known_in_user_ids(known: tuple, original) -> tuple:
    """Known positives (``ranking.known_positives``: CSR by source) of the renumbered graph,
    in the user's ids: CSR by the user's id of the source, destinations the user's ids."""
    indptr, dst = known
    original = np.asarray(original, dtype=np.int64)
    n = len(original)
    src = original[np.repeat(np.arange(n), np.diff(indptr))]
    keys = np.sort(src * n + original[dst])
    user_indptr = np.zeros(n + 1, dtype=np.int64)
    user_indptr[1:] = np.cumsum(np.bincount(keys // n, minlength=n))
    return user_indptr, keys % n

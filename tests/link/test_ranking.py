"""The running top K over blocks of candidates: the same list as one sort of every score,
ties by the lower id; the known positives left out; too few candidates refused."""

import numpy as np
import pytest
import torch

from gnnmesh.errors import ConfigError
from gnnmesh.link.ranking import KnownMask, RunningTopK, block_scores, check_enough, known_positives
from gnnmesh.link.decoders import Dot

from tests.helpers import random_graph


@pytest.mark.parametrize("block", [1, 3, 7, 50])
def test_blocks_give_one_sorts_list_with_ties_by_lower_id(block):
    rng = np.random.default_rng(1)
    scores = torch.from_numpy(rng.integers(0, 4, size=(5, 50)).astype(np.float32))  # many ties
    best = RunningTopK(5, 12)
    for start in range(0, 50, block):
        best.add(scores[:, start:start + block], torch.arange(start, min(50, start + block)))
    want = np.stack([np.lexsort((np.arange(50), -row))[:12] for row in scores.numpy()])
    assert np.array_equal(best.ids.numpy(), want)
    assert np.array_equal(best.scores.numpy(), np.take_along_axis(scores.numpy(), want, 1))


def test_block_scores_are_the_decoders_pair_by_pair():
    zq, zc = torch.randn(4, 3), torch.randn(6, 3)
    got = block_scores(Dot(3), zq, zc)
    torch.testing.assert_close(got, zq @ zc.T)
    assert block_scores(Dot(3), zq[:0], zc).shape == (0, 6)


@pytest.mark.parametrize("directed", [False, True])
def test_known_positives_as_sources_both_ways_where_undirected_and_masked(directed):
    graph = random_graph(n=20, e=60, features=2, classes=2, directed=directed)
    assert graph.directed == directed
    indptr, dst = known_positives(graph)
    rows, cols = graph.adj.row().numpy(), graph.adj.indices.numpy()  # an edge cols -> rows
    for q in range(20):
        want = {int(r) for r, c in zip(rows, cols) if c == q and r != q}
        if not directed:
            want |= {int(c) for r, c in zip(rows, cols) if r == q and c != q}
        assert dst[indptr[q]:indptr[q + 1]].tolist() == sorted(want)
    queries = np.array([2, 5])
    scores = torch.zeros(2, 20)
    mask = KnownMask(queries, (indptr, dst))
    mask.apply(scores[:, :10], 0, 10)
    mask.apply(scores[:, 10:], 10, 20)
    for at, q in enumerate(queries):
        gone = set(dst[indptr[q]:indptr[q + 1]].tolist()) | {int(q)}
        assert set(np.flatnonzero(np.isinf(scores[at].numpy())).tolist()) == gone


def test_too_few_candidates_is_one_error():
    graph = random_graph(n=20, e=60, features=2, classes=2)
    known = known_positives(graph)
    check_enough(20, np.arange(20), 20, None)
    with pytest.raises(ConfigError, match="--top-k 21 is more than the candidates: the graph has 20 nodes"):
        check_enough(21, np.arange(20), 20, None)
    fewest = int((20 - 1 - np.diff(known[0])).min())
    check_enough(fewest, np.arange(20), 20, known)
    with pytest.raises(ConfigError, match=f"with --exclude-known, node .* has {fewest}"):
        check_enough(fewest + 1, np.arange(20), 20, known)
    with pytest.raises(ConfigError, match="1 or more"):
        check_enough(0, np.arange(20), 20, None)

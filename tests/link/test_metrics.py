"""Metrics against negatives shared by every positive follow OGB's collab/ddi rules; every
metric of positives and negatives spread over 1, 2 or 3 real gloo ranks (ties across them, a
rank without pairs) equals one process's of them all."""

import numpy as np
import pytest

from gnnmesh.link.metrics import link_metrics, ranks_link_metrics, ranks_shared_link_metrics, shared_link_metrics

from tests.dist import run_ranks


def test_hits_compare_each_positive_with_the_kth_best_negative():
    negative = np.array([0.9, 0.5, 0.1, 0.7])
    positive = np.array([1.0, 0.8, 0.7, 0.2])
    got = shared_link_metrics(positive, negative, (1, 2, 5))
    assert got["hits@1"] == 0.25          # above 0.9: 1.0 alone
    assert got["hits@2"] == 0.5           # above 0.7 (strictly): 1.0 and 0.8
    assert got["hits@5"] == 1.0           # fewer negatives than K: every positive, as OGB
    # ranks among the 4 negatives: 1, 2, 2.5 (tied with 0.7), 4
    assert np.isclose(got["mrr"], np.mean([1, 1 / 2, 1 / 2.5, 1 / 4]))


def test_shared_negatives_rank_as_each_positive_given_them_all():
    rng = np.random.default_rng(0)
    positive, negative = rng.normal(size=20), rng.normal(size=15).round(1)
    shared = shared_link_metrics(positive, negative, (3,))
    each = link_metrics(positive, np.tile(negative, (20, 1)), (3,))
    assert np.isclose(shared["mrr"], each["mrr"])
    assert np.isclose(shared["auc"], each["auc"])


HITS = (1, 3, 50)


def spread_cases() -> list:
    """(positives [E], their negatives [E, K], shared negatives [E'], each positive's rank, each
    shared negative's rank on 3 ranks): scores of few values, so ties cross ranks."""
    rng = np.random.default_rng(4)
    out = []
    for e, k, shared in ((40, 5, 30), (7, 2, 60), (0, 3, 10), (25, 4, 0)):
        out.append((rng.integers(0, 9, e) / 4.0, rng.integers(0, 9, (e, k)) / 4.0, rng.integers(0, 9, shared) / 4.0,
                    rng.choice([0, 2], e), rng.integers(0, 3, shared)))  # rank 1 owns no positive
    return out


def _rank_metrics(rank, world):
    from gnnmesh.comm import Comm
    comm, out = Comm(), []
    for positive, negatives, shared, place, shared_place in spread_cases():
        mine, mine_shared = place % world == rank, shared_place % world == rank
        out.append((ranks_link_metrics(positive[mine], negatives[mine], HITS, comm),
                    ranks_shared_link_metrics(positive[mine], shared[mine_shared], HITS, comm)))
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world", [1, 2, 3])
def test_metrics_of_pairs_spread_over_ranks_equal_one_process(world):
    for rank, got in enumerate(run_ranks(_rank_metrics, world, timeout=100)):
        for (positive, negatives, shared, _, _), (each, against_shared) in zip(spread_cases(), got):
            for have, want in ((each, link_metrics(positive, negatives, HITS)),
                               (against_shared, shared_link_metrics(positive, shared, HITS))):
                assert have.keys() == want.keys()
                assert all(type(v) is float for v in have.values()), have  # a checkpoint keeps no numpy scalar
                for key in want:
                    exact = key == "auc" or key.startswith("hits")
                    assert np.isclose(have[key], want[key], rtol=0 if exact else 1e-12, atol=0, equal_nan=True), \
                        (world, rank, key, have[key], want[key])

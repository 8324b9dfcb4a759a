"""Metrics against negatives shared by every positive follow OGB's collab/ddi rules."""

import numpy as np

from gnnmesh.link.metrics import link_metrics, shared_link_metrics


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

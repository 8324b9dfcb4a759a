"""The distributed ROC-AUC equals ``tasks.roc_auc`` of every row on one process, to the last
bit, on 1, 2 and 3 real gloo ranks: ties within and across ranks, constant columns, columns of
positives only, a rank without rows, every score equal, columns in several blocks; and no rank
holds every score."""

import numpy as np
import pytest

from gnnmesh import auc
from gnnmesh.tasks import roc_auc

from tests.dist import run_ranks


def cases() -> list:
    """(scores [n, T], 0/1 labels [n, T], the rank of each row on 3 ranks, block entries)."""
    rng = np.random.default_rng(3)
    out = []
    n = 61
    scores = rng.integers(0, 7, (n, 5)) / 4.0     # few values: ties everywhere, across ranks too
    labels = rng.random((n, 5)) < 0.4
    scores[:, 1] = 0.5                              # every score equal
    labels[:, 2] = True                             # positives only: NaN
    labels[:, 3] = False                            # negatives only: NaN
    out.append((scores, labels, rng.integers(0, 3, n), 1 << 21))
    out.append((scores, labels, rng.integers(0, 2, n) * 2, 40))  # rank 1 holds no row; 2 columns a block
    distinct = rng.standard_normal((300, 3))
    out.append((distinct, rng.random((300, 3)) < 0.3, rng.integers(0, 3, 300), 250))  # a column a block
    out.append((np.zeros((0, 2)), np.zeros((0, 2), bool), np.zeros(0, np.int64), 1 << 21))  # no rows at all
    return out


def _rank_aucs(rank, world):
    from gnnmesh.comm import Comm
    comm = Comm()
    out = []
    for scores, labels, place, block in cases():
        mine = (place % world) == rank
        out.append(auc.roc_auc(scores[mine], labels[mine], comm, block_entries=block))
    return out


def _reference(scores, labels):
    if not len(scores):
        return np.full(scores.shape[1], np.nan)
    return roc_auc(scores, labels.astype(np.int64))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_ranks_auc_is_the_single_process_one(world):
    for rank, got in enumerate(run_ranks(_rank_aucs, world, timeout=100)):
        for i, ((scores, labels, _, _), aucs) in enumerate(zip(cases(), got)):
            want = _reference(scores, labels)
            assert np.array_equal(aucs, want, equal_nan=True), (world, rank, i, aucs, want)


def test_one_process_in_blocks_is_the_reference():
    rng = np.random.default_rng(5)
    for _ in range(40):
        n, width = int(rng.integers(1, 40)), int(rng.integers(1, 6))
        scores = rng.integers(0, 5, (n, width)) / 2.0
        labels = rng.random((n, width)) < 0.4
        got = auc.roc_auc(scores, labels, block_entries=int(rng.integers(1, 80)))
        assert np.array_equal(got, _reference(scores, labels), equal_nan=True)
    assert auc.roc_auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1]))[0] == 0.75  # scikit-learn's example


def _rank_share(rank, world):
    from gnnmesh.comm import Comm
    rng = np.random.default_rng(8)
    scores, labels = rng.standard_normal((3000, 2)), rng.random((3000, 2)) < 0.5
    mine = np.arange(3000) % world == rank
    held = sum(len(runs.value) for _, runs in auc.sorted_blocks(scores[mine], labels[mine], Comm()))
    return held, auc.roc_auc(scores[mine], labels[mine], Comm()), _reference(scores, labels)


@pytest.mark.timeout(120)
def test_each_rank_holds_about_its_share_of_the_sorted_scores():
    for held, got, want in run_ranks(_rank_share, 3, timeout=100):
        assert held < 0.5 * 3000 * 2, held    # a third of the entries, give or take the splitters' error
        assert np.array_equal(got, want)

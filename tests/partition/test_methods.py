"""The block forms of rp and contiguous (``partition.methods``): a process holding a block of
ids gives them the parts the whole graph's form does."""

import numpy as np
import pytest

from gnnmesh.partition.methods import (contiguous_bounds, contiguous_cuts, contiguous_parts, random_block_parts,
                                       random_parts)


def blocks(n: int, count: int) -> list:
    return [(n * r // count, n * (r + 1) // count) for r in range(count)]


@pytest.mark.parametrize("n, parts", [(1, 1), (2, 2), (7, 3), (41, 4), (1000, 7), (4097, 16)])
def test_random_parts_are_balanced_and_equal_their_block_form(n, parts):
    whole = random_parts(n, parts, seed=3)
    sizes = np.bincount(whole, minlength=parts)
    assert sizes.max() - sizes.min() <= 1 and len(sizes) == parts
    for count in (1, 3, min(n, 5)):
        pieces = [random_block_parts(np.arange(lo, hi), n, parts, seed=3) for lo, hi in blocks(n, count)]
        assert np.array_equal(np.concatenate(pieces), whole)


def test_random_parts_follow_the_seed_and_mix_the_ids():
    n, parts = 5000, 4
    one, other = random_parts(n, parts, seed=0), random_parts(n, parts, seed=1)
    assert not np.array_equal(one, other) and np.array_equal(one, random_parts(n, parts, seed=0))
    assert (one == np.arange(n) % parts).mean() < 0.4  # not the ids dealt in order
    runs = np.flatnonzero(np.diff(one) != 0)
    assert len(runs) > n / 2  # neighbouring ids mostly land in different parts, as a shuffle's do


@pytest.mark.parametrize("seed", range(4))
def test_contiguous_cuts_found_block_by_block_are_the_whole_graphs(seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        n = int(rng.integers(1, 80))
        parts = int(rng.integers(1, n + 1))
        weights = rng.integers(1, 30, n) if seed % 2 else np.ones(n, dtype=np.int64)
        whole = contiguous_parts(weights, parts)
        assert np.array_equal(np.bincount(whole, minlength=parts) > 0, np.ones(parts, bool))
        count = int(rng.integers(1, n + 1))
        cuts: dict = {}
        for lo, hi in blocks(n, count):
            found = contiguous_cuts(weights[lo:hi], lo, int(weights[:lo].sum()), int(weights.sum()), parts)
            assert not set(found) & set(cuts)  # each cut found in one block
            cuts.update(found)
        bounds = contiguous_bounds(cuts, n, parts)
        assert np.array_equal(np.repeat(np.arange(parts), np.diff(bounds)), whole)

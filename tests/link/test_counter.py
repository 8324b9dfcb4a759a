"""Counter-based draws: a function of their keys alone, whatever their shapes, equal to the
plain fold of SplitMix64 over the broadcast keys (the fold the split and every negative
drawn so far were made with)."""

import numpy as np
import pytest

from gnnmesh.link import counter


def folded(*keys) -> np.ndarray:
    """The reference: every key broadcast to the full shape, then folded one by one."""
    arrays = np.broadcast_arrays(*[np.asarray(k, dtype=np.int64).astype(np.uint64) for k in keys])
    with np.errstate(over="ignore"):
        state = np.full(arrays[0].shape, counter._GOLDEN, dtype=np.uint64)
        for key in arrays:
            z = state + counter._GOLDEN + key
            z = (z ^ (z >> np.uint64(30))) * counter._M1
            z = (z ^ (z >> np.uint64(27))) * counter._M2
            state = z ^ (z >> np.uint64(31))
    return state


KEYS = {
    "scalars": (5, 3, 9),
    "one array": (np.arange(6),),
    "scalars then arrays": (3, 2, 5, np.arange(10)[:, None], np.arange(4)[None]),
    "an array first": (np.arange(5)[None], 3, np.arange(4)[:, None]),
    "large ids": (7, 1, np.array([2**40, 2**62, 0]), np.array([1, 2**50, 3])),
    "empty": (1, np.zeros((0, 1), dtype=np.int64), np.arange(3)[None]),
}


@pytest.mark.parametrize("keys", KEYS.values(), ids=KEYS.keys())
def test_words_are_the_plain_fold(keys):
    got, want = counter.words(*keys), folded(*keys)
    assert got.shape == want.shape and got.dtype == np.uint64
    assert np.array_equal(got, want)
    assert np.array_equal(counter.below(97, *keys), (want % np.uint64(97)).astype(np.int64))


def test_the_keys_are_not_changed():
    ids = np.arange(4)
    counter.words(1, ids, 2)
    assert ids.tolist() == [0, 1, 2, 3]

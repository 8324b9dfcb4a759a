"""Counter-based random numbers: each draw a function of its key alone.

Link prediction draws a held-out flag per edge and negatives per positive. Drawn from a
stream, they would depend on the order the pairs are visited in, and so on which rank holds
them. Here a draw is SplitMix64's finalizer applied to its key (seed, epoch, edge, draw
index), folded one word at a time: any rank computes any pair's draw, and every strategy and
rank count sees the same numbers.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function: a bijection of 64-bit words that scatters every bit."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def words(*keys) -> np.ndarray:
    """64-bit random words, one per element of the keys broadcast together (integers or
    integer arrays, each >= 0): a function of the keys alone."""
    arrays = np.broadcast_arrays(*[np.asarray(k, dtype=np.int64).astype(np.uint64) for k in keys])
    with np.errstate(over="ignore"):
        state = np.full(arrays[0].shape, _GOLDEN, dtype=np.uint64)
        for key in arrays:
            state = _mix(state + _GOLDEN + key)
    return state


def uniform(*keys) -> np.ndarray:
    """Numbers in [0, 1), one per element of the broadcast keys (53 random bits each)."""
    return (words(*keys) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def below(n: int, *keys) -> np.ndarray:
    """Integers in [0, n), one per element of the broadcast keys."""
    return (words(*keys) % np.uint64(n)).astype(np.int64)

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
    """SplitMix64's output function: a bijection of 64-bit words that scatters every bit,
    applied in place (``z``: an array of the caller's own, 0-d or not)."""
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def words(*keys) -> np.ndarray:
    """64-bit random words, one per element of the keys broadcast together (integers or
    integer arrays, each >= 0): a function of the keys alone.

    The state takes the shape of the keys folded so far: scalar keys (the seed, a purpose, an
    epoch) cost one word, and each array key one in-place pass, not a pass per key over the
    broadcast shape (a draw per training pair each epoch is on the training step's path)."""
    shape = np.broadcast_shapes(*[np.shape(k) for k in keys])
    state = np.asarray(_GOLDEN)
    with np.errstate(over="ignore"):
        for key in keys:
            key = np.asarray(key, dtype=np.int64).astype(np.uint64)  # a copy of our own
            key += _GOLDEN
            if key.shape == np.broadcast_shapes(key.shape, state.shape):
                key += state
                state = key
            else:
                state = state + key
            _mix(state)
    return state if state.shape == shape else np.broadcast_to(state, shape).copy()


def uniform(*keys) -> np.ndarray:
    """Numbers in [0, 1), one per element of the broadcast keys (53 random bits each)."""
    return (words(*keys) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def below(n: int, *keys) -> np.ndarray:
    """Integers in [0, n), one per element of the broadcast keys."""
    return (words(*keys) % np.uint64(n)).astype(np.int64)

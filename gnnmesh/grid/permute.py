"""Double permutation (Plexus §5.1): separate random permutations of rows and columns.

A 2D block decomposition of ``A`` is as balanced as its nonzeros are spread; graphs with
communities pile them up near the diagonal. Renumbering rows with ``P_r`` and columns with
``P_c`` (and alternating the two per layer, so one layer's output rows are the next
layer's input columns) scatters them.
"""

from __future__ import annotations

import numpy as np


def permutations(num_nodes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(row_perm, col_perm): ``perm[old_id] = new_id``, two independent random permutations."""
    rng = np.random.default_rng(seed)
    return rng.permutation(num_nodes), rng.permutation(num_nodes)

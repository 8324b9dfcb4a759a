"""Held-out pairs scored a bounded number at a time, every rank in step.

Scoring a pair fetches its rows (``rows.fetch_rows``), a collective call: every rank makes as
many as the rank with the most pairs needs, one chunk each, the ranks left with none taking
part with an empty one. A chunk's rows number at most ``ROWS_AT_ONCE`` (a pair and its own
negatives read 2 + K), so the rows held at once do not grow with the count of pairs. Each
pair's score is the decoder's of its own two rows, so the chunks give the scores one call
over every pair gives.
"""

from __future__ import annotations

import torch

ROWS_AT_ONCE = 1 << 18


def pair_chunks(mine: torch.Tensor, owners: torch.Tensor, rows_per_pair: int) -> list:
    """``mine`` (this rank's pairs, any ids) in consecutive chunks of at most ``ROWS_AT_ONCE``
    rows, as many chunks as every other rank takes: ``owners`` is the owning rank of each pair
    of every rank, the same tensor on all of them (the trailing chunks may be empty)."""
    largest = int(torch.bincount(owners).max()) if len(owners) else 0
    per_chunk = max(1, ROWS_AT_ONCE // max(rows_per_pair, 1))
    count = max(1, -(-largest // per_chunk))
    return [mine[i * per_chunk:(i + 1) * per_chunk] for i in range(count)]

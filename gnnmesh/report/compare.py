"""A plan's candidates beside the runs that measured them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Row:
    rank: int                   # 1 = the best prediction; candidates without one come last
    candidate: object           # plan_file.Candidate
    measured_s: Optional[float]  # the median over its runs of their median epoch times
    runs: tuple                 # labels of the runs that measured it


def compare(plan, runs: list) -> list:
    """The plan's candidates sorted by predicted epoch time (ties, and candidates without a
    prediction, in the file's order), each with what its runs measured. A run measured the
    candidate its ``Run.key()`` names."""
    order = sorted(range(len(plan.candidates)),
                   key=lambda i: (plan.candidates[i].predicted_epoch_s is None,
                                  plan.candidates[i].predicted_epoch_s or 0.0, i))
    rows = []
    for rank, i in enumerate(order, start=1):
        candidate = plan.candidates[i]
        mine = [r for r in runs if r.key() == candidate.name and r.median_epoch_time() is not None]
        measured = statistics.median(r.median_epoch_time() for r in mine) if mine else None
        rows.append(Row(rank, candidate, measured, tuple(r.label for r in mine)))
    return rows

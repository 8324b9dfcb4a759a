"""A ranking in words: the table of candidates, those left out and why, and one line naming
the choice; what ``gnnmesh plan --strategy all`` and ``gnnmesh train --strategy auto`` print."""

from __future__ import annotations

import math

from .rank import Ranking, cost

MiB = 2**20
CLOSE = 1.05   # a lead under 5% is within what the models can tell apart


def significant(value: float) -> str:
    """``value`` (>= 0) to four significant digits, never in exponent form."""
    if value == 0:
        return "0"
    return f"{value:.{max(0, 3 - math.floor(math.log10(value)))}f}"


def _rough(estimate) -> bool:
    return estimate.strategy.startswith("grid3d")   # grid3d.peak_bytes: block shapes only


def _unit(ranking: Ranking) -> str:
    """What each candidate's time is of: an epoch, or one inference pass."""
    return "pass" if ranking.inference else "epoch"


def table(ranking: Ranking, shown) -> list:
    if not shown:
        return ["no candidate left to rank"]
    width, unit = max(len(e.strategy) for e in shown), _unit(ranking)
    if ranking.inference:
        ranked_by = "ranked by predicted inference pass + setup, counted in full (setup: the partitioning time)"
    else:
        ranked_by = f"ranked by predicted epoch + setup / {ranking.epochs} epochs (setup: the partitioning time)"
    lines = [ranked_by,
             f"comm: the bytes a rank's counters count in {'the pass' if ranking.inference else 'an epoch'}; "
             "comm and peak: the largest rank's",
             f"{'rank':>4}  {'candidate':<{width}}  {'ms/' + unit:>10}  {unit + ' ms':>10}  {'setup s':>9}  "
             f"{'comm MiB/rank':>14}  {'peak MiB/rank':>13}  dominant"]
    for i, e in enumerate(shown, 1):
        peak = ("~" if _rough(e) else "") + significant(max(e.peak_bytes) / MiB)
        lines.append(f"{i:>4}  {e.strategy:<{width}}  {significant(ranking.cost(e) * 1e3):>10}  "
                     f"{significant(e.epoch_s * 1e3):>10}  {significant(e.setup_s):>9}  "
                     f"{significant(max(e.rank_bytes) / MiB):>14}  {peak:>13}  {e.dominant}")
    if len(shown) < len(ranking.ranked):
        lines.append(f"      ({len(ranking.ranked) - len(shown)} more ranked below these)")
    if any(_rough(e) for e in shown):
        lines.append("~ rough: grid3d's peak comes from block shapes under an even spread, not yet checked "
                     "against runs")
    lines.append("how these rankings fared against measured epochs: docs/performance.md, 'The planner against measurement'")
    return lines


def dropped(ranking: Ranking) -> list:
    if not ranking.dropped:
        return []
    return ["not ranked:"] + [f"  {d.name}: {d.reason}" for d in ranking.dropped]


def choice(ranking: Ranking, json_path=None) -> str:
    """One line: the first candidate and why."""
    ranked = ranking.ranked
    if not ranked:
        return ("choice: none: every candidate was left out (above)"
                + (f"; {json_path} not written" if json_path else ""))
    best = ranked[0]
    if len(ranked) == 1:
        return f"choice: {best.strategy} (the only candidate left)"
    quickest = min(ranked, key=lambda e: e.epoch_s)
    unit = _unit(ranking)
    why = f"fastest predicted {unit}"
    aside = ""
    if quickest.epoch_s < best.epoch_s:
        why += " with its setup" if ranking.inference else f" with the setup spread over {ranking.epochs} epochs"
        aside = (f"; {quickest.strategy}'s {unit} alone is {100 * (1 - quickest.epoch_s / best.epoch_s):.1f}% "
                 f"shorter, but it takes {quickest.setup_s:.3g} s to set up")
    nxt = ranked[1]
    first, second = cost(best, ranking.epochs), cost(nxt, ranking.epochs)
    lead = second / first if first > 0 else float("inf")
    aside += _mostly(best, unit)
    if lead < CLOSE:
        return (f"choice: {best.strategy} ({why}, but {nxt.strategy} is within {100 * (lead - 1):.1f}%, "
                f"closer than the models can tell apart{aside})")
    return f"choice: {best.strategy} ({why}, {lead:.2f}x ahead of the next, {nxt.strategy}{aside})"


def _mostly(estimate, unit: str = "epoch") -> str:
    """What most of the candidate's epoch (or pass: ``unit``) goes to, when its terms are known."""
    if not estimate.terms or estimate.epoch_s <= 0:
        return ""
    share = estimate.terms[estimate.dominant] / estimate.epoch_s
    return f"; {100 * share:.0f}% of its {unit} is {estimate.dominant}"

"""The one result every strategy's model gives, so that a ranking can put them side by side.

Units: seconds and bytes. Times are one epoch's (a training step and, unless the model was
asked otherwise, the evaluation pass the trainer runs every epoch), or, for a model asked for
``inference``, one inference pass's (that evaluation alone: its "epoch" fields then describe
the pass); ``setup_s`` is paid once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import strategies


@dataclass(frozen=True)
class Estimate:
    """A strategy's predicted epoch.

    ``strategy``: a display name ("partition hp", "tensor decoupled", "grid3d 2x1x1").
    ``epoch_s = compute_s + comm_s``: ``compute_s`` is the slowest rank's compute (every
    exchange waits for it), ``comm_s`` the communication, nothing overlapped. ``setup_s``:
    one-off work before the first epoch (partitioning), 0 when unknown.
    ``rank_bytes[r]``: the bytes rank r's ``Comm`` counters count in one epoch, every phase;
    ``phase_bytes``: per phase (the names the counters use: ``halo``, ``layout``,
    ``share``, ``grad``, ``metrics``), the sum over ranks, so that the run's
    ``<phase>_bytes`` equal them and ``bytes_total`` equals their sum;
    ``rank_phase_bytes``: the same per phase and rank (a run's ``rank_<phase>_bytes``).
    ``peak_bytes[r]``: tensor bytes rank r holds at its peak: its share of the graph
    structure the strategy keeps, its vertex data (features, labels, masks), the
    parameters with gradients and optimizer state, and twice the activations a training
    step saves for backward (them and their gradients); not the process's baseline
    (interpreter, libraries, allocator slack) nor a whole graph loaded before sharding. For
    one inference pass: what a pass without gradients holds, where the model says
    (``trace.peak_bytes``, ``grid3d.peak_bytes``), else the training step's as a bound.
    ``dominant``: the largest of the epoch's terms (``aggregate``, ``dense``, and each
    communication phase)."""

    strategy: str
    epoch_s: float
    compute_s: float
    comm_s: float
    setup_s: float
    rank_bytes: list
    phase_bytes: dict
    peak_bytes: list
    dominant: str
    rank_phase_bytes: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)   # the run settings that train it (``name_of``'s)
    terms: dict = field(default_factory=dict)      # the epoch's seconds by term (what ``dominant`` names)

    @classmethod
    def build(cls, compute: dict, comm: dict, rank_phase_bytes: dict, peak_bytes: list,
              setup_s: float = 0.0, **settings) -> "Estimate":
        """From the epoch's terms in seconds (``compute``: the slowest rank's, by kind;
        ``comm``: by phase) and the bytes per phase and rank; ``settings``: ``strategy`` and
        what else the run needs (``partitioner``, ``grid``, ``decoupled``), which name it."""
        ranks = len(peak_bytes)
        terms = {**compute, **comm}
        compute_s, comm_s = sum(compute.values()), sum(comm.values())
        return cls(name_of(**settings), compute_s + comm_s, compute_s, comm_s, float(setup_s),
                   [sum(int(b[r]) for b in rank_phase_bytes.values()) for r in range(ranks)],
                   {p: sum(int(v) for v in b) for p, b in rank_phase_bytes.items()},
                   [int(b) for b in peak_bytes], max(terms, key=terms.get) if terms else "",
                   {p: [int(v) for v in b] for p, b in rank_phase_bytes.items()}, dict(settings), terms)


def name_of(strategy: str, partitioner=None, grid=None, decoupled: bool = False, **_) -> str:
    """A candidate's display name, the one a plan and a run's metrics (``candidate``) use:
    "partition hp", "tensor decoupled", "grid3d 2x1x2", "single", "offload gp"; ``grid``
    is "X,Y,Z" or a Grid."""
    words = {"partitioner": partitioner, "decoupled": "decoupled" if decoupled else None,
             "grid": str(grid).replace(",", "x") if grid is not None else None}
    return " ".join([strategy] + [words[s] for s in strategies.spec(strategy).named_by if words[s]])

"""The link task as the registry of tasks sees it (``--task link``): its name, its metrics and
the one that selects the model. Its loss and metrics are computed over node pairs by
``gnnmesh.link.trainer.LinkTrainer``, not over a graph's labels."""

from __future__ import annotations

from ..tasks import Task
from .metrics import SELECTION

DEFAULT_HITS = (10, 50, 100)


class LinkTask(Task):
    name = "link"
    metric = SELECTION

    def __init__(self, hits: tuple = DEFAULT_HITS):
        self.hits = tuple(hits)
        self.metrics = (SELECTION, *(f"hits@{k}" for k in self.hits), "auc", "ap")

    def check_labels(self, y, masks, where: str) -> None:
        """Link prediction reads no labels: the edges are its supervision."""

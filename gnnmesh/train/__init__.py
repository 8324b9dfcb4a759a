"""Full-graph training loop, metrics and checkpoints."""

from .trainer import EpochResult, Summary, Trainer, train

__all__ = ["Trainer", "EpochResult", "Summary", "train"]

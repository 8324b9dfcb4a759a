"""Full-graph training loop, metrics and checkpoints."""

from .callbacks import EarlyStopping
from .trainer import EpochResult, Summary, Trainer, train

__all__ = ["Trainer", "EpochResult", "Summary", "train", "EarlyStopping"]

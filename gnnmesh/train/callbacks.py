"""Per-epoch callbacks: ``Trainer.fit(callbacks=[...])`` calls each with the epoch's record
(an ``EpochResult``) once it is complete; a callback that returns a true value stops the run
after that epoch (a string says why). ``EarlyStopping`` is the one ``--patience`` adds."""

from __future__ import annotations

import math
from typing import Optional


class EarlyStopping:
    """Stop once ``patience`` epochs have passed since the best validation selection metric,
    judged on the epochs that evaluate (``best_epoch`` is the trainer's model selection)."""

    def __init__(self, patience: int):
        self.patience = patience

    def __call__(self, record) -> Optional[str]:
        evaluated = not math.isnan(record.val_acc)
        if evaluated and record.best_epoch > 0 and record.epoch - record.best_epoch >= self.patience:
            return (f"no better validation metric in {record.epoch - record.best_epoch} epochs "
                    f"(--patience {self.patience}); the best was epoch {record.best_epoch}'s")
        return None


def stop_reason(callbacks, record) -> Optional[str]:
    """Why the first of ``callbacks`` that asks to stop after ``record`` does (None: none does)."""
    for callback in callbacks:
        answer = callback(record)
        if answer:
            return answer if isinstance(answer, str) else f"{_name(callback)} stopped the run"
    return None


def _name(callback) -> str:
    return getattr(callback, "__name__", type(callback).__name__)

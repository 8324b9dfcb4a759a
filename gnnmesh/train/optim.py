"""The optimizer and the learning-rate schedule a run's ``[training]`` settings name, built
from torch.optim and torch.optim.lr_scheduler.

Every rank builds the same ones and steps them on the same, already summed gradients and
metrics, so that the ranks' parameters stay the single process's. Their state dicts go into
checkpoints, and a resumed run continues the schedule where it stopped.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ..settings import TrainingSection


def optimizer(params, training: TrainingSection) -> torch.optim.Optimizer:
    """The ``--optimizer`` of ``training`` on ``params``, at its ``lr`` and ``weight_decay``."""
    if training.optimizer == "sgd":
        return torch.optim.SGD(params, lr=training.lr, weight_decay=training.weight_decay,
                               momentum=training.momentum or 0.0, nesterov=training.nesterov)
    kind = torch.optim.AdamW if training.optimizer == "adamw" else torch.optim.Adam
    return kind(params, lr=training.lr, weight_decay=training.weight_decay)


class LearningRate:
    """The ``--lr-schedule`` after ``--warmup-epochs`` of linear warm-up, stepped once per
    epoch (``step``). The warm-up (``LinearLR``) runs the first epochs from lr/(N+1) up to lr;
    the schedule then starts from lr, as if the run began there. A plateau schedule
    (``ReduceLROnPlateau``, on the selection metric, higher is better) steps only on epochs
    that evaluate."""

    def __init__(self, opt: torch.optim.Optimizer, training: TrainingSection):
        self.warmup_epochs = training.warmup_epochs
        # the schedule first: each scheduler sets the rate when built, and the warm-up's must hold
        self.schedule = _schedule(opt, training)
        self.warmup = None if not self.warmup_epochs else torch.optim.lr_scheduler.LinearLR(
            opt, start_factor=1.0 / (self.warmup_epochs + 1), total_iters=self.warmup_epochs)
        self.plateau = training.lr_schedule == "plateau"

    def step(self, epoch: int, selection: Optional[float]) -> None:
        """After ``epoch`` (1-based): ``selection``, its validation selection metric (NaN or
        None where it did not evaluate)."""
        if epoch <= self.warmup_epochs:
            self.warmup.step()
        elif self.plateau:
            if selection is not None and not math.isnan(selection):
                self.schedule.step(selection)
        elif self.schedule is not None:
            self.schedule.step()

    def state_dict(self) -> dict:
        """The schedulers' states (None for one not used)."""
        return {name: None if getattr(self, name) is None else getattr(self, name).state_dict()
                for name in ("warmup", "schedule")}

    def load_state_dict(self, state: Optional[dict]) -> None:
        """Continue from ``state`` (None: a checkpoint from before schedules, whose run had
        none, as this one has then: its settings are checked to match)."""
        for name in ("warmup", "schedule"):
            if getattr(self, name) is not None:
                getattr(self, name).load_state_dict(state[name])


def _schedule(opt: torch.optim.Optimizer, training: TrainingSection):
    """torch's scheduler for ``--lr-schedule`` (None: constant), with torch's defaults for the
    settings left unset."""
    schedulers = torch.optim.lr_scheduler
    if training.lr_schedule == "step":
        return schedulers.StepLR(opt, step_size=training.step_size, **_given(gamma=training.gamma))
    if training.lr_schedule == "cosine":
        return schedulers.CosineAnnealingLR(opt, T_max=training.epochs - training.warmup_epochs)
    if training.lr_schedule == "plateau":
        return schedulers.ReduceLROnPlateau(opt, mode="max", **_given(factor=training.gamma,
                                                                     patience=training.lr_patience))
    return None


def _given(**values) -> dict:
    """The keyword arguments that are set: torch's defaults hold for the rest."""
    return {name: value for name, value in values.items() if value is not None}


def learning_rate(opt: torch.optim.Optimizer) -> float:
    """The rate the next step takes (every parameter group has the same)."""
    return float(opt.param_groups[0]["lr"])

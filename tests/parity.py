"""The shared parity harness: any strategy, any world size, against the single-process run."""

from __future__ import annotations

import torch

from gnnmesh.config import Config
from gnnmesh.train import Trainer
from gnnmesh.train.minibatch import MiniBatchTrainer


def train(graph, config: Config, strategy=None) -> dict:
    trainer = (MiniBatchTrainer if config.training.minibatch else Trainer)(config, graph, strategy)
    summary = trainer.fit()
    return {"losses": [r.loss for r in summary.history],
            "accs": [(r.train_acc, r.val_acc, r.test_acc) for r in summary.history],
            "params": {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()},
            "extra": [r.extra for r in summary.history]}


def assert_same_run(got: dict, want: dict, rtol: float = 1e-5) -> None:
    """Losses and final parameters equal to ``rtol`` relative (atol scaled to each tensor)."""
    losses, ref = torch.tensor(got["losses"]), torch.tensor(want["losses"])
    assert torch.allclose(losses, ref, rtol=rtol, atol=0), f"losses differ:\n{losses}\n{ref}"
    for name, value in want["params"].items():
        scale = float(value.abs().max()) or 1.0
        diff = float((got["params"][name] - value).abs().max())
        assert diff <= rtol * scale, f"parameter {name}: max difference {diff:.3g} (scale {scale:.3g})"

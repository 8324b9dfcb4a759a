"""The shared parity harness: any strategy, any world size, against the single-process run."""

from __future__ import annotations

import functools

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


def losses_of(config, graph, world: int, fields: dict) -> list:
    """The losses of a run of ``config(nproc=world, **fields)`` on ``graph`` (mini-batch or full)."""
    trains = MiniBatchTrainer if fields.get("minibatch") else Trainer
    return [r.loss for r in trains(config(nproc=world, **fields), graph).fit().history]


def single_runs(losses):
    """``single(**fields)``: ``losses(0, 1, fields)``, each settings' run made once and kept
    (the tests of a module compare with the same few single-process runs)."""
    @functools.lru_cache(maxsize=None)
    def run(fields: tuple) -> list:
        return losses(0, 1, dict(fields))
    return lambda **fields: run(tuple(sorted(fields.items())))

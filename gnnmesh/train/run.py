"""From a Config to a finished run: load the data, train, print progress and a summary."""

from __future__ import annotations

import time

import torch

from .. import datasets
from ..config import Config
from ..graph import Graph
from ..transforms import reorder
from .trainer import EpochResult, Summary, Trainer


def load_graph(config: Config) -> Graph:
    graph = datasets.load(config.dataset, root=config.data_root)
    if config.reorder != "none":
        graph = reorder(graph, config.reorder)
    return graph


def run_training(config: Config, quiet: bool = False) -> Summary:
    if config.threads:
        torch.set_num_threads(config.threads)
    t0 = time.perf_counter()
    graph = load_graph(config)
    trainer = Trainer(config, graph)
    cfg = trainer.config
    say = (lambda *a: None) if quiet else print
    say(f"{graph!r} loaded in {time.perf_counter() - t0:.2f}s")
    say(f"model {cfg.model}: {sum(p.numel() for p in trainer.model.parameters()):,} parameters, "
        f"strategy {cfg.strategy}, device {trainer.device}, {torch.get_num_threads()} threads")

    def progress(r: EpochResult):
        if r.epoch % cfg.log_every == 0 or r.epoch in (1, cfg.epochs):
            say(f"epoch {r.epoch:4d} | loss {r.loss:.4f} | acc train {r.train_acc:.3f} val {r.val_acc:.3f} "
                f"test {r.test_acc:.3f} | {1e3 * r.epoch_time:7.1f} ms (aggregate {1e3 * r.aggregate_time:.1f}, "
                f"dense {1e3 * r.dense_time:.1f}, other {1e3 * r.other_time:.1f})")

    summary = trainer.fit(progress)
    print(f"done: {summary.epochs} epochs in {summary.total_time:.2f}s ({1e3 * summary.mean_epoch_time:.1f} ms/epoch); "
          f"best val {summary.val_acc:.4f} at epoch {summary.best_epoch}, test {summary.test_acc:.4f}, "
          f"final loss {summary.final_loss:.4f}")
    return summary

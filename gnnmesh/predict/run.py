"""A prediction run: from a checkpoint and a graph to a prediction directory (``gnnmesh.predict``),
on one process or as one rank of
a job (``gnnmesh predict --nproc N``, torchrun or Slurm), under any full-graph strategy.

The model's settings come from the checkpoint; the graph, the strategy and its settings
from the command line, as for training. A graph larger than one process is predicted from
its parts (``--parts DIR``), each rank reading only its own folder.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from .. import checkpoint, comm, locks, strategies, tasks, trained
from ..atomic import check_replaceable
from ..config import Config
from ..errors import ConfigError
from ..launch import world_from_env
from ..train.run import adopt_parts, given_dataset, load_once_per_host
from ..train.trainer import Trainer, rank_device
from . import FORMATS, Output, write
from .nodes import CHOICES
from .store import OUTPUT, PARTS


@dataclass(frozen=True)
class Request:
    """What ``gnnmesh predict`` writes: the model of ``checkpoint`` (its ``weights``: best or
    last), its ``output`` (and ``layer`` for embeddings) for ``nodes``, into ``out`` as ``fmt``."""

    checkpoint: str
    out: str
    output: str = "logits"
    layer: Optional[int] = None
    nodes: str = "all"
    fmt: str = "npy"
    weights: str = "best"
    model: Optional[str] = None  # --model: the class of a checkpoint of the user's own model

    def saved_config(self, state: dict) -> Config:
        """The config of the checkpoint ``state`` (read from ``checkpoint``), its model ``model``
        checked against its record, or the file it was trained from found for it
        (``gnnmesh.trained.config_of``: nothing is imported here)."""
        try:
            return trained.config_of(state, self.model, self.checkpoint)
        except ConfigError as err:
            raise ConfigError(f"{self.checkpoint}: {err}") from None

    def check(self) -> None:
        """The request's own errors, before anything is loaded."""
        Output(self.output, self.layer)
        if self.fmt not in FORMATS:
            raise ConfigError(f"--format {self.fmt!r}: choose from {', '.join(FORMATS)}")
        if self.weights not in checkpoint.WEIGHTS:
            raise ConfigError(f"--weights {self.weights!r}: choose from {', '.join(checkpoint.WEIGHTS)}")
        if self.nodes not in CHOICES and not Path(self.nodes).is_file():
            raise ConfigError(f"--nodes {self.nodes}: neither {', '.join(CHOICES)} nor a file of node ids")
        check_replaceable(self.out, OUTPUT)


def run_prediction(config: Config, request: Request, quiet: bool = False) -> Optional[dict]:
    """Write ``request``'s prediction under ``config``'s data and strategy settings; rank 0
    returns the manifest. ``--out`` is locked from the start: a second run given it is refused
    before it loads anything (the ranks of one job share it)."""
    request.check()
    with locks.hold(request.out, OUTPUT.what, peers=True):
        return _run(config, request, quiet)


def _run(config: Config, request: Request, quiet: bool) -> Optional[dict]:
    world = world_from_env()
    rank, world_size = world or (0, 1)
    state = checkpoint.load(request.checkpoint)
    saved = request.saved_config(state)
    if saved.training.task is not None:  # an output its task does not make is refused before loading
        tasks.build(saved.training.task).check_output(request.output)
    config, parts = adopt_parts(with_model(config, saved, request.checkpoint))
    if world and strategies.spec(config.run.strategy).one_process and world_size > 1:
        raise ConfigError(f"this job has {world_size} ranks; choose a parallel --strategy (e.g. partition)")
    config = config.resolved()
    device = rank_device(config)
    if world:
        comm.init(device)
    try:
        manifest = _predict(config, request, state, saved, parts, quiet, rank, world_size)
    except BaseException:
        comm.shutdown()
        raise
    comm.shutdown(clean=True)
    return manifest


def with_model(config: Config, saved: Config, path) -> Config:
    """``config`` with the model settings (and seed and precision) of ``saved``, the config of the
    checkpoint at ``path``: a model the strategy cannot run is refused naming the checkpoint."""
    try:
        return config.updated(**trained.model_settings(saved), seed=saved.training.seed,
                              precision=saved.training.precision)
    except ConfigError as err:
        raise ConfigError(f"{path}: the model it holds: {err}") from None


def _predict(config, request, state, saved, parts, quiet, rank, world_size) -> Optional[dict]:
    say = (lambda *a: None) if quiet or rank != 0 else print
    t0 = time.perf_counter()
    loaded, order = None, None
    if config.planned:
        def load():
            nonlocal loaded
            loaded = _load(config)
            return loaded[0]
        from ..train.auto import choose
        config, _ = choose(config, load, rank, world_size, say, inference=trained.widths_of(state).classes)
    if parts is not None:
        data = parts
        data.check_run(config.run.strategy, world_size, given_dataset(config))
        key = parts.manifest["fingerprint"]
    else:
        data, order, key = load_once_per_host(lambda: loaded or _load(config), rank, world_size)
    dataset = parts.dataset if parts is not None else config.data.dataset
    if saved.data.dataset not in (dataset, data.name):  # by its name or its spec: the same graph
        say(f"note: the model was trained on {saved.data.dataset!r}; predicting on {dataset!r}, a graph of "
            f"the same input width (inductive inference)")
    trainer = Trainer.from_checkpoint(request.checkpoint, data, config, request.weights, model=request.model)
    say(f"{data.describe() if parts is not None else repr(data)} and the model of {request.checkpoint} "
        f"(epoch {trainer.epoch}, {request.weights} weights) loaded in {time.perf_counter() - t0:.2f}s; "
        f"strategy {trainer.strategy.describe()}")
    t0 = time.perf_counter()
    ids, values = trainer.predict(request.output, request.layer, request.nodes, original=order)
    out = Output(request.output, request.layer)
    info = {"output": request.output, "layer": out.layer_of(trainer.model), "nodes": request.nodes,
            "weights": request.weights, "strategy": trainer.strategy.describe(), "ranks": world_size,
            "checkpoint": {"path": str(request.checkpoint), "epoch": trainer.epoch,
                           "sha256": _sha256(request.checkpoint) if rank == 0 else None},
            "graph": {"dataset": dataset, "nodes": int(data.num_nodes), "key": key}}
    manifest = write(request.out, ids, values, info, request.fmt, comm.setup_comm() if world_size > 1 else None)
    if rank == 0:
        width = "" if manifest["width"] is None else f" x {manifest['width']}"
        print(f"wrote {request.output} ({manifest['rows']:,}{width} {manifest['dtype']}) for "
              f"{request.nodes} nodes to {request.out} in {time.perf_counter() - t0:.2f}s, "
              f"{len(manifest[PARTS])} part{'s' if world_size > 1 else ''}")
    return manifest


def _load(config: Config) -> tuple:
    """(the graph renumbered as ``--reorder`` asks, the order or None, the content key of the
    graph as loaded)."""
    from ..datasets import load
    from ..partition import graph_key
    from ..transforms import ORDERS, permute
    graph = load(config.data.dataset, root=config.data.data_root)
    key = graph_key(graph.adj)
    if config.data.reorder == "none":
        return graph, None, key
    order = np.asarray(ORDERS[config.data.reorder](graph), dtype=np.int64)
    return permute(graph, order), order, key


def _sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

"""A prediction run: from a checkpoint and a graph to a prediction directory (``gnnmesh.predict``),
on one process or as one rank of
a job (``gnnmesh predict --nproc N``, torchrun or Slurm), under any full-graph strategy.

The model's settings come from the checkpoint; the graph, the strategy and its settings
from the command line, as for training. A graph larger than one process is predicted from
its parts (``--parts DIR``), each rank reading only its own folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from .. import checkpoint, comm, locks, memory, strategies, tasks, trained
from ..atomic import check_replaceable
from ..config import Config
from ..errors import ConfigError
from ..launch import world_from_env
from ..link import typed as typed_link
from ..train.run import adopt_parts, given_dataset, load_once_per_host
from ..train.trainer import Trainer, rank_device
from . import FORMATS, Output, write
from .nodes import CHOICES, read_node_file
from .pairs import read_pairs_file
from .store import OUTPUT, PARTS
from .types import TypedRows, node_types_of


@dataclass(frozen=True)
class Request:
    """What ``gnnmesh predict`` writes: the model of ``checkpoint`` (its ``weights``: best or
    last), its ``output`` (and ``layer`` for embeddings; None: logits) for ``nodes``, into ``out``
    as ``fmt``. A link model's instead: the scores of the ``pairs`` a file lists, or the ``top_k``
    best candidates of each of the ``queries`` (a file of node ids; None: every node), without
    its known positives where ``exclude_known``; ``link_relation``: the relation a link model
    of a typed graph scores them as (None: the one it was trained on). ``node_type``: a typed
    graph's node type whose rows are written (``all``: every type; None: its target types)."""

    checkpoint: str
    out: str
    output: Optional[str] = None
    layer: Optional[int] = None
    nodes: str = "all"
    fmt: str = "npy"
    weights: str = "best"
    model: Optional[str] = None  # --model: the class of a checkpoint of the user's own model
    pairs: Optional[str] = None
    top_k: Optional[int] = None
    queries: Optional[str] = None
    exclude_known: bool = False
    node_type: Optional[str] = None
    link_relation: Optional[str] = None

    @property
    def of_pairs(self) -> Optional[str]:
        """The flag that asks a link model for pairs (``--pairs``, ``--top-k``), None for node outputs."""
        return "--pairs" if self.pairs is not None else "--top-k" if self.top_k is not None else None

    @property
    def node_output(self) -> str:
        return self.output or "logits"

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
        self._check_pairs()
        Output(self.node_output, self.layer)
        if self.fmt not in FORMATS:
            raise ConfigError(f"--format {self.fmt!r}: choose from {', '.join(FORMATS)}")
        if self.weights not in checkpoint.WEIGHTS:
            raise ConfigError(f"--weights {self.weights!r}: choose from {', '.join(checkpoint.WEIGHTS)}")
        if self.nodes not in CHOICES and not Path(self.nodes).is_file():
            raise ConfigError(f"--nodes {self.nodes}: neither {', '.join(CHOICES)} nor a file of node ids")
        check_replaceable(self.out, OUTPUT)

    def _check_pairs(self) -> None:
        flag = self.of_pairs
        if self.pairs is not None and self.top_k is not None:
            raise ConfigError("--pairs and --top-k: give one (the scores of the pairs listed, or each node's best "
                              "candidates)")
        if self.top_k is None and (self.queries is not None or self.exclude_known):
            raise ConfigError(f"{'--queries' if self.queries is not None else '--exclude-known'} applies to --top-k")
        if flag is None and self.link_relation is not None:
            raise ConfigError("--link-relation applies to a link model's --pairs and --top-k")
        if flag is None:
            return
        given = [name for name, value in (("--output", self.output), ("--layer", self.layer),
                                          ("--node-type", self.node_type)) if value is not None]
        if self.nodes != "all":
            given.append("--nodes")
        if given:
            writes = "the pairs' scores" if self.pairs is not None else "each query's best candidates"
            raise ConfigError(f"{given[0]} applies to node outputs; {flag} writes {writes}")
        if self.top_k is not None and self.top_k < 1:
            raise ConfigError(f"--top-k {self.top_k}: give a count of candidates, 1 or more")
        for name, path in (("--pairs", self.pairs), ("--queries", self.queries)):
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"{name} {path}: no such file")

    def check_model(self, saved: Config) -> None:
        """What the checkpoint's model (of config ``saved``) cannot predict, refused before loading:
        pairs of a model that scores none, an output its task does not make."""
        task = saved.training.task
        if self.of_pairs is not None:
            if task is None or not tasks.spec(task).links:
                raise ConfigError(f"{self.of_pairs}: {self.checkpoint} holds a {task or 'node'} model; scoring node "
                                  "pairs takes a --task link checkpoint")
            return
        if task is not None:
            tasks.build(task).check_output(self.node_output)


def run_prediction(config: Config, request: Request, quiet: bool = False) -> Optional[dict]:
    """Write ``request``'s prediction under ``config``'s data and strategy settings; rank 0
    returns the manifest. ``--out`` is locked from the start: a second run given it is refused
    before it loads anything (the ranks of one job share it)."""
    request.check()
    with locks.hold(request.out, OUTPUT.what, peers=True):
        return _run(config, request, quiet)


def _run(config: Config, request: Request, quiet: bool) -> Optional[dict]:
    # a prediction's temporaries (checks of the parts, halo rows, product pieces) are each
    # freed once used: given back to the system, not kept fragmented in the process's heap
    memory.map_large_blocks()
    world = world_from_env()
    rank, world_size = world or (0, 1)
    state = checkpoint.load(request.checkpoint)
    saved = request.saved_config(state)
    request.check_model(saved)
    config, parts = adopt_parts(with_model(config, saved, request.checkpoint))
    if world and strategies.spec(config.run.strategy).one_process and world_size > 1:
        raise ConfigError(f"this job has {world_size} ranks; choose a parallel --strategy (e.g. partition)")
    config = config.resolved()
    device = rank_device(config)
    if world:
        comm.init(device)
    try:
        with _kernels(parts, world_size):
            manifest = _predict(config, request, state, saved, parts, quiet, rank, world_size)
    except BaseException:
        comm.shutdown()
        raise
    comm.shutdown(clean=True)
    return manifest


def _kernels(parts, world_size: int):
    """Where the sparse products run: ranks predicting from parts run torch's kernels unless
    ``GNNMESH_KERNELS`` names a choice. numba's code and compiler (about 100 MiB a process)
    would be a large share of a rank's memory, for one pass (torch's kernels take about 1.4
    times as long and no more memory per product)."""
    if parts is None or world_size == 1 or os.environ.get("GNNMESH_KERNELS", "").strip():
        return contextlib.nullcontext()
    from ..ops import compiled
    return compiled.disabled()


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
    # a link model's split is drawn on the graph as the user numbers it, whatever --reorder renumbers
    trainer = Trainer.from_checkpoint(request.checkpoint, data, config, request.weights, model=request.model,
                                      original=order)
    say(f"{data.describe() if parts is not None else repr(data)} and the model of {request.checkpoint} "
        f"(epoch {trainer.epoch}, {request.weights} weights) loaded in {time.perf_counter() - t0:.2f}s; "
        f"strategy {trainer.strategy.describe()}")
    t0 = time.perf_counter()
    extra = {}
    if request.of_pairs is not None:
        ids, values, extra, info, what = _pair_prediction(trainer, request, int(data.num_nodes))
    else:
        ids, values, extra, typed = _node_prediction(trainer, request, data, order)
        info = {"output": request.node_output, "layer": trainer.output_layer(request.node_output, request.layer),
                "nodes": request.nodes, **typed}
        kinds = f"{', '.join(typed['node_type'])} " if typed else ""
        what = f"{request.node_output} (ROWS) for {request.nodes} {kinds}nodes"
    info.update({"weights": request.weights, "strategy": trainer.strategy.describe(), "ranks": world_size,
                 "checkpoint": {"path": str(request.checkpoint), "epoch": trainer.epoch,
                                "sha256": _sha256(request.checkpoint) if rank == 0 else None},
                 "graph": {"dataset": dataset, "nodes": int(data.num_nodes), "key": key}})
    manifest = write(request.out, ids, values, info, request.fmt, comm.setup_comm() if world_size > 1 else None,
                     extra=extra)
    if rank == 0:
        width = "" if manifest["width"] is None else f" x {manifest['width']}"
        rows = f"{manifest['rows']:,}{width} {manifest['dtype']}"
        print(f"wrote {what.replace('ROWS', rows)} to {request.out} in {time.perf_counter() - t0:.2f}s, "
              f"{len(manifest[PARTS])} part{'s' if world_size > 1 else ''}")
    return manifest


def _node_prediction(trainer, request: Request, data, order) -> tuple:
    """(ids, values, extra columns, the manifest's record of node types) of this rank's node
    outputs; a typed graph's only of the chosen node types, each row named by its type and
    type-local id (``types.py``)."""
    types = node_types_of(data)
    if types is None:
        if request.node_type is not None:
            raise ConfigError(f"--node-type {request.node_type}: the graph has no node types (a typed graph has)")
        ids, values = trainer.predict(request.node_output, request.layer, request.nodes, original=order)
        return ids, values, {}, {}
    rows = TypedRows.of(types, request.node_type)
    listed = rows.listed(request.nodes)
    ids, values = trainer.predict(request.node_output, request.layer, request.nodes if listed is None else listed,
                                  original=order)
    keep = rows.keep(ids)
    ids, values = ids[keep], values[keep]
    return ids, values, rows.columns(ids), {"node_types": list(types.names), "node_type": rows.names}


def _pair_prediction(trainer, request: Request, num_nodes: int) -> tuple:
    """(ids, values, extra columns, the manifest's record, what the summary says was written) of
    a link model's ``--pairs`` or ``--top-k`` prediction on this rank."""
    if request.pairs is not None:
        pairs = read_pairs_file(request.pairs, num_nodes)
        places, scores = trainer.score_pairs(pairs, request.link_relation)
        info = {"output": "scores", "index": "pairs", "pairs": str(request.pairs), **_relation_info(trainer, request)}
        return places, scores, {"pairs": pairs[places]}, info, f"scores (ROWS) of the pairs in {request.pairs}"
    queries = None if request.queries is None else read_node_file(request.queries, num_nodes, "--queries")
    ids, candidates, scores = trainer.top_k(request.top_k, queries, request.exclude_known, request.link_relation)
    info = {"output": "top-k", "k": request.top_k, "queries": request.queries or "all",
            "exclude_known": request.exclude_known, **_relation_info(trainer, request)}
    return ids, scores, {"candidates": candidates}, info, \
        f"the {request.top_k} best candidates (ROWS scores) of {'every node' if queries is None else 'each query'}"


def _relation_info(trainer, request: Request) -> dict:
    """The manifest's record of the relation a typed link model scored (none for another model)."""
    relations = trainer.split.relations
    if not relations:
        return {}
    return {"relation": relations[typed_link.relation_index(relations, request.link_relation)]}


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

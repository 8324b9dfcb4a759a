"""The full-graph trainer: the optimizer and learning-rate schedule of ``[training]`` on the
train-mask loss (gradients clipped to a global norm where asked), the selection metric on every
split each epoch, best-validation model selection, early stopping and per-epoch callbacks,
checkpoints and per-epoch metrics.

The trainer is the same for every strategy: the strategy hands it a RankData (GraphView and
local vertex rows), reduces counts across ranks and keeps gradients in sync.
"""

from __future__ import annotations

import atexit
import copy
import math
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F  # noqa: F401  (the losses are gnnmesh.tasks'; tests time them through F)

from .. import checkpoint, comm, launch, locks, memory, strategies, tasks, trained
from ..atomic import check_writable
from ..config import Config
from ..datasets import structural_features
from ..errors import ConfigError, TrainingDiverged
from ..graph import Graph
from ..layout import ParallelLayout
from ..models import names as model_names
from ..models import options_of
from ..models import user as user_models
from ..models import user_file
from ..models.row_wise import row_mixing_problem
from ..ops import profile
from ..ops.precision import widened
from ..parallel import Strategy
from ..planner.estimate import name_of
from ..settings import BUILT_IN_OPTIONS, ModelSection
from ..trained import Widths
from . import embeddings, optim, precision
from .callbacks import EarlyStopping, stop_reason
from .metrics import MetricsFile, to_json


@dataclass
class EpochResult:
    epoch: int
    loss: float
    train_acc: float
    val_acc: float
    test_acc: float
    epoch_time: float
    aggregate_time: float
    dense_time: float
    other_time: float
    best_epoch: int
    best_val_acc: float
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        record = asdict(self)
        record.update(record.pop("extra"))
        return to_json(record)


@dataclass
class Summary:
    epochs: int
    best_epoch: int
    val_acc: float
    test_acc: float
    final_loss: float
    total_time: float
    mean_epoch_time: float
    history: list = field(default_factory=list)
    memory: dict = field(default_factory=dict)  # the last epoch's peaks (high-water marks: the whole run's)
    metric: str = "accuracy"  # what val_acc and test_acc hold: the task's selection metric
    stopped: Optional[str] = None  # why the run stopped before --epochs (the model then holds the best parameters)


def candidate_name(config: Config, world_size: int) -> str:
    """The strategy's name as a plan gives it ("partition hp", "grid3d 1x2x2", ...;
    ``planner.estimate.name_of``): what a metrics record's ``candidate`` says."""
    named_by_grid = "grid" in strategies.spec(config.run.strategy).named_by
    grid = ParallelLayout.for_strategy(config.run.strategy, world_size, config.grid3d.grid).grid if named_by_grid \
        else None
    partitioner = config.partition.partitioner if world_size > 1 else None   # one rank is not partitioned
    return name_of(config.run.strategy, partitioner, grid, config.model.decoupled)


def rank_device(config: Config) -> torch.device:
    """This rank's device under a resolved ``config``: on CUDA, the GPU of its local rank
    (wrapped over the host's GPUs: ranks beyond them share one)."""
    if config.run.device == "cuda":
        return torch.device("cuda", comm.local_gpu())
    return torch.device(config.run.device)


class Trainer:
    def __init__(self, config: Config, data, strategy: Optional[Strategy] = None, widths: Optional[Widths] = None,
                 model: Optional[torch.nn.Module] = None, task: Optional[tasks.Task] = None):
        """``data``: a Graph, or a parts directory opened with ``gnnmesh.parts.open_parts``
        (each rank then reads only its own folder). ``strategy``: one built by the caller;
        by default the config's, on the layout it gives for this job's ranks. ``widths``: the
        model's input width and classes where they are not the graph's (a checkpoint's model
        predicting on a graph without labels). ``model``: a model built by the caller (any
        ``nn.Module`` called as ``model(view, x)``; ``gnnmesh.models.contract`` says what each
        strategy needs of it) instead of the config's. ``task``: a loss and metrics of the
        caller's (``gnnmesh.tasks.custom`` or a ``Task``) instead of ``--task``'s, by default
        inferred from the labels (``gnnmesh.tasks.infer``)."""
        self.config = config.resolved()
        self._check_training_mode()
        self.device = rank_device(self.config)
        precision.check_device(self.config.training.precision, self.device)
        built_here = strategy is None
        if strategy is None:
            if comm.join_job(self.device):  # a script under torchrun: this rank joins its job, as the CLI does
                atexit.register(comm.shutdown)
            layout = ParallelLayout.for_strategy(self.config.run.strategy, comm.world_size(), self.config.grid3d.grid)
            strategy = self.config.strategy_spec.build(self.config, layout, self.device)
        self.strategy = strategy
        if self.config.run.nproc > self.strategy.world_size:
            raise ConfigError(f"config field 'nproc': {self.config.run.nproc} ranks requested but this job has "
                              f"{self.strategy.world_size}; start them with 'gnnmesh train --nproc "
                              f"{self.config.run.nproc}' or 'torchrun --nproc-per-node {self.config.run.nproc} "
                              f"SCRIPT.py'")
        profile.sync_cuda["on"] = self.device.type == "cuda"
        self.task, self.task_note = self._task(data, task)  # labels that do not fit are refused before the graph is split
        embedded = None  # the global ids of the rows with learned embeddings (--embed-dim)
        if isinstance(data, Graph):
            x = _features(data) if widths is None else input_features(data)
            if self.config.model.embed_dim:
                embedded = embeddings.embedded_ids(data)
                x = embeddings.with_embeddings(x, embedded, self.config.model.embed_dim, self.config.training.seed)
            self.rank_data = self.strategy.rank_data(data, x, self.config.training.seed, self.device)
            num_features = x.shape[1]
        else:  # its writer checked labels and split, and stored the features as _features does
            if self.config.model.embed_dim:
                raise ConfigError("config field 'embed_dim': learned embeddings train from a graph, not from "
                                  "--parts (the parts hold no embeddings)")
            if built_here:  # one line before any rank reads a folder that is not its own
                data.check_run(self.config.run.strategy, self.strategy.world_size)
            self.rank_data = self.strategy.rank_data_from_parts(data, self.config.training.seed, self.device)
            num_features = data.num_features
        if widths is not None:
            widths.check(num_features, self.output_width, f"dataset '{data.name}'")
        self.name, self.num_nodes = data.name, data.num_nodes
        if isinstance(data, Graph) and "dataset" not in self.config.given and data.name != self.config.data.dataset:
            # a graph given in Python: checkpoints and metrics record the graph trained on, not --dataset's default
            self.config = self.config.updated(dataset=data.name).resolved()
        self.num_features, self.num_classes = (num_features, self.output_width) if widths is None else \
            (widths.features, widths.classes)
        torch.manual_seed(self.config.training.seed)
        relations = _relation_names(data)
        if model is None and self._takes_relations() and self.config.model.relations is None:
            self.config = self.config.updated(relations=",".join(relations)).resolved()
        elif model is None and relations and not self.config.model.user and not self._takes_relations():
            raise ConfigError(f"config field 'model' ({self.config.model.name}): the graph is typed ({len(relations)} "
                              f"relations) and {self.config.model.name} sees one edge type; train it with "
                              f"{' or '.join(_relational_models())}, give a copy per relation "
                              "(gnnmesh.models.per_relation), or load it as one node and edge type with "
                              "':typed=false' in the dataset spec")
        if model is None and self._takes("edge_dim"):
            self.config = _with_edge_dim(self.config, data)
        if model is None:
            model = trained.build(self.config, Widths(self.num_features, self.num_classes))
        elif not self.config.model.user:  # what checkpoints record: the class, to build it again
            built_in = {f: getattr(ModelSection(), f) for f in BUILT_IN_OPTIONS}
            self.config = self.config.updated(model=user_models.name_of(model), **built_in).resolved()
        problem = (row_mixing_problem(model)
                   or self.config.strategy_spec.model_problem(model, self.config.training.minibatch)
                   or _parameter_problem(model))
        if problem:
            raise ConfigError(f"config field 'model' ({self.config.model.name}): {problem}")
        # what a checkpoint keeps of a user's model: its name, its file's hash and path, never its code
        self.own_model = user_file.Trained.of(model, self.config.model.name) if self.config.model.user else None
        self.model = model.to(self.device)
        self.input_embeddings = self._input_embeddings(embedded, num_features)
        self.strategy.agree_parameters(self.model)  # whatever torch seed each rank's caller set
        self.strategy.prepare(self.model)
        self._optimizer: Optional[torch.optim.Optimizer] = None
        self._learning_rate: Optional[optim.LearningRate] = None
        self.grad_norm: Optional[float] = None  # the last update's gradient norm, before clipping
        counts = torch.tensor([float(m.sum()) for m in
                               (self.rank_data.train_mask, self.rank_data.val_mask, self.rank_data.test_mask)])
        self.split_sizes = self.strategy.all_reduce(counts).tolist()
        self._setup_task()
        # what every epoch's record carries besides its measurements (a plan adds its prediction)
        self.labels = {"candidate": candidate_name(self.config, self.strategy.world_size)}
        self.strategy.reset_counters()  # setup traffic and waits belong to no epoch
        self.epoch = 0
        self.best = {"epoch": 0, "val_acc": -1.0, "test_acc": 0.0, "state": None}
        self.history: list[EpochResult] = []
        self.metrics: Optional[list] = None  # the last evaluation's metrics, per split

    def _input_embeddings(self, embedded, num_features: int) -> Optional[embeddings.Embeddings]:
        """The rank's rows of the learned embeddings (None without --embed-dim): the last
        ``embed_dim`` input columns of the rows ``embedded``, wherever the strategy holds them."""
        if embedded is None:
            return None
        cfg = self.config
        if cfg.training.minibatch and (cfg.minibatch.cache_memory or cfg.host_tier.host_store == "file"):
            raise ConfigError("config field 'embed_dim': learned embeddings change every step; a feature cache "
                              "(--cache-memory) or a file store (--host-store file) would serve stale rows")
        rows = self.strategy.input_rows(self.rank_data)
        dim = cfg.model.embed_dim
        return embeddings.Embeddings(rows, embedded, slice(num_features - dim, num_features),
                                     cfg.training.embed_optimizer, cfg.training.embed_lr or cfg.training.lr,
                                     embeddings.world_comm(self.strategy))

    # Whether every rank holds every row's labels (mini-batch training): what the task sums
    # over the training set is then summed on each rank alone.
    holds_every_row = False

    # Whether this class trains sampled mini-batches (``--minibatch``): a class that trains the
    # whole graph refuses a mini-batch config rather than quietly train the whole graph instead.
    trains_minibatches = False

    def _check_training_mode(self) -> None:
        training = self.config.training
        if training.minibatch and not self.trains_minibatches:
            trains_it = tasks.spec(training.task or "classification").minibatch_trainer.replace(":", ".")
            raise ConfigError(f"config field 'minibatch': {type(self).__name__} trains the whole graph; mini-batches "
                              f"train with {trains_it} (which gnnmesh train --minibatch runs)")

    def _takes_relations(self) -> bool:
        return self._takes("relations")

    def _takes(self, option: str) -> bool:
        """Whether the config's built-in model takes ``option``."""
        config = self.config
        return not config.model.user and option in options_of(config.model.name, config.model.decoupled)

    def _task(self, data, given) -> tuple:
        """(the task, how it was inferred: a note, or None when it was given). The built-in task
        the run uses is recorded in the config, so that checkpoints know it."""
        cfg = self.config.training
        where = f"dataset '{data.name}': "
        if isinstance(given, tasks.Task):
            task, note = given, None
        else:
            if isinstance(data, Graph):
                if data.y is None:
                    data.require_node_classification()
                kind, why = tasks.infer(data.y)
            else:  # parts: the task their writer inferred from the whole graph's labels
                kind, why = data.task, "as the parts record them"
            name = given or cfg.task or kind
            note = None if (given or cfg.task) else f"{kind}, inferred from the labels ({why}); --task sets it"
            try:
                task = tasks.build(name, class_weights=cfg.class_weights, regression_loss=cfg.regression_loss)
            except ConfigError as err:
                raise ConfigError(f"{err} (inferred from the labels of dataset '{data.name}': {why})" if note
                                  else str(err)) from None
            if not isinstance(data, Graph) and name != kind and not tasks.spec(name).reads_any_labels:
                raise ConfigError(f"{where}config field 'task': the parts hold {kind} labels, not {name} labels")
            if cfg.task != name:
                self.config = self.config.updated(task=name).resolved()
        if isinstance(data, Graph):
            task.check_labels(data.y, [data.train_mask, data.val_mask, data.test_mask], where)
            label_width = data.y.shape[1] if data.y.dim() == 2 else 1
        else:
            label_width = 1 if tasks.spec(data.task).class_ids else data.num_classes
        self.output_width = task.width(data.num_classes, label_width)
        return task, note

    def _setup_task(self) -> None:
        """The task's view of the labels, what it sums over the training set, and the loss's
        divisor: the sum over ranks of every training row's share (``Task.count``)."""
        s = self.rank_data
        self.targets = self.task.targets(s.y)
        reduce = (lambda t: t) if self.holds_every_row else self.strategy.all_reduce
        train = self.targets[s.train_mask]
        self.task.setup(train, self.num_classes, reduce)
        self.loss_divisor = float(reduce(torch.tensor([self.task.count(train)], dtype=torch.float64))[0])

    def _evaluation(self) -> tasks.Evaluation:
        return tasks.Evaluation(self.task)

    def _selected(self, metrics: list) -> list:
        """The selection metric of every split (what ``train_acc``, ``val_acc``, ``test_acc`` hold)."""
        name = self.task.metric
        if any(name not in m for m in metrics):
            raise ConfigError(f"task {self.task.name!r}: its metrics ({', '.join(metrics[0])}) lack {name!r}, "
                              f"the metric that selects the model")
        return [m[name] for m in metrics]

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The ``--optimizer`` on the model's parameters, made on first use with its learning-rate
        schedule: a trainer that only predicts never pays for it (torch's optimizers import its
        compiler stack: about a second and 70 MiB)."""
        if self._optimizer is None:
            self._optimizer = optim.optimizer(self.trained_parameters(), self.config.training)
            self._learning_rate = optim.LearningRate(self._optimizer, self.config.training)
        return self._optimizer

    @property
    def learning_rate(self) -> optim.LearningRate:
        """The learning-rate schedule (``--lr-schedule`` after ``--warmup-epochs``)."""
        self.optimizer  # made together
        return self._learning_rate

    # -- one epoch -----------------------------------------------------------------------------
    def train_step(self) -> float:
        s = self.rank_data
        self.model.train()
        s.view.set_epoch(self.epoch)

        def loss_of(logits, rows):
            self.check_output(logits)
            # Sum over local train rows / global train count = the single-process mean loss.
            train, targets = s.train_mask[rows], self.targets[rows]
            return self.task.loss(widened(logits[train]), targets[train]) / self.loss_divisor  # a float32 loss

        with self.forward_precision():
            loss = self.strategy.train_loss(self.model, s.view, s.x, loss_of)
        return self.update(loss, f"epoch {self.epoch}")

    def forward_precision(self):
        """The context every forward pass of the model runs in: ``--precision``'s autocast
        (``gnnmesh.train.precision``), the same in training, evaluation and prediction.
        Backward and the optimizer step run outside it."""
        return precision.autocast(self.config.training.precision, self.device)

    def check_output(self, logits: torch.Tensor) -> None:
        """The model's output must be one row of the task's width per node: a model of another
        width is refused before its first update (a classifier with extra columns would train
        without a word). Every rank sees the same width, so all stop alike."""
        if logits.dim() != 2 or logits.shape[1] != self.num_classes:
            got = (f"{logits.shape[1]} outputs per node" if logits.dim() == 2
                   else f"outputs of shape {list(logits.shape)}")
            raise ConfigError(f"config field 'model' ({self.config.model.name}): it gives {got}; the "
                              f"{self.task.name} task on dataset '{self.name}' needs {self.num_classes} "
                              f"(Class(in_dim, num_classes, ...) is built with num_classes={self.num_classes})")

    def update(self, loss: torch.Tensor, where: str, every_grad: bool = False) -> float:
        """One optimizer step on ``loss`` (this rank's part): backward, gradients summed over
        ranks, the step unless the summed loss or a gradient is not finite (TrainingDiverged,
        naming ``where``). ``every_grad``: a parameter without a gradient gets zeros, so that a
        rank whose part touched none still takes part in the sum. Returns the summed loss."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if every_grad:
            for p in self.trained_parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
        self.sync_gradients()
        if self.input_embeddings is not None:
            grads_of_inputs = [self.input_embeddings.gather_gradient()]
        else:
            grads_of_inputs = []
        # Every rank sees the same summed loss and, after the sync, the same gradients, so all
        # stop alike, before the update is applied, at no extra communication.
        value = float(self.strategy.all_reduce(loss.detach().reshape(1).cpu())[0])
        grads = [p.grad for p in self.trained_parameters() if p.grad is not None] + grads_of_inputs
        bad_grads = bool(grads) and not bool(torch.stack([torch.isfinite(g).all() for g in grads]).all())
        if bad_grads or not math.isfinite(value):
            what = f"loss {value}" + (", a gradient not finite" if bad_grads else "")
            raise TrainingDiverged(f"{where}: training diverged ({what}); stopped before "
                                   f"this update, no checkpoint written for it (a lower --lr may help)")
        self._clip()
        self.optimizer.step()
        if self.input_embeddings is not None:
            self.input_embeddings.step()
        return value

    def trained_parameters(self) -> list:
        """What the optimizer updates: the model's parameters (a task's own modules add theirs)."""
        return list(self.model.parameters())

    def sync_gradients(self) -> None:
        """Make every rank's gradients the full graph's (``Strategy.sync_gradients``)."""
        self.strategy.sync_gradients(self.model)

    def _clip(self) -> None:
        """Scale the gradients to ``--clip-grad-norm`` where their norm is larger. After the
        sync every rank holds the whole model's gradient (``Strategy.sync_gradients``), so the
        norm each computes is the single process's, with no further reduction."""
        limit = self.config.training.clip_grad_norm
        trained = [p for p in self.trained_parameters() if p.grad is not None]
        if limit is not None and trained:
            self.grad_norm = float(torch.nn.utils.clip_grad_norm_(trained, limit))

    @torch.no_grad()
    def evaluate(self) -> list[float]:
        """The task's selection metric on the train, validation and test rows; every metric of
        each split goes to ``self.metrics``."""
        s = self.rank_data
        self.model.eval()
        evaluation = self._evaluation()
        masks, ids = [s.train_mask, s.val_mask, s.test_mask], s.row_ids() if self.task.gathers else None
        with self.forward_precision():
            self.strategy.evaluate_rows(self.model, s.view, s.x, lambda logits, rows: evaluation.add(
                widened(logits), self.targets[rows], [m[rows] for m in masks], None if ids is None else ids[rows]))
        self.metrics = evaluation.result(self.strategy.all_reduce, self.split_sizes, self.strategy.metrics_comm())
        return self._selected(self.metrics)

    def run_epoch(self) -> EpochResult:
        try:
            return self._run_epoch()
        except (ConfigError, TrainingDiverged):
            raise
        except Exception as err:  # in the user's model, most likely: their traceback, and which model
            if self.config.model.user:
                user_models.note(err, f"raised in epoch {self.epoch} while running the model {self.config.model.name}")
            raise

    def _run_epoch(self) -> EpochResult:
        self.epoch += 1
        profile.take()
        self.metrics = None
        start = time.perf_counter()
        loss = self.train_step()
        compute = time.perf_counter() - start
        if self.epoch % self.config.training.eval_every == 0 or self.epoch == self.config.training.epochs:
            t0 = time.perf_counter()
            accs = self.evaluate()
            compute += time.perf_counter() - t0
            self._select(accs)
        else:
            accs = [float("nan")] * 3
        rate = optim.learning_rate(self.optimizer)  # this epoch's, before the schedule steps
        self.learning_rate.step(self.epoch, accs[1])
        epoch_time = time.perf_counter() - start
        aggregate = profile.take().get("aggregate", 0.0)
        extra = {**self.labels, **tasks.record_fields(self.task, self.metrics), "lr": rate,
                 **({} if self.grad_norm is None else {"grad_norm": self.grad_norm}),
                 **self.strategy.report(epoch_time, memory.rank_peaks(self.device))}
        # waiting for other ranks is neither aggregation nor dense compute: it counts as "other"
        dense = compute - aggregate - extra.get("comm_time", 0.0)
        result = EpochResult(self.epoch, loss, *accs, epoch_time, aggregate, dense,
                             epoch_time - aggregate - dense, self.best["epoch"], self.best["val_acc"], extra)
        self.history.append(result)
        return result

    def _select(self, accs):
        best = self.best["val_acc"]
        if accs[1] > best or (self.best["state"] is None or math.isnan(best)) and not math.isnan(accs[1]):
            self.best = {"epoch": self.epoch, "val_acc": accs[1], "test_acc": accs[2],
                         "state": copy.deepcopy(self.model.state_dict())}
            if self.input_embeddings is not None:
                self.input_embeddings.keep_best()

    # -- using the model -------------------------------------------------------------------------
    @classmethod
    def from_checkpoint(cls, path, data, config: Optional[Config] = None, weights: str = "best",
                        strategy: Optional[Strategy] = None, task: Optional[tasks.Task] = None,
                        model=None, original=None) -> "Trainer":
        """The trainer of the model in the checkpoint at ``path`` (its model settings, its
        ``weights``: ``best`` or ``last``) on ``data`` (a Graph, labelled or not, or parts)
        under ``config``'s strategy and data settings (default: one process). A checkpoint
        from any strategy and rank count loads under any other; a model whose input width or
        number of classes is not the graph's is a ConfigError naming ``path``. The task is the
        checkpoint's (``task``: a task of the caller's, which checkpoints do not record).
        A checkpoint of your own model takes ``model``: its class, or its name as ``--model``
        gives it; without it, the file it was trained from, found from the checkpoint's record
        of it (``gnnmesh.trained.config_of``). ``original``: where ``data`` was renumbered
        (``--reorder``), the original id of each of its nodes, which a link model's trainer
        takes (its split is drawn on the original numbering; pairs are named by original ids)."""
        state = checkpoint.load(path)
        try:
            saved = trained.config_of(state, model, path)
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from None
        config = (config or Config()).updated(**trained.model_settings(saved), seed=saved.training.seed,
                                              precision=saved.training.precision)  # predict as it was trained
        if saved.training.task is not None and task is None:
            trains_it = tasks.spec(saved.training.task).trainer_class()
            cls = trains_it if issubclass(trains_it, cls) else cls  # a link checkpoint: a LinkTrainer
            config = config.updated(task=saved.training.task, class_weights=None, regression_loss=None,
                                    **cls.settings_of_checkpoint(saved))
        widths = trained.widths_of(state)
        if isinstance(data, Graph):
            data = labelled(data, widths.classes, saved.training.task)
        try:
            built = None
            if isinstance(model, type):  # the caller's class itself: built, not imported again by name
                torch.manual_seed(config.training.seed)
                built = trained.build(config.resolved(), widths, model)
            links = saved.training.task is not None and tasks.spec(saved.training.task).links
            renumbered = {"original": original} if original is not None and links else {}  # node models: predict's
            trainer = cls(config, data, strategy, widths=widths, task=task, model=built, **renumbered)
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from None
        values, trainer.epoch = checkpoint.weights(state, weights)
        trained.load_state(trainer.model, values, str(path))
        trainer.load_task_weights(state, weights, str(path))
        trainer._restore_input_embeddings(state, weights, path, optimizer=False)
        return trainer

    @classmethod
    def settings_of_checkpoint(cls, saved: Config) -> dict:
        """The settings of ``saved`` (a checkpoint's config) besides the model's that this
        trainer needs to use the checkpoint, by flat name (none: the model's are enough)."""
        return {}

    def load_task_weights(self, state: dict, weights: str, where: str) -> None:
        """Take up what the checkpoint ``state`` holds besides the model (none here), its
        ``weights`` (``best`` or ``last``)."""

    def predict(self, output: str = "logits", layer: Optional[int] = None, nodes="all",
                original=None) -> tuple:
        """``(ids, values)``: this rank's rows of the model's ``output`` (``logits``, ``probs``,
        ``labels``, or ``embeddings``: what the model's ``embed(view, x)`` returns, else layer
        ``layer``'s output of a layer stack, 1-based, by default the last hidden layer's; a
        model that says neither is refused) for ``nodes`` (``all``, ``train``, ``val``, ``test``, a file of node
        ids or an array of them), as NumPy arrays with global node ids. Full-graph and exact,
        in eval mode, under every strategy: the ranks' rows together are the single
        process's. ``original``: where the graph was renumbered (``--reorder``), the original
        id of each of its nodes; the ids listed and the ids returned are then original ids."""
        from ..predict import Output, read_node_file, selected
        out = Output(output, layer)
        listed = None
        if not isinstance(nodes, str):
            listed = np.unique(np.asarray(nodes, dtype=np.int64))
            if len(listed) and (listed[0] < 0 or listed[-1] >= self.num_nodes):
                raise ConfigError(f"nodes: ids must be 0 to {self.num_nodes - 1}")
            nodes = "listed"
        elif nodes not in ("all", "train", "val", "test"):
            listed = read_node_file(nodes, self.num_nodes)
        ids = self.rank_data.row_ids().cpu().numpy()
        if original is not None:  # rows are named, and chosen, by the ids the user knows
            ids = np.asarray(original, dtype=np.int64)[ids]
        with self.forward_precision():
            values = self.node_outputs(out)
        keep = selected(nodes, self.rank_data, ids, listed)
        return ids[keep], values.cpu().numpy()[keep]

    def node_outputs(self, out) -> torch.Tensor:
        """This rank's rows of the ``gnnmesh.predict.Output`` ``out``, in eval mode."""
        from ..predict import rank_output
        return rank_output(self.strategy, self.model, self.rank_data, out, self.task)

    def output_layer(self, output: str, layer: Optional[int]) -> Optional[int]:
        """The 1-based layer whose output ``predict(output, layer)`` writes (None: the model's
        ``embed``), as a prediction's manifest records it."""
        from ..predict import Output
        return Output(output, layer).layer_of(self.model)

    # -- checkpoints -----------------------------------------------------------------------------
    def _save_checkpoint(self) -> None:
        """Rank 0 writes the checkpoint; every rank takes part in gathering the embeddings."""
        table = self.input_embeddings.record() if self.input_embeddings is not None else None
        if self.strategy.rank == 0:
            checkpoint.save(self.config.run.checkpoint, self.state(embedded=table))

    def state(self, path=None, embedded: Optional[dict] = None) -> dict:
        """This run's checkpoint (``gnnmesh.checkpoint`` holds its format), to be written at
        ``path`` (default: ``--checkpoint``): a user's model's file is recorded relative to its
        directory. ``embedded``: the learned embeddings' record, gathered from every rank
        (``Embeddings.record``, a collective call); by default gathered here, which on several
        ranks every rank must call."""
        path = path if path is not None else self.config.run.checkpoint
        if embedded is None and self.input_embeddings is not None:
            embedded = self.input_embeddings.record()
        return checkpoint.written(embeddings=embedded, epoch=self.epoch, model=self.model.state_dict(), optimizer=self.optimizer.state_dict(),
                                  schedule=self.learning_rate.state_dict(), best=self.best,
                                  history=[asdict(r) for r in self.history], config=self.config.to_dict(), features=self.num_features, classes=self.num_classes,
                                  job=launch.job_id(),  # a restart of this job resumes from it (``_restart``)
                                  user_model=self.own_model.record(path or None) if self.own_model else None)

    def restore(self, state: dict, path=None) -> None:
        """Take up the checkpoint ``state`` (read from ``path``): a ConfigError unless this run's
        settings and model are the ones it was written with."""
        self._check_settings(trained.saved_settings(checkpoint.settings(state)), path, state)
        if self.own_model:  # the --model given, checked against the checkpoint's record of it
            user_file.resolve(path, state, self.own_model.name)
        trained.widths_of(state).check(self.num_features, self.num_classes, "the checkpoint's model")
        epoch, weights, optimizer, self.best, history = checkpoint.progress(state)
        self.model.load_state_dict(weights)
        self.optimizer.load_state_dict(optimizer)
        self.learning_rate.load_state_dict(checkpoint.schedule(state))
        self._restore_input_embeddings(state, "last", path, optimizer=True)
        self.history = [EpochResult(**r) for r in history]
        self.epoch = epoch

    def _restore_input_embeddings(self, state: dict, which: str, path, optimizer: bool) -> None:
        """This rank's rows of the checkpoint's learned embeddings (``which``: last or best)."""
        if self.input_embeddings is None:
            return
        record = checkpoint.embeddings(state)
        if record is None:
            raise ConfigError(f"{path}: the checkpoint holds no learned embeddings (--embed-dim)")
        self.input_embeddings.restore(record, which, optimizer, str(path))

    def _check_settings(self, recorded: dict, path=None, state: Optional[dict] = None) -> None:
        """A checkpoint resumes only under the settings that change the numbers a run produces
        (``_RESULT_FIELDS``); any other is one line naming each setting and both values. A
        user's model is the same by its class and file (``restore``), wherever the file is now."""
        unset = Config().to_dict()  # a field newer than the checkpoint: it was written with the default
        unset["task"] = "classification"  # the one task before there were others
        saved = {k: recorded.get(k, unset[k]) for k in _RESULT_FIELDS}
        mine = {k: self.config.to_dict()[k] for k in _RESULT_FIELDS}
        if user_models.is_user_model(saved["model"]):
            if not self.own_model:
                raise ConfigError(f"the checkpoint holds your own model {saved['model']}; give it with --model "
                                  f"{_found_model(path, state, saved['model'])}")
            saved["model"] = mine["model"]
        diff = [k for k in _RESULT_FIELDS if not _same_setting(k, saved[k], mine[k])]
        if diff:
            raise ConfigError("checkpoint was written with different settings: " + ", ".join(
                f"{k} ({_shown(saved[k])} in the checkpoint, {_shown(mine[k])} now)" for k in sorted(diff)))
        epochs = recorded.get("epochs", unset["epochs"])
        if mine["lr_schedule"] == "cosine" and epochs != self.config.training.epochs:
            raise ConfigError(f"the cosine schedule spans the run's epochs: the checkpoint's run has {epochs} "
                              f"(--epochs {epochs})")

    def _resume(self, path, state: Optional[dict] = None) -> None:
        """``restore`` from the checkpoint at ``path`` (``state``: its content, already read);
        any mismatch is a ConfigError naming it."""
        state = checkpoint.load(path) if state is None else state
        try:
            self.restore(state, path)
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from None
        except (RuntimeError, TypeError, ValueError, KeyError, IndexError) as err:  # another model's
            detail = " ".join(str(err).split())
            raise ConfigError(f"{path}: not a checkpoint of this model ({type(err).__name__}: "
                              f"{detail[:200]})") from None

    def _restart(self) -> Optional[dict]:
        """In a job restarted after a rank failed (``launch.restart_count``; a first run, or a
        process outside an elastic job, returns None): resume from the checkpoint if this job
        wrote it, and return the restart's metrics record. A checkpoint of another job (a
        run before this one, at the same path) is not this job's progress: the job starts over."""
        restart = launch.restart_count()
        if not restart:
            return None
        path, resumed = self.config.run.checkpoint, self.config.run.resume  # --resume: resumed already
        if path and not resumed and Path(path).is_file():
            state = checkpoint.load(path)
            if checkpoint.job(state) is not None and checkpoint.job(state) == launch.job_id():
                self._resume(path, state)
                resumed = True
        return {"restart": restart, "epoch": self.epoch, "ranks": self.strategy.world_size,
                "failed": launch.restart_cause(), "checkpoint": path if resumed else None}

    # -- the loop --------------------------------------------------------------------------------
    def fit(self, on_epoch: Optional[Callable[[EpochResult], None]] = None,
            on_restart: Optional[Callable[[dict], None]] = None, callbacks=()) -> Summary:
        """Train to ``--epochs``, resuming first where ``--resume`` says, or where this is the
        restart of an elastic job. ``on_epoch``: called with each epoch's result; ``on_restart``:
        with a restart's record (``_restart``), which the metrics file gets too. ``callbacks``:
        each called with each epoch's result; one that returns a true value (a string: why)
        stops the run after that epoch, on every rank (``gnnmesh.train.callbacks``), as
        ``--patience`` does. A run stopped early writes its checkpoint, says why in its last
        metrics record (``stopped``, with ``parameters: "best"``) and in ``Summary.stopped``,
        and leaves the model holding the best parameters."""
        cfg = self.config
        if self._optimizer is None:  # made now, and its setup (imports, memory) kept out of every epoch
            self.optimizer.zero_grad(set_to_none=True)
            self.strategy.reset_counters()
        if self.split_sizes[0] == 0:
            raise ConfigError(f"dataset '{self.name}': the train mask selects no nodes")
        if cfg.run.resume:
            self._resume(cfg.run.checkpoint)
            if self.epoch > cfg.training.epochs:
                warnings.warn(f"{cfg.run.checkpoint}: the checkpoint is at epoch {self.epoch}, past --epochs "
                              f"{cfg.training.epochs}; nothing to train")
        restarted = self._restart()
        stopping = ([EarlyStopping(cfg.training.patience)] if cfg.training.patience else [])
        # a run that stopped early by --patience stays stopped when resumed
        stopped = stop_reason(stopping, self.history[-1]) if self.history else None
        metrics = self._agreed_on_rank0(self._open_outputs)
        try:
            if restarted and metrics:
                metrics.write(to_json(restarted))
            if restarted and on_restart:
                on_restart(restarted)
            if not stopped:
                stopped = self._epochs(metrics, on_epoch, stopping + list(callbacks), bool(callbacks))
            if cfg.run.checkpoint:  # while the run holds its lock
                self._save_checkpoint()
        finally:
            if metrics:
                metrics.close()
        if stopped and self.best["state"] is not None:  # the checkpoint keeps the last ones, to resume from
            self.model.load_state_dict(self.best["state"])
            if self.input_embeddings is not None and self.input_embeddings.best is not None:
                self.input_embeddings.use(self.input_embeddings.best)
        return self._summary(stopped)

    def _epochs(self, metrics, on_epoch, callbacks: list, callers: bool) -> Optional[str]:
        """The epochs up to ``--epochs``, each recorded, reported and checkpointed as asked,
        until one of ``callbacks`` stops the run: why it stopped (None: it ran every epoch).
        ``callers``: whether some callbacks are the caller's (``_agreed_stop``)."""
        cfg = self.config
        while self.epoch < cfg.training.epochs:
            result = self.run_epoch()
            stopped = self._agreed_stop(callbacks, callers, result)
            if stopped:
                result.extra.update(stopped=stopped, parameters="best")
            if metrics:
                metrics.write(result.to_json())
            if on_epoch:
                on_epoch(result)
            if cfg.run.checkpoint_every and self.epoch % cfg.run.checkpoint_every == 0:
                self._save_checkpoint()
            if stopped:
                return stopped
        return None

    def _agreed_stop(self, callbacks: list, callers: bool, result: EpochResult) -> Optional[str]:
        """Why the run stops after ``result`` (None: it goes on). ``--patience`` reads records
        every rank shares; the caller's callbacks may not, so any rank's stop stops every rank."""
        reason = stop_reason(callbacks, result)
        if callers and comm.world_size() > 1:
            asked = comm.setup_comm().all_gather_object(reason)
            reason = next((r for r in asked if r), None)
        return reason

    def _summary(self, stopped: Optional[str]) -> Summary:
        times = [r.epoch_time for r in self.history]
        return Summary(self.epoch, self.best["epoch"], self.best["val_acc"], self.best["test_acc"],
                       self.history[-1].loss if self.history else float("nan"), sum(times),
                       sum(times) / max(len(times), 1), self.history,
                       memory.of(self.history[-1].extra) if self.history else {}, self.task.metric, stopped)

    def _open_outputs(self) -> Optional[MetricsFile]:
        """Check the checkpoint path and open the metrics file (rank 0 writes both), each
        locked for the run (``gnnmesh.locks``; closing the metrics file releases both)."""
        cfg = self.config
        held = []
        if cfg.run.checkpoint:
            check_writable(cfg.run.checkpoint, "checkpoint")
            held.append(locks.hold(cfg.run.checkpoint, "checkpoint"))
        return MetricsFile(cfg.run.metrics, self.epoch, held) if cfg.run.metrics or held else None

    def _agreed_on_rank0(self, fn):
        """``fn()`` on rank 0; its bad-input error stops every rank alike, before training,
        so that peers do not fail later on a vanished rank 0 with tracebacks of their own."""
        if self.strategy.world_size == 1:
            return fn()
        return comm.agreed(fn if self.strategy.rank == 0 else (lambda: None))


def _parameter_problem(model: torch.nn.Module) -> str:
    """Why ``model`` cannot be trained ('' if it can): a model without parameters has nothing
    for the optimizer to change."""
    if next(iter(model.parameters()), None) is None:
        return "it has no parameters to train (a model must hold at least one torch.nn.Parameter)"
    return ""


def labelled(graph: Graph, classes: int, task: Optional[str] = None) -> Graph:
    """``graph``, with labels 0 of ``classes`` (or 0 targets of ``classes`` for a ``task`` other
    than classification) and an empty split where it has none: what the strategies split, for
    a model that only predicts."""
    n, empty = graph.num_nodes, torch.zeros(graph.num_nodes, dtype=torch.bool)
    filled = {name: empty for name in ("train_mask", "val_mask", "test_mask") if getattr(graph, name) is None}
    if graph.y is None:
        y = torch.zeros(n, dtype=torch.long) if task is None or tasks.spec(task).class_ids else torch.zeros(n, classes)
        filled.update(y=y, num_classes=classes)
    return graph.replace(**filled) if filled else graph


def _relational_models() -> tuple:
    """The built-in models that take a typed graph's relations."""
    return tuple(name for name in model_names() if "relations" in options_of(name))


def _with_edge_dim(config, data):
    """``config`` with its model's ``edge_dim`` the graph's edge-feature width where it is
    unset (a parts directory carries none); a width the graph does not have is refused."""
    features = data.adj.edge_features if isinstance(data, Graph) else None
    width = 0 if features is None else int(features.shape[1])
    given = config.model.edge_dim
    if (width if given is None else given) and config.training.minibatch:
        raise ConfigError(f"config field 'minibatch': model {config.model.name} reads the graph's edge features, "
                          "which sampled blocks do not carry yet; train it full-graph (single, partition, tensor, "
                          "offload), or without them (edge_dim = 0)")
    if given is None:
        return config.updated(edge_dim=width).resolved()
    if given and given != width:
        raise ConfigError(f"config field 'edge_dim': {given}, but the graph {data.name!r} has "
                          f"{f'{width} edge features' if width else 'no edge features'}"
                          f"{' (parts carry none: train from the graph itself)' if not isinstance(data, Graph) else ''}")
    return config


def _relation_names(data) -> tuple:
    """The relations of a typed graph, or of its parts (none for another graph): what a model
    with a weight per relation is built for."""
    if not isinstance(data, Graph):
        return data.relations
    return data.adj.relations.names if data.adj.relations is not None else ()


def _features(graph: Graph) -> torch.Tensor:
    """The input features of a labelled, split graph (``input_features``)."""
    graph.require_node_classification()
    return input_features(graph)


def input_features(graph: Graph) -> torch.Tensor:
    """The dense float input features of a graph (degree features if it has none)."""
    x = graph.x if graph.x is not None else structural_features(graph, "degree")
    if x.layout != torch.strided:  # sparse bag-of-words features: the models take dense
        x = x.to_dense()
    return x.float()


def _found_model(path, state: Optional[dict], recorded: str) -> str:
    """The ``--model`` that would build the checkpoint's own model ``recorded``: where its file
    is found now, else its recorded name."""
    if path is None or state is None:
        return recorded
    try:
        return user_file.resolve(path, state)
    except ConfigError:  # no file of its content found: the name it was trained as
        return recorded


def _same_setting(name: str, saved, mine) -> bool:
    """Whether a checkpoint's setting and a run's are the same: a user's model's arguments by
    what they say (``hidden=32`` is ``hidden = 32``), the rest by value."""
    if name == "model_args" and saved is not None and mine is not None:
        return user_models.parse_args(saved) == user_models.parse_args(mine)
    return saved == mine


def _shown(value) -> str:
    """A setting's value in a message: unset, or as given (long ones cut short)."""
    text = "unset" if value is None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# Settings that change the numbers a run produces; a checkpoint resumes only under the same ones.
_RESULT_FIELDS = ("dataset", "reorder", "model", "model_args", "decoupled", "hidden", "layers", "dropout", "heads",
                  "embed_dim", "embed_lr", "embed_optimizer",
                  "attn_dropout", "k", "alpha", "lr", "weight_decay", "seed", "minibatch", "fanouts", "batch_size", "eval_fanouts",
                  "task", "class_weights", "regression_loss", "optimizer", "momentum", "nesterov", "lr_schedule",
                  "step_size", "gamma", "lr_patience", "warmup_epochs", "clip_grad_norm", "precision")


def train(config: Config, data, **kwargs) -> Summary:
    """Train ``data`` as ``config`` says, with the class that trains its task (in mini-batches
    under ``--minibatch``), as ``gnnmesh train`` picks it."""
    training = config.resolved().training
    return tasks.spec(training.task or "classification").trainer_class(training.minibatch)(config, data, **kwargs).fit()

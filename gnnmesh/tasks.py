"""What a model learns from a graph's labels: its loss and its metrics, exact on any number
of ranks.

Three tasks are registered (``TaskSpec``, ``register``: the one place a task is named; built
by ``build``), and the run infers one from the labels when ``--task`` is not given (``infer``):

=================  =====================================  ==========================  ===================
task               labels (``Graph.y``)                   loss                        metrics (selection first)
=================  =====================================  ==========================  ===================
``classification`` [N] integer class ids                  cross-entropy (optional     accuracy
                                                          class weights)
``multilabel``     [N, T] of 0 and 1 (T binary targets)   binary cross-entropy with   ROC-AUC (OGB's: mean
                                                          logits, over the N x T      over targets of each
                                                          entries                     target's AUC), micro-F1
``regression``     [N] or [N, T] numbers                  MSE, or MAE                 R² (mean over targets),
                                                                                      MAE, MSE
=================  =====================================  ==========================  ===================

How a rank's share becomes the single process's numbers exactly:

- the loss: ``Task.loss`` is a SUM over this rank's training rows and ``Task.count`` this
  rank's share of the divisor (its rows, its targets' entries, or its rows' class weights);
  the trainer sums the counts over ranks once and divides every rank's sum by that total,
  so the ranks' losses (and gradients) add up to the single process's mean;
- the metrics that are sums (hits, true and false positives, absolute and squared errors,
  the sums R² needs): ``Task.sums`` gives a fixed-length vector of sums over one split's rows
  on this rank (or one batch of them); the trainer adds the vectors of every batch and rank
  (one all-reduce for the three splits) and ``Task.finish`` turns the totals into metrics;
- the metrics that are not sums (ROC-AUC): ``Task.ranked_inputs`` gives this rank's scores
  and 0/1 labels of a split's rows, and ``gnnmesh.auc.roc_auc`` computes each column's AUC
  over every rank's rows exactly (the Mann-Whitney statistic from a distributed sort by
  score, in blocks of columns): no rank holds every row's scores, nor a table of every node;
  ``Task.finish_ranked`` turns the AUCs into metrics (their mean over targets);
- a metric of a task of your own that needs every row of a split at once (``Task.gathered``,
  named in ``Task.gathers``): the split's rows, and only those, are gathered on every rank,
  in the order of their node ids.

The selection metric (``Task.metric``) picks the best model: higher is better for every task.

A task of your own (a loss and metrics of your own) is a ``Task`` subclass, or ``custom``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F

from . import auc
from .errors import ConfigError
from .registries import add

REGRESSION_LOSSES = ("mse", "mae")
SPLITS = ("train", "val", "test")


# -- settings ------------------------------------------------------------------------------------

def parse_class_weights(text: str, name: str = "class_weights"):
    """``'balanced'``, or the list of weights of a comma list (each finite and >= 0, one of them
    > 0); a ConfigError naming ``name`` otherwise."""
    if text.strip() == "balanced":
        return "balanced"
    try:
        weights = [float(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError(f"config field '{name}': {text!r} is neither 'balanced' nor a comma list of "
                          f"numbers (one weight per class, e.g. 1,2.5,1)") from None
    if not all(math.isfinite(w) and w >= 0 for w in weights) or not any(weights):
        raise ConfigError(f"config field '{name}': {text!r}: weights must be finite, >= 0, and not all 0")
    return weights


# -- inference -------------------------------------------------------------------------------------

def infer(y: torch.Tensor) -> tuple:
    """(task name, why) for labels ``y``: integer labels, one per node: classification; a matrix
    whose values are all 0 or 1 (NaN aside): multilabel; any other numbers: regression."""
    if y.dim() == 1 and not y.is_floating_point():
        return "classification", "one integer class id per node"
    if y.dim() == 2 and _zero_one(y):
        return "multilabel", f"a 0/1 matrix of {y.shape[1]} targets per node"
    what = f"{y.shape[1]} numeric targets per node" if y.dim() == 2 else "one float per node"
    return "regression", what


def _zero_one(y: torch.Tensor) -> bool:
    values = y[~torch.isnan(y)] if y.is_floating_point() else y
    return bool(((values == 0) | (values == 1)).all())


def build(name: str, **settings) -> "Task":
    """The registered task ``name`` with its settings (``class_weights``, ``regression_loss``:
    None where not given); a setting that does not apply to it is a ConfigError naming the field."""
    chosen = spec(name)
    for field_name, value in settings.items():
        if value is not None and field_name not in chosen.settings:
            owner = next((s for s in REGISTRY.values() if field_name in s.settings), None)
            why = owner.settings[field_name] if owner else "applies to no task"
            raise ConfigError(f"config field '{field_name}': {why}; this run's task is {name}")
    return chosen.task.of_settings(**{k: v for k, v in settings.items() if v is not None})


# -- the contract ----------------------------------------------------------------------------------

class Task:
    """A loss and metrics over a graph's labels. Subclasses set ``name``, ``metrics`` (every
    metric ``finish``, ``finish_ranked`` and ``gathered`` return, by name) and ``metric`` (the
    one that selects the best model; higher is better), and implement ``loss``, and ``sums``
    with ``finish`` (metrics that are sums over rows), ``ranked_inputs`` with ``finish_ranked``
    (metrics from ROC-AUCs, listed in ``ranked``), ``gathered`` (metrics from every row of a
    split at once, listed in ``gathers``), or several. What each must return for the ranks'
    results to be exact is in its docstring."""

    name = "task"
    metric = "metric"
    metrics: tuple = ()
    ranked: tuple = ()          # the metrics ``finish_ranked`` computes from exact ROC-AUCs
    gathers: tuple = ()         # the metrics ``gathered`` computes from every row of a split
    outputs: tuple = ()         # what a prediction may write besides logits: "probs", "labels"
    logits_are = ""             # what else its logits are, said where it predicts no probabilities
    sums_dtype = torch.float64

    @classmethod
    def of_settings(cls, **settings) -> "Task":
        """The task with the run's settings that apply to it (those its ``TaskSpec`` lists)."""
        return cls(**settings)

    def check_labels(self, y: torch.Tensor, masks: list, where: str) -> None:
        """Raise ConfigError (prefixed ``where``, naming the field and a node) unless ``y``, a
        graph's labels with its split ``masks``, fits this task."""

    def width(self, num_classes: int, label_width: int) -> int:
        """The model's output width for labels of ``num_classes`` (``Graph.num_classes``) and
        ``label_width`` values per node (1 for [N] labels, T for [N, T])."""
        return num_classes

    def targets(self, y: torch.Tensor) -> torch.Tensor:
        """The labels as ``loss`` and the metrics read them (a rank's rows of them)."""
        return y

    def setup(self, train_targets: torch.Tensor, width: int, reduce: Callable) -> None:
        """Once, before training: this rank's training targets, the output width and ``reduce``
        (sum over ranks) for what depends on the whole training set (balanced class weights)."""

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The SUM of the loss over these rows (this rank's training rows, or its share of a
        batch), a scalar with gradients. The trainer divides it by the total of ``count``."""
        raise NotImplementedError

    def count(self, targets: torch.Tensor) -> float:
        """These rows' share of the loss's divisor (default: the number of rows). The trainer
        sums it over every rank's training rows (or a batch's) and divides the summed loss by it."""
        return float(targets.shape[0])

    def sums(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """A 1-D tensor of SUMS over these rows (one split's rows on this rank, or a batch's), of
        the same length for every call, 0 for no rows: the trainer adds them over batches and
        ranks. Default: none."""
        return torch.zeros(0, dtype=self.sums_dtype)

    def finish(self, sums: torch.Tensor, rows: float) -> dict:
        """The metrics of one split from the totals of ``sums`` over all its rows and ``rows``,
        its number of rows."""
        return {}

    def ranked_inputs(self, logits: torch.Tensor, targets: torch.Tensor) -> tuple:
        """``(scores, labels)``, [rows, T] each, of these rows (one split's rows on this rank, or
        a batch of them): the scores and 0/1 labels whose ROC-AUC per column, over every row of
        the split on every rank, ``finish_ranked`` reads (``gnnmesh.auc.roc_auc``, exact)."""
        raise NotImplementedError

    def finish_ranked(self, aucs: np.ndarray) -> dict:
        """The metrics (those in ``ranked``) of one split from each column's ROC-AUC of
        ``ranked_inputs`` (NaN for a column without both a positive and a negative row)."""
        return {}

    def gathered(self, scores: torch.Tensor, targets: torch.Tensor) -> dict:
        """The metrics (those in ``gathers``) from every row of one split: its outputs and its
        targets (float32, [rows, width] and [rows, targets' width], in the order of the rows'
        node ids), the same on every rank. Every rank then holds the split's every row:
        prefer ``sums`` or ``ranked`` where the metric allows."""
        return {}

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """What a prediction's ``probs`` holds (if ``"probs"`` is in ``outputs``)."""
        self.check_output("probs")

    def labels(self, logits: torch.Tensor) -> torch.Tensor:
        """What a prediction's ``labels`` holds (if ``"labels"`` is in ``outputs``)."""
        self.check_output("labels")

    def check_output(self, what: str) -> None:
        """A ConfigError unless a prediction of this task can write ``what``."""
        if what in ("probs", "labels") and what not in self.outputs:
            kind = "probabilities" if what == "probs" else "labels"
            raise ConfigError(f"--output {what}: a {self.name} model predicts no {kind}; write --output logits "
                              f"(its outputs{self.logits_are})")

    def describe(self) -> str:
        return self.name


class Classification(Task):
    """One class per node: cross-entropy (optionally weighted per class: a list, or
    ``"balanced"``: n / (K n_k) of the training set's class counts n_k, as scikit-learn's
    ``class_weight="balanced"``), accuracy."""

    name, metric, metrics, outputs = "classification", "accuracy", ("accuracy",), ("probs", "labels")
    sums_dtype = torch.float32  # hits, as the trainer always counted them

    def __init__(self, class_weights=None):
        self.class_weights = class_weights
        self.weight: Optional[torch.Tensor] = None  # float64, one per class; None: unweighted

    @classmethod
    def of_settings(cls, class_weights: Optional[str] = None) -> "Classification":
        return cls(parse_class_weights(class_weights) if class_weights is not None else None)

    def check_labels(self, y, masks, where):
        if y.dim() != 1 or y.is_floating_point():
            shape = "x".join(str(s) for s in y.shape)
            raise ConfigError(f"{where}field 'y': classification needs one integer class id per node, got "
                              f"{'floats' if y.is_floating_point() else 'integers'} of shape [{shape}] "
                              f"(--task multilabel or regression)")

    def setup(self, train_targets, width, reduce):
        if self.class_weights is None:
            return
        if self.class_weights == "balanced":
            counts = reduce(torch.bincount(train_targets.cpu(), minlength=width).double())
            total = float(counts.sum())
            self.weight = torch.where(counts > 0, total / (width * counts.clamp(min=1)), torch.zeros(()))
        else:
            if len(self.class_weights) != width:
                raise ConfigError(f"config field 'class_weights': {len(self.class_weights)} weights for "
                                  f"{width} classes")
            self.weight = torch.tensor(self.class_weights, dtype=torch.float64)

    def describe(self):
        if self.class_weights is None:
            return self.name
        what = "balanced" if self.class_weights == "balanced" else ",".join(f"{w:g}" for w in self.class_weights)
        return f"{self.name} (class weights {what})"

    def loss(self, logits, targets):
        weight = None if self.weight is None else self.weight.to(logits.device, logits.dtype)
        return F.cross_entropy(logits, targets, weight=weight, reduction="sum")

    def count(self, targets):
        if self.weight is None:
            return float(targets.shape[0])
        return float(self.weight[targets.cpu()].sum())

    def sums(self, logits, targets):
        return torch.tensor([float((logits.argmax(dim=-1) == targets).sum())])

    def finish(self, sums, rows):
        return {"accuracy": float(sums[0]) / max(rows, 1.0)}

    def probabilities(self, logits):
        return torch.softmax(logits, dim=-1)

    def labels(self, logits):
        return logits.argmax(dim=-1)


class MultiLabel(Task):
    """T binary targets per node (ogbn-proteins): binary cross-entropy with logits averaged over
    every entry; ROC-AUC as OGB's evaluator computes it (each target's AUC over the split, where
    the target has both a positive and a negative row, averaged) and micro-F1 of the
    predictions ``logit > 0``."""

    name, metric, metrics, ranked = "multilabel", "roc_auc", ("roc_auc", "micro_f1"), ("roc_auc",)
    outputs = ("probs", "labels")

    def check_labels(self, y, masks, where):
        if y.dim() != 2:
            raise ConfigError(f"{where}field 'y': multilabel needs a matrix of 0/1 targets per node, got "
                              f"shape [{y.shape[0]}] (--task classification or regression)")
        rows = _split_rows(masks, y.shape[0])
        values = y[rows]
        bad = ~((values == 0) | (values == 1))
        if bool(bad.any()):
            r, c = (int(v) for v in torch.nonzero(bad)[0])
            raise ConfigError(f"{where}field 'y' has value {values[r, c].item()} at node {int(rows[r])}, target "
                              f"{c}: multilabel targets are 0 or 1 (--task regression for other numbers)")

    def width(self, num_classes, label_width):
        return label_width

    def targets(self, y):
        return y.float()

    def loss(self, logits, targets):
        return F.binary_cross_entropy_with_logits(logits, targets, reduction="sum")

    def count(self, targets):
        return float(targets.numel())

    def sums(self, logits, targets):
        predicted, positive = logits > 0, targets == 1
        tp = float((predicted & positive).sum())
        fp = float((predicted & ~positive).sum())
        fn = float((~predicted & positive).sum())
        return torch.tensor([tp, fp, fn], dtype=torch.float64)

    def finish(self, sums, rows):
        tp, fp, fn = (float(v) for v in sums)
        return {"micro_f1": 2 * tp / (2 * tp + fp + fn) if tp + fp + fn > 0 else 0.0}

    def ranked_inputs(self, logits, targets):
        return logits.detach().double(), targets == 1

    def finish_ranked(self, aucs):
        valid = aucs[~np.isnan(aucs)]
        return {"roc_auc": float(valid.mean()) if valid.size else float("nan")}

    def probabilities(self, logits):
        return torch.sigmoid(logits)

    def labels(self, logits):
        return (logits > 0).to(torch.int8)


class Regression(Task):
    """Numeric targets, one or T per node: mean squared (``mse``) or absolute (``mae``) error
    over every entry; R² (1 - residual / total sum of squares per target, averaged over
    targets, as scikit-learn's ``r2_score``; a constant target scores 1 if predicted exactly,
    else 0), MAE and MSE."""

    name, metric, metrics = "regression", "r2", ("r2", "mae", "mse")
    logits_are = ", the predicted values"

    def __init__(self, loss: str = "mse"):
        if loss not in REGRESSION_LOSSES:
            raise ConfigError(f"config field 'regression_loss': {loss!r} is not one of "
                              f"{', '.join(REGRESSION_LOSSES)}")
        self.kind = loss
        self.shift: Optional[torch.Tensor] = None  # the training targets' mean: sums of squares about it

    @classmethod
    def of_settings(cls, regression_loss: str = "mse") -> "Regression":
        return cls(regression_loss)

    def setup(self, train_targets, width, reduce):
        t = train_targets.detach().cpu().double().reshape(len(train_targets), -1)
        totals = reduce(torch.cat([t.sum(0), torch.tensor([float(len(t))], dtype=torch.float64)]))
        self.shift = totals[:-1] / max(float(totals[-1]), 1.0)

    def describe(self):
        return f"{self.name} ({self.kind} loss)"

    def width(self, num_classes, label_width):
        return label_width  # one output per target (class ids regressed as numbers: one)

    def targets(self, y):
        return y.float().reshape(y.shape[0], -1)

    def loss(self, logits, targets):
        if logits.shape != targets.shape:
            raise ConfigError(f"the regression task: the model gives {logits.shape[-1]} outputs per node for "
                              f"{targets.shape[-1]} targets")
        error = logits - targets
        return (error * error).sum() if self.kind == "mse" else error.abs().sum()

    def count(self, targets):
        return float(targets.numel())

    def sums(self, logits, targets):
        t = targets.detach().cpu().double()
        e = logits.detach().cpu().double() - t
        d = t - (self.shift if self.shift is not None else 0.0)  # about the training mean: no cancellation
        return torch.cat([torch.stack([e.abs().sum(), (e * e).sum()]), d.sum(0), (d * d).sum(0), (e * e).sum(0)])

    def finish(self, sums, rows):
        width = (len(sums) - 2) // 3
        total, square, residual = sums[2:2 + width], sums[2 + width:2 + 2 * width], sums[2 + 2 * width:]
        entries = rows * width
        if rows == 0:
            return {"r2": float("nan"), "mae": float("nan"), "mse": float("nan")}
        scatter = square - total * total / rows  # the total sum of squares, shifted sums
        constant = torch.where(residual == 0, 1.0, 0.0).double()  # a constant target, as scikit-learn scores it
        r2 = torch.where(scatter > 0, 1 - residual / scatter.clamp(min=1e-300), constant)
        return {"r2": float(r2.mean()), "mae": float(sums[0]) / entries, "mse": float(sums[1]) / entries}


# -- the registry ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TaskSpec:
    """One task as the rest of gnnmesh sees it: the one place a task is named.

    ``task``: its ``Task`` class (built by ``of_settings`` with the settings it takes).
    ``settings``: the config fields it takes, each with the words that refuse it for another
    task. ``class_ids``: its labels are one integer class id per node ([N] int64); otherwise
    numbers, [N, T]. ``flat_target``: one numeric target per node may be stored as [N].
    ``reads_any_labels``: it trains on another task's labels, read as numbers (parts written
    for that task). ``summary``: one line for help texts."""

    name: str
    task: type
    settings: dict = field(default_factory=dict)
    class_ids: bool = False
    flat_target: bool = False
    reads_any_labels: bool = False
    summary: str = ""
    links: bool = False        # it learns from node pairs, not labels (``gnnmesh.link``)
    trainer: str = "gnnmesh.train.trainer:Trainer"   # "module:attribute" of the class that trains it
    minibatch_trainer: str = "gnnmesh.train.minibatch:MiniBatchTrainer"   # the class that trains it in --minibatch

    def trainer_class(self, minibatch: bool = False):
        """The class that trains this task (``minibatch``: in sampled mini-batches), imported by
        name: it sits above the tasks."""
        from importlib import import_module
        module, _, attribute = (self.minibatch_trainer if minibatch else self.trainer).partition(":")
        return getattr(import_module(module), attribute)


REGISTRY: dict = {}


def register(task_spec: TaskSpec) -> TaskSpec:
    """Add ``task_spec`` to the registry."""
    return add(REGISTRY, task_spec.name, task_spec, "task")


def names() -> tuple:
    """The registered tasks' names, in registry order."""
    return tuple(REGISTRY)


def spec(name: str) -> TaskSpec:
    """The task called ``name``; a ConfigError naming the field otherwise."""
    if name not in REGISTRY:
        raise ConfigError(f"config field 'task': {name!r} is not one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


for _spec in (
    TaskSpec("classification", Classification, {"class_weights": "weights classes, for the classification task"},
             class_ids=True, summary="one class per node: cross-entropy, accuracy"),
    TaskSpec("multilabel", MultiLabel, summary="0/1 targets per node: binary cross-entropy, ROC-AUC, micro-F1"),
    TaskSpec("regression", Regression, {"regression_loss": "applies to the regression task"}, flat_target=True,
             reads_any_labels=True, summary="numeric targets: MSE or MAE loss, R2, MAE"),
):
    register(_spec)


class LinkTask(Task):
    """The link task as the registry sees it (``--task link``): its name, its metrics and the one
    that selects the model. Its loss and metrics are over node pairs, not a graph's labels:
    ``gnnmesh.link.trainer.LinkTrainer`` computes them."""

    name = "link"
    metric = "mrr"

    def __init__(self, hits: tuple = (10, 50, 100)):
        self.hits = tuple(hits)
        self.metrics = (self.metric, *(f"hits@{k}" for k in self.hits), "auc", "ap")

    def check_labels(self, y, masks, where: str) -> None:
        """Link prediction reads no labels: the edges are its supervision."""

    def check_output(self, what: str) -> None:
        """A link model's outputs are its node embeddings and its pairs' scores: no node logits,
        probabilities or labels."""
        if what != "embeddings":
            raise ConfigError(f"--output {what}: a link model predicts no node {what}; it scores node pairs "
                              "(--pairs FILE), lists each node's best candidates (--top-k K) or writes its node "
                              "embeddings (--output embeddings)")


register(TaskSpec("link", LinkTask, links=True, trainer="gnnmesh.link.trainer:LinkTrainer",
                  minibatch_trainer="gnnmesh.link.minibatch:LinkMiniBatchTrainer",
                  summary="which node pairs are edges: a decoder on node embeddings, MRR, Hits@K, ROC-AUC"))


def _split_rows(masks: list, n: int) -> torch.Tensor:
    """The rows in any of ``masks`` (every row without masks)."""
    given = [m for m in masks if m is not None]
    if not given:
        return torch.arange(n)
    any_split = given[0].clone()
    for m in given[1:]:
        any_split |= m
    return torch.nonzero(any_split).flatten()


# -- metrics computed from every row ---------------------------------------------------------------

def roc_auc(scores: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Each column's area under the ROC curve of ``scores`` [n, T] for the 0/1 ``targets``
    [n, T], exactly: the Mann-Whitney statistic with tied scores given their average rank
    (what scikit-learn's ``roc_auc_score`` computes). NaN for a column without both a positive
    and a negative row."""
    scores, targets = np.asarray(scores, dtype=np.float64), np.asarray(targets)
    if scores.ndim == 1:
        scores, targets = scores[:, None], targets[:, None]
    n = scores.shape[0]
    positive = targets == 1
    p = positive.sum(axis=0).astype(np.float64)
    ranked = (average_ranks(scores) * positive).sum(axis=0)  # half-integers: exact sums
    with np.errstate(divide="ignore", invalid="ignore"):
        auc = (ranked - p * (p + 1) / 2) / (p * (n - p))
    return np.where((p > 0) & (p < n), auc, np.nan)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values`` along its first axis (each column on its own), equal values
    sharing the average of their ranks."""
    values = np.asarray(values)
    n = len(values)
    rows = np.ascontiguousarray(values.reshape(n, -1).T)  # one row per column: sorted in place
    order = np.argsort(rows, axis=1)  # any order among equals: they share one rank
    ordered = np.take_along_axis(rows, order, axis=1)
    first = np.ones(rows.shape, dtype=bool)  # where a run of equal values starts
    np.not_equal(ordered[:, 1:], ordered[:, :-1], out=first[:, 1:])
    last = np.ones(rows.shape, dtype=bool)   # where one ends
    last[:, :-1] = first[:, 1:]
    position = np.arange(n)
    start = np.maximum.accumulate(np.where(first, position, 0), axis=1)
    stop = np.minimum.accumulate(np.where(last, position, n)[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty(rows.shape)
    np.put_along_axis(ranks, order, (start + stop + 2) / 2.0, axis=1)  # the mean of ranks start+1 .. stop+1
    return ranks.T.reshape(values.shape)


# -- one evaluation pass ----------------------------------------------------------------------------

class Evaluation:
    """The metrics of one evaluation pass over the three splits: ``add`` this rank's rows (all at
    once, or batch by batch), then ``result`` (a collective: every rank calls it) gives every
    split's metrics, the same on every rank and for any number of ranks. It keeps this rank's
    rows' sums, and for a task with ``ranked`` metrics their scores and labels (what the
    distributed ROC-AUC sorts); never a table of every node."""

    def __init__(self, task: Task):
        self.task = task
        self.sums: Optional[torch.Tensor] = None
        self.scored = [[] for _ in SPLITS] if task.ranked else None     # (scores, labels) per split
        self.rows = [[] for _ in SPLITS] if task.gathers else None      # (ids, outputs, targets) per split

    def add(self, logits: torch.Tensor, targets: torch.Tensor, masks: list,
            ids: Optional[torch.Tensor] = None) -> None:
        """Rows of this rank: their outputs, targets, split ``masks`` (train, val, test) and, for a
        task with ``gathers``, their global ``ids``."""
        part = torch.stack([self.task.sums(logits[m], targets[m]).detach().cpu().to(self.task.sums_dtype)
                            for m in masks])
        self.sums = part if self.sums is None else self.sums + part
        for i, m in enumerate(masks):
            if self.scored is not None:
                scores, labels = self.task.ranked_inputs(logits[m], targets[m])
                self.scored[i].append((_matrix(scores).double(), _matrix(labels).bool()))
            if self.rows is not None:
                m = m.cpu()
                self.rows[i].append((ids.cpu()[m].long(), _matrix(logits.detach().cpu()[m]).float(),
                                     _matrix(targets.detach().cpu()[m]).float()))

    def result(self, reduce: Callable, rows: list, comm=None) -> list:
        """Every split's metrics ({name: value}); ``reduce`` sums a tensor over ranks, ``rows``
        are the splits' row counts (over all ranks), ``comm`` the ``Comm`` of the ranks that hold
        the rows (None: this process holds them all), for ``ranked`` and ``gathers`` metrics."""
        sums = reduce(self.sums) if self.sums.numel() else self.sums
        out = [self.task.finish(s, n) for s, n in zip(sums, rows)]
        for i, metrics in enumerate(out):
            if self.scored is not None:
                scores, labels = (torch.cat(parts) for parts in zip(*self.scored[i]))
                metrics.update(self.task.finish_ranked(_metrics_phase(comm, lambda: auc.roc_auc(scores, labels, comm))))
            if self.rows is not None:
                metrics.update(self.task.gathered(*_metrics_phase(comm, lambda: _split_rows_gathered(self.rows[i], comm))))
        return out


def _matrix(values: torch.Tensor) -> torch.Tensor:
    """``values`` as [rows, columns]: a vector is one column."""
    values = values.detach().cpu()
    return values if values.dim() == 2 else values.reshape(-1, 1)


def _metrics_phase(comm, compute):
    """``compute()``, its traffic counted as ``comm``'s ``metrics``."""
    if comm is None:
        return compute()
    with comm.phase("metrics"):
        return compute()


def _split_rows_gathered(parts: list, comm) -> tuple:
    """(outputs, targets) of every rank's rows of one split, in the order of their node ids:
    the split's rows gathered on every rank (two all-gathers of the rows; one of their counts)."""
    ids, outputs, targets = (torch.cat(p) for p in zip(*parts))
    if comm is not None and comm.world_size > 1:
        sizes = comm.all_gather(torch.tensor([len(ids)], device=comm.device)).tolist()
        ids = comm.all_gather(ids.to(comm.device), sizes).cpu()
        outputs = comm.all_gather(outputs.to(comm.device), sizes).cpu()
        targets = comm.all_gather(targets.to(comm.device), sizes).cpu()
    order = torch.argsort(ids)
    return outputs[order], targets[order]


def record_fields(task: Task, metrics: Optional[list]) -> dict:
    """What a metrics record carries of the task beyond ``train_acc``/``val_acc``/``test_acc``
    (the selection metric): ``metric``, its name, and ``<split>_<name>`` for every other metric
    and for the selection metric when it is not accuracy (NaN: not evaluated that epoch)."""
    fields = {"metric": task.metric}
    for i, split in enumerate(SPLITS):
        for name in task.metrics:
            if name != "accuracy":
                fields[f"{split}_{name}"] = metrics[i].get(name, float("nan")) if metrics else float("nan")
    return fields


# -- a task of your own -----------------------------------------------------------------------------

class Custom(Task):
    """A task from functions (``custom``)."""

    def __init__(self, name, loss, metrics, finish, metric, count, targets, probabilities, labels):
        self.name, self._loss, self._metrics, self._finish = name, loss, metrics, finish
        self._count, self._targets, self._probabilities, self._labels = count, targets, probabilities, labels
        self.metric = metric
        self.keys: Optional[list] = None
        self.metrics = (metric,)
        self.outputs = tuple(what for what, fn in (("probs", probabilities), ("labels", labels)) if fn)

    def targets(self, y):
        return self._targets(y) if self._targets else y

    def loss(self, logits, targets):
        return self._loss(logits, targets)

    def count(self, targets):
        return float(self._count(targets)) if self._count else float(targets.shape[0])

    def sums(self, logits, targets):
        if self._metrics is None:
            return torch.zeros(0, dtype=torch.float64)
        values = self._metrics(logits, targets)
        if not isinstance(values, dict):
            raise ConfigError(f"task {self.name!r}: its metrics function must return a dict of sums, got "
                              f"{type(values).__name__}")
        keys = list(values)
        if self.keys is None:
            self.keys = keys
        elif keys != self.keys:
            raise ConfigError(f"task {self.name!r}: its metrics function returned {keys}, earlier {self.keys} "
                              f"(the same sums, in the same order, every call)")
        return torch.tensor([float(v) for v in values.values()], dtype=torch.float64)

    def finish(self, sums, rows):
        totals = dict(zip(self.keys or [], (float(v) for v in sums)))
        out = dict(self._finish(totals, rows)) if self._finish else totals
        self.metrics = tuple(dict.fromkeys([self.metric, *out]))
        return {k: float(v) for k, v in out.items()}

    def probabilities(self, logits):
        self.check_output("probs")
        return self._probabilities(logits)

    def labels(self, logits):
        self.check_output("labels")
        return self._labels(logits)


def custom(loss: Callable, metrics: Optional[Callable] = None, finish: Optional[Callable] = None, *,
           metric: str, name: str = "custom", count: Optional[Callable] = None, targets: Optional[Callable] = None,
           probabilities: Optional[Callable] = None, labels: Optional[Callable] = None) -> Task:
    """A task of your own, trained and evaluated exactly on any number of ranks, from functions:

    - ``loss(logits, targets)``: the SUM of the loss over the rows given (a scalar tensor with
      gradients; never a mean: the rows are this rank's share only);
    - ``count(targets)`` (default: the number of rows): these rows' share of the divisor; the
      loss trained is the sum over ranks of ``loss`` divided by the sum over ranks of ``count``;
    - ``metrics(logits, targets)``: a dict of SUMS over the rows given (one split's rows on this
      rank, or one batch of them; possibly none: then zeros), the same keys in the same order
      every call, each a number or a one-element tensor: hit counts, sums of errors, sums of
      squares. The trainer adds each key over batches and ranks, so the totals are exactly the
      single process's;
    - ``finish(totals, rows)``: the split's metrics ({name: value}) from those totals (a dict of
      floats) and the split's number of rows; without it the totals are the metrics;
    - ``metric``: the name of the metric (from ``finish``) that selects the best model; higher
      is better (return a negative error to select on an error);
    - ``targets(y)``: the labels as the functions read them (default: as they are);
      ``probabilities(logits)``, ``labels(logits)``: what a prediction writes for ``probs`` and
      ``labels`` (default: refused).

    Metrics that are not sums of per-row terms (a median, an AUC) need a ``Task`` subclass with
    ``gathered``. Pass the task to ``Trainer(config, graph, task=...)``."""
    return Custom(name, loss, metrics, finish, metric, count, targets, probabilities, labels)


__all__ = ["TaskSpec", "REGISTRY", "register", "names", "spec", "REGRESSION_LOSSES", "Task", "Classification", "MultiLabel", "Regression", "Evaluation",
           "build", "custom", "infer", "parse_class_weights", "record_fields", "roc_auc", "average_ranks"]

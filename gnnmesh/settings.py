"""Settings sections: small frozen dataclasses whose fields carry their own help, choices and
checks, so that the config, the TOML file and every command's flags read one description.

A field is declared with ``setting``::

    blocks: Optional[int] = setting(help="row blocks per aggregation", check=COUNT, resolves_to=1)

``help`` is the flag's help text, ``choices`` the allowed values, ``check`` a ``Range`` or a
function ``check(name, value)`` that raises ``ConfigError``; ``flag`` names the flag when it
is not the field's name (``--model`` for ``model.name``). A strategy's setting defaults to
``None`` (unset) and takes ``resolves_to`` only when the run's strategy reads it
(``gnnmesh.config.Config.resolved``), so that a setting given for another strategy is refused
rather than ignored.

Sections check themselves when built and never change what they check: the forms TOML allows
besides the field's own type (an integer for a float, a list for fanouts) are converted by
``Section.build`` before the section exists.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field, fields
from typing import Optional

from .errors import ConfigError
from .layout.grid import parse_grid
from .link.decoders import names as decoder_names
from .models import registry as models
from .partition.registry import DEFAULT as DEFAULT_PARTITIONER
from .partition.registry import names as partitioner_names
from .tasks import REGISTRY as TASK_REGISTRY
from .tasks import REGRESSION_LOSSES, parse_class_weights
from .tasks import build as build_task
from .tasks import names as task_names
from .validate import SEED_RANGE, Range, parse_bytes, parse_links

COUNT, NON_NEGATIVE, FRACTION = Range(1), Range(0), Range(0.0, 1.0, open="high")


def setting(default=None, *, help: str, choices=None, check=None, flag: Optional[str] = None,
            resolves_to=None, section_help: Optional[str] = None, repeatable: bool = False):
    """A section field with its help text, allowed values, check and flag name (see module).
    ``repeatable``: a comma-separated list whose flag may also be given once per item."""
    return field(default=default, metadata={"help": help, "choices": choices, "check": check, "flag": flag,
                                            "resolves_to": resolves_to, "repeatable": repeatable})


class Section:
    """Base of every settings section: type and value checks from each field's metadata.
    ``table``: its name, the TOML table; ``for_strategies``: whether its settings belong to the
    strategies that read them (``gnnmesh.strategies``) rather than to every run."""

    table = ""
    for_strategies = False

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            name = flag_name(f)
            base = _base_type(hints[f.name])
            if not isinstance(value, base) or (base in (int, float) and isinstance(value, bool)):
                raise ConfigError(f"config field '{name}': expected {base.__name__}, got {value!r}")
            check = f.metadata.get("check")
            if isinstance(check, Range):
                check.check(name, value)
            elif check is not None:
                check(name, value)
            choices = f.metadata.get("choices")
            if choices and value not in choices:
                raise ConfigError(f"config field '{name}': {value!r} is not one of {', '.join(choices)}")

    @classmethod
    def build(cls, **values):
        """The section from settings as TOML or a flag gives them (integers for floats, lists
        or integers for comma lists, integers for counts written as text)."""
        hints = typing.get_type_hints(cls)
        return cls(**{name: _coerce(_base_type(hints[name]), value) for name, value in values.items()})


def _coerce(base, value):
    if value is None or isinstance(value, bool):
        return value
    if base is float and isinstance(value, int):
        return float(value)
    if base is str and isinstance(value, int):
        return str(value)
    if base is str and isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return ",".join(map(str, value))
    if base is str and isinstance(value, dict):  # a TOML table of keyword arguments
        return ",".join(f"{k}={v!r}" for k, v in value.items())
    return value


def flag_name(f: dataclasses.Field) -> str:
    """The flat name of a field: its flag without dashes, the key of flat TOML and ``Config.of``."""
    return f.metadata.get("flag") or f.name


def _base_type(hint):
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def _size(name: str, value) -> None:
    parse_bytes(value, name)


def _size_or_none(name: str, value) -> None:
    parse_bytes(value, name, allow_zero=True)


def _chunk_count(name: str, value) -> None:
    if value != "auto" and not (value.isdigit() and int(value) >= 1):
        raise ConfigError(f"config field '{name}': {value!r} is neither 'auto' nor a positive integer")


def _class_weights(name: str, value) -> None:
    parse_class_weights(value, name)


def _grid_shape(name: str, value) -> None:
    parse_grid(value)  # its shape; the number of ranks is checked against the job's


def _links(name: str, value) -> None:
    parse_links(value, name)


# The optimizers (torch.optim's) and learning-rate schedules a run may take, and the
# schedules each schedule setting applies to.
OPTIMIZERS = ("adam", "adamw", "sgd")
LR_SCHEDULES = ("constant", "step", "cosine", "plateau")
SCHEDULE_SETTINGS = {"step_size": ("step",), "gamma": ("step", "plateau"), "lr_patience": ("plateau",)}
# The numeric precisions a run may train in (``gnnmesh.train.precision``): fp32 throughout, or
# bf16 autocast of the forward pass's dense products with fp32 parameters, optimizer and loss.
PRECISIONS = ("32", "bf16-mixed")
EMBED_OPTIMIZERS = ("sparse_adam", "adagrad")


# -- the run's common sections -------------------------------------------------------------------

@dataclass(frozen=True)
class DataSection(Section):
    table = "data"
    dataset: str = setting("cora", help="dataset name (see 'gnnmesh datasets'), generator spec such as "
                           "'rmat:nodes=100000,edges=1000000', a graph file or an OGB dataset directory")
    data_root: Optional[str] = setting(help="directory holding the datasets (default: $GNNMESH_DATA)")
    reorder: str = setting("none", help="renumber nodes for locality before training",
                           choices=("none", "rcm", "degree"))
    parts: Optional[str] = setting(help="train from a partitioned dataset written by 'gnnmesh partition "
                                   "--write-parts DIR': every rank reads only its own folder, never the whole "
                                   "graph (without --strategy: the strategy the parts were written for)")


# The built-in models' options, which a user's model takes through --model-args instead.
BUILT_IN_OPTIONS = ("hidden", "dropout", "heads", "attn_dropout", "k", "alpha", "relations", "bases", "edge_dim",
                    "decoupled")
# Of those, the ones a built-in model takes or not by its form (each class declares its own).
MODEL_OPTIONS = ("hidden", "dropout", "heads", "attn_dropout", "k", "alpha", "relations", "bases", "edge_dim")


def options_not_taken(name: str, decoupled: bool) -> tuple:
    """The settings of MODEL_OPTIONS that the model ``name`` (its ``decoupled`` form) does not
    take: every one for a user's model (its options are its --model-args), and for a built-in
    one those its class does not declare (``gnnmesh.models.options_of``)."""
    if not models.is_built_in(name):
        return MODEL_OPTIONS
    if decoupled and models.spec(name).decoupled is None:
        return ()  # refused on its own: the model has no decoupled form
    from .models import options_of  # torch: only where a model option is read
    taken = options_of(name, decoupled)
    return tuple(option for option in MODEL_OPTIONS if option not in taken)


def _model_name(name: str, value) -> None:
    if value == "decoupled":  # a retired spelling: say what replaced it
        raise ConfigError("config field 'model': 'decoupled' is not a model; the decoupled GCN is model "
                          "'gcn' with decoupled = true (--decoupled)")
    if not models.is_built_in(value):
        from .models.user import check_spec
        try:
            check_spec(name, value)
        except ConfigError:
            raise ConfigError(f"config field '{name}': {value!r} is not one of {', '.join(models.names())}, nor a "
                              "class of yours as FILE.py:CLASS or package.module:CLASS") from None


def _model_args(name: str, value) -> None:
    from .models.user import parse_args
    parse_args(value, name)


@dataclass(frozen=True)
class ModelSection(Section):
    table = "model"
    name: str = setting("gcn", help=f"GNN model: {', '.join(models.names())}, or your own class as FILE.py:CLASS or "
                        "package.module:CLASS, built as CLASS(in_dim, num_classes, **model_args) (this runs "
                        "your code, as python FILE.py would)", flag="model", check=_model_name)
    args: Optional[str] = setting(help="--model FILE.py:CLASS: the class's keyword arguments as key=value,... "
                                  "(Python literals; other values are strings)", flag="model_args", check=_model_args)
    hidden: Optional[int] = setting(help="hidden width (per head for GAT and R-GAT); default: the model's", check=COUNT)
    layers: int = setting(2, help="number of GNN layers (MLP layers of a decoupled model)", check=COUNT)
    dropout: Optional[float] = setting(help="feature dropout; default: the model's", check=FRACTION)
    heads: Optional[int] = setting(help="attention heads of the hidden layers (GAT default 8, R-GAT 4)", check=COUNT)
    attn_dropout: Optional[float] = setting(help="attention dropout (GAT default 0.6, R-GAT 0)", check=FRACTION)
    k: Optional[int] = setting(help="propagation steps (decoupled; default 10)", check=NON_NEGATIVE)
    alpha: Optional[float] = setting(help="teleport probability (decoupled; default 0.1)", check=Range(0.0, 1.0))
    relations: Optional[str] = setting(help="rgcn, rgat: the typed graph's relations its weights are for, "
                                       "comma-separated (default: the graph's; checkpoints record them)")
    bases: Optional[int] = setting(help="rgcn: share B basis matrices among the relations' weights (default 0: "
                                   "one weight per relation)", check=NON_NEGATIVE)
    edge_dim: Optional[int] = setting(help="gat, gatv2, gine, rgat: the width of the graph's edge features the "
                                      "model reads (default: the graph's, 0 without; 0: read none; checkpoints "
                                      "record it)", check=NON_NEGATIVE)
    embed_dim: Optional[int] = setting(help="learn D input columns for the nodes without features (a typed "
                                       "graph's featureless node types, or every node of a graph without "
                                       "features), updated by a row-sparse optimizer (--embed-optimizer) and "
                                       "kept in checkpoints (default: none)", check=COUNT)
    decoupled: bool = setting(False, help="train the decoupled form of the model: its NN layers first, then k "
                              "propagation steps (gcn, sage, gat); under --strategy tensor: one layout switch "
                              "each way per pass")

    def __post_init__(self):
        super().__post_init__()
        if self.decoupled and not self.user and models.spec(self.name).decoupled is None:
            raise ConfigError(f"config field 'model': {self.name} has no decoupled form; choose "
                              f"{', '.join(models.names(decoupled=True))}")
        # an option is given when it is set (unset ones take the model's default), whatever its value
        given = [f for f in MODEL_OPTIONS if getattr(self, f) is not None] + (["decoupled"] if self.decoupled else [])
        if self.user:
            if given:
                raise ConfigError(f"config field '{given[0]}' applies to the built-in models; give your model's "
                                  f"options with --model-args")
        elif self.args is not None:
            raise ConfigError(f"config field 'model_args' applies to --model FILE.py:CLASS, not the built-in "
                              f"{self.name}")
        elif given:
            self._refuse_options_not_taken(given)

    def _refuse_options_not_taken(self, given: list) -> None:
        """A model option given for a built-in model that does not take it (``--heads`` with
        gcn) is refused in one line, rather than ignored."""
        not_taken = options_not_taken(self.name, self.decoupled)
        refused = [f for f in given if f in not_taken]
        if refused:
            form = f"the decoupled {self.name}" if self.decoupled else f"model {self.name}"
            taken = ", ".join(f"--{f.replace('_', '-')}" for f in MODEL_OPTIONS if f not in not_taken)
            raise ConfigError(f"config field '{refused[0]}' (--{refused[0].replace('_', '-')}) does not apply to "
                              f"{form}, which takes {taken}")

    @property
    def user(self) -> bool:
        """Whether the model is the user's own class (FILE.py:CLASS or module:CLASS)."""
        return not models.is_built_in(self.name)

    @property
    def attention(self) -> bool:
        """Whether the built-in model needs a first-layer row's sources in one place
        (``ModelSpec.attention``), which the mini-batch routes that split them cannot give."""
        return not self.user and models.spec(self.name).attention

    def defaults(self) -> dict:
        """The literature defaults of this model's hyper-parameters (some live in ``training``)."""
        if self.user:
            return models.USER_MODEL_DEFAULTS
        return models.spec(self.name).form_defaults(self.decoupled)


@dataclass(frozen=True)
class TrainingSection(Section):
    table = "training"
    epochs: int = setting(200, help="training epochs", check=COUNT)
    lr: Optional[float] = setting(help="learning rate (the schedule's base rate); default: the model's",
                                  check=NON_NEGATIVE)
    weight_decay: Optional[float] = setting(help="weight decay (an L2 penalty under adam and sgd, decoupled "
                                            "under adamw); default: the model's", check=NON_NEGATIVE)
    optimizer: str = setting("adam", help="the optimizer (torch.optim's Adam, AdamW or SGD)", choices=OPTIMIZERS)
    momentum: Optional[float] = setting(help="--optimizer sgd: momentum (default: none)", check=NON_NEGATIVE)
    nesterov: bool = setting(False, help="--optimizer sgd: Nesterov momentum (needs --momentum above 0)")
    lr_schedule: str = setting("constant", help="how the learning rate changes by epoch: constant; step (times "
                               "--gamma every --step-size epochs); cosine (annealed to 0 over the epochs after "
                               "warm-up); plateau (times --gamma after --lr-patience epochs without a better "
                               "validation selection metric)", choices=LR_SCHEDULES)
    step_size: Optional[int] = setting(help="--lr-schedule step: epochs between decays", check=COUNT)
    gamma: Optional[float] = setting(help="--lr-schedule step or plateau: the factor each decay multiplies the "
                                     "rate by (default: torch's, 0.1)", check=Range(0.0, 1.0, open="lowhigh"))
    lr_patience: Optional[int] = setting(help="--lr-schedule plateau: evaluations without improvement before "
                                         "the rate decays (default: torch's, 10)", check=NON_NEGATIVE)
    warmup_epochs: int = setting(0, help="raise the rate linearly over the first N epochs, from lr/(N+1), before "
                                 "the schedule starts", check=NON_NEGATIVE)
    patience: Optional[int] = setting(help="stop after N epochs without a better validation selection metric; "
                                      "the run then keeps the best parameters (default: train every epoch)",
                                      check=COUNT)
    clip_grad_norm: Optional[float] = setting(help="scale the gradients down to this global norm where it is "
                                              "larger (the norm of the whole model's gradient, the same on "
                                              "every rank; default: no clipping)", check=Range(0.0, open="low"))
    precision: str = setting("32", help="32: float32 throughout; bf16-mixed: the forward pass's dense "
                             "products (nn.Linear, matmul) in bfloat16 under torch.autocast, in training, "
                             "evaluation and prediction alike; the graph aggregations compute in float32, "
                             "and parameters, optimizer state and the loss stay float32 (several ranks "
                             "equal one process to a tolerance, not exactly)", choices=PRECISIONS)
    embed_lr: Optional[float] = setting(help="--embed-dim: the embeddings' learning rate (default: --lr)",
                                        check=Range(0.0, open="low"))
    embed_optimizer: str = setting("sparse_adam", help="--embed-dim: the embeddings' row-sparse optimizer, "
                                   "updating only the rows a step reaches: sparse_adam (torch's SparseAdam) or "
                                   "adagrad (torch's Adagrad on sparse gradients)", choices=EMBED_OPTIMIZERS)
    seed: int = setting(0, help="random seed (weights, dropout, generated data splits)", check=Range(*SEED_RANGE))
    eval_every: int = setting(1, help="evaluate every N epochs", check=COUNT)
    minibatch: bool = setting(False, help="train on sampled mini-batches instead of the whole graph "
                              "(strategies single, gdp, nfp, snp, dnp, auto)")
    task: Optional[str] = setting(help="what the model learns from the labels: " + ", ".join(
                                  f"{s.name} ({s.summary})" for s in TASK_REGISTRY.values()) + "; default: inferred from the labels (integer ids: "
                                  "classification, a 0/1 matrix: multilabel, other floats: regression)",
                                  choices=task_names())
    class_weights: Optional[str] = setting(help="classification: weigh each class's loss, 'balanced' (inverse to "
                                           "its share of the training set) or one weight per class, e.g. 1,4,1 "
                                           "(default: unweighted)", check=_class_weights)
    regression_loss: Optional[str] = setting(help="regression: the loss, mse (mean squared error; the default) or "
                                             "mae (mean absolute error)", choices=REGRESSION_LOSSES)

    def __post_init__(self):
        super().__post_init__()
        if self.task is not None:  # an inferred task is checked once the labels are read
            build_task(self.task, class_weights=self.class_weights, regression_loss=self.regression_loss)
        self._check_optimizer()
        self._check_schedule()

    def _check_optimizer(self) -> None:
        """Momentum is SGD's alone: given for another optimizer it is refused, not ignored."""
        if self.optimizer != "sgd":
            given = [name for name in ("momentum", "nesterov") if getattr(self, name) not in (None, False)]
            if given:
                raise ConfigError(f"config field '{given[0]}' applies to optimizer sgd, not {self.optimizer}")
        if self.nesterov and not self.momentum:
            raise ConfigError("config field 'nesterov' needs 'momentum' above 0")

    def _check_schedule(self) -> None:
        """Each schedule's own settings apply to it alone; the warm-up leaves epochs to train."""
        for name, schedules in SCHEDULE_SETTINGS.items():
            if getattr(self, name) is not None and self.lr_schedule not in schedules:
                raise ConfigError(f"config field '{name}' applies to lr_schedule {' or '.join(schedules)}, "
                                  f"not {self.lr_schedule}")
        if self.lr_schedule == "step" and self.step_size is None:
            raise ConfigError("config field 'lr_schedule': step needs 'step_size' (--step-size EPOCHS)")
        if self.warmup_epochs >= self.epochs:
            raise ConfigError(f"config field 'warmup_epochs': {self.warmup_epochs} leaves none of the "
                              f"{self.epochs} epochs after the warm-up")


def _link_split(name: str, value) -> None:
    from .link.sources import check_link_split
    check_link_split(value, name)


def _hits(name: str, value) -> None:
    parse_hits(value, name)


def parse_hits(text: str, name: str = "hits") -> tuple:
    """``'10,50,100'`` -> (10, 50, 100): the K of each Hits@K; a ConfigError naming ``name`` otherwise."""
    try:
        ks = tuple(int(v) for v in text.split(","))
    except ValueError:
        ks = ()
    if not ks or min(ks) < 1:
        raise ConfigError(f"config field '{name}': {text!r} is not a comma list of integers >= 1 (e.g. 10,50,100)")
    return ks


LINK_LOSSES = ("bce", "bpr", "margin")
CORRUPTIONS = ("destination", "both")


@dataclass(frozen=True)
class LinkSection(Section):
    """The settings of ``--task link`` (``gnnmesh.link``); given for another task, refused."""

    table = "link"
    link_split: str = setting("valid=0.05,test=0.10", help="--task link: the shares of the edges held out "
                              "for validation and test, placed by the seed and each edge alone; or a directory "
                              "of split files (train.csv, valid.csv, test.csv; or an OGB link split's .pt files)",
                              check=_link_split)
    link_relation: Optional[str] = setting(help="--task link on a typed graph: the relation(s) whose edges are "
                                           "held out and scored, comma-separated or the flag repeated "
                                           "(src__name__dst, or name where unambiguous; all: every relation but "
                                           "the added reverses)",
                                           repeatable=True)
    disjoint_train: float = setting(0.0, help="--task link: the share of the training edges used as supervision "
                                    "alone, kept out of message passing (placed by the seed and each edge)",
                                    check=FRACTION)
    decoder: str = setting("dot", help="--task link: a pair's score from its ends' embeddings: dot (their dot "
                           "product), mlp (an MLP on their Hadamard product), distmult (a learned diagonal)",
                           choices=decoder_names())
    negatives: int = setting(1, help="--task link: negatives drawn per training positive each epoch", check=COUNT)
    corrupt: str = setting("destination", help="--task link: a negative keeps the positive's source and draws "
                           "its destination (destination) or draws both ends (both), uniformly over the nodes",
                           choices=CORRUPTIONS)
    link_loss: str = setting("bce", help="--task link: bce (binary cross-entropy over positives and negatives), "
                             "bpr (each positive above each of its negatives) or margin (ranking, margin 1)",
                             choices=LINK_LOSSES)
    eval_negatives: int = setting(100, help="--task link: fixed negatives per held-out positive, drawn once from "
                                  "the seed (MRR and Hits@K rank each positive among its own)", check=COUNT)
    hits: str = setting("10,50,100", help="--task link: the K of each Hits@K reported", check=_hits)
    embedding_width: Optional[int] = setting(help="--task link: the width of the node embeddings the encoder "
                                             "gives (its output width; default: its hidden width)", check=COUNT)
    edge_batch_size: Optional[int] = setting(help="--task link: training positives per optimizer step, each "
                                             "step a full-graph pass (default: all of them, one step an epoch); "
                                             "with --minibatch, the pairs whose ends a step samples around "
                                             "(default: 1024, or all if fewer)", check=COUNT)
    rank_all: bool = setting(False, help="--task link: rank each validation and test positive against every node "
                             "as its destination, less its known positives (filtered), for MRR and Hits@K")

    def given(self) -> list:
        """The settings that differ from their defaults (refused for another task)."""
        return [f.name for f in fields(self) if getattr(self, f.name) != f.default]


@dataclass(frozen=True)
class MiniBatchSection(Section):
    table = "minibatch"
    fanouts: Optional[str] = setting(help="--minibatch: in-edges sampled per node at each hop, from the seeds "
                                     "outward, -1 for all (e.g. 25,10; default: 10 per layer); on a typed graph "
                                     "per relation, or per relation and hop as REL=K,...;... with a bare K for "
                                     "the relations not named (e.g. 'cites=10,5;5')")
    batch_size: Optional[int] = setting(help="--minibatch: seed nodes per batch (default: 1024, or the training "
                                        "set if smaller)", check=COUNT)
    eval_fanouts: Optional[str] = setting(help="--minibatch: fanouts for evaluation (default: all neighbours)")
    cache_memory: Optional[str] = setting(help="--minibatch with several ranks: each rank's cache of hot input "
                                          "feature rows, e.g. 64MiB, chosen from a dry run's access counts "
                                          "(default: no cache; 0: none)", check=_size_or_none)
    bandwidths: Optional[str] = setting(help="--minibatch with several ranks: the dry run's figures instead of "
                                        "probing them, any of load=SIZE,cache=SIZE,net=SIZE,latency=TIME (per "
                                        "second; e.g. load=2GB,net=1GB,latency=50us)", check=_links)

    def cache_bytes(self) -> int:
        """Each rank's feature cache in bytes (0: none)."""
        return parse_bytes(self.cache_memory, "cache_memory", allow_zero=True) if self.cache_memory else 0


@dataclass(frozen=True)
class RunSection(Section):
    table = "run"
    strategy: str = setting("single", help="parallel strategy (see 'gnnmesh plan' and the strategies guide)")
    nproc: int = setting(1, help="number of local processes (ranks) to start; under torchrun leave it out",
                         check=COUNT)
    device: str = setting("cpu", help="compute device", choices=("cpu", "cuda", "auto"))
    threads: Optional[int] = setting(help="compute threads per process (default: torch's choice)", check=COUNT)
    checkpoint: Optional[str] = setting(help="checkpoint file")
    checkpoint_every: int = setting(0, help="write the checkpoint every N epochs (0: only at the end)",
                                    check=NON_NEGATIVE)
    resume: bool = setting(False, help="continue from --checkpoint")
    metrics: Optional[str] = setting(help="write one JSON object per epoch to this file")
    log_every: int = setting(10, help="print progress every N epochs", check=COUNT)
    max_restarts: int = setting(0, help="with --nproc: after a rank fails, restart the job up to R times on the "
                                        "ranks that remain, resuming from the last checkpoint (needs "
                                        "--checkpoint-every)", check=NON_NEGATIVE)
    min_nproc: Optional[int] = setting(help="with --max-restarts: the fewest ranks a restarted job goes on with "
                                            "(default 1)", check=COUNT)

    def __post_init__(self):
        super().__post_init__()
        if self.checkpoint_every and not self.checkpoint:
            raise ConfigError("config field 'checkpoint_every' needs 'checkpoint' (a file path)")
        if self.resume and not self.checkpoint:
            raise ConfigError("config field 'resume' needs 'checkpoint' (a file path)")
        self._check_restarts()

    def _check_restarts(self) -> None:
        """A restarted job resumes from the checkpoint, so that at most --checkpoint-every
        epochs are lost: without one, restarting would repeat the whole run."""
        if self.max_restarts and not self.checkpoint_every:
            raise ConfigError("config field 'max_restarts' needs 'checkpoint_every' (and 'checkpoint'): a restarted "
                              "job resumes from the last checkpoint")
        if self.min_nproc is not None and not self.max_restarts:
            raise ConfigError("config field 'min_nproc' needs 'max_restarts'")
        if self.min_nproc is not None and self.min_nproc > self.nproc:
            raise ConfigError(f"config field 'min_nproc': {self.min_nproc} is more than 'nproc' ({self.nproc})")


# -- the strategies' sections (which strategy reads which: gnnmesh.strategies) -------------------



@dataclass(frozen=True)
class PartitionSection(Section):
    table = "partition"
    for_strategies = True
    partitioner: Optional[str] = setting(help=f"vertex partitioner (default: {DEFAULT_PARTITIONER}, which needs "
                                         "gnnmesh[partitioners]; shp: the stochastic hypergraph of sampled batches, "
                                         "snp/dnp)",
                                         choices=partitioner_names(), resolves_to=DEFAULT_PARTITIONER)
    epsilon: Optional[float] = setting(help="allowed load imbalance of the partition (default: 0.01)",
                                       check=NON_NEGATIVE, resolves_to=0.01)
    partition_file: Optional[str] = setting(help="use this stored partition (from 'gnnmesh partition') instead "
                                            "of computing one")


@dataclass(frozen=True)
class TensorSection(Section):
    table = "tensor"
    for_strategies = True
    chunk_size: Optional[int] = setting(help="tensor in memory: destination rows per aggregation chunk "
                                        "(default: the whole graph in one chunk)", check=COUNT)
    pipeline: Optional[bool] = setting(help="tensor in memory: overlap per-chunk split/gather with aggregation "
                                       "(default: on)", resolves_to=True)


@dataclass(frozen=True)
class Grid3DSection(Section):
    table = "grid3d"
    for_strategies = True
    grid: Optional[str] = setting(help="process grid X,Y,Z (product = number of ranks; default: the most cubic "
                                  "grid; 'gnnmesh plan' ranks every grid by predicted epoch time)",
                                  check=_grid_shape)
    permute: Optional[bool] = setting(help="balance the 2D adjacency blocks with a row and a column permutation "
                                      "(default: on)", resolves_to=True)
    blocks: Optional[int] = setting(help="row blocks per aggregation, each block's all-reduce overlapping the "
                                    "next block's SpMM (default: 1)", check=COUNT, resolves_to=1)


@dataclass(frozen=True)
class HostTierSection(Section):
    table = "host_tier"
    for_strategies = True
    device_memory: Optional[str] = setting(help="the fast tier's budget, e.g. 512MiB or 2GiB (the GPU's memory "
                                           "with --device cuda, the process's working memory on CPU; default: "
                                           "1GiB); auto: each rank's memory, candidates predicted to need more "
                                           "are left out (default: no limit)", check=_size, resolves_to="1GiB")
    host_store: Optional[str] = setting(help="where the vertex data lives: ram (pinned on CUDA) or file (one "
                                        "file per layer under --store-dir; default: ram); tensor: train out of "
                                        "core with this store (default: in memory); --minibatch with several "
                                        "ranks: where input features not in the cache are read from",
                                        choices=("ram", "file"), resolves_to="ram")
    store_dir: Optional[str] = setting(help="with --host-store file: directory for the per-layer files; "
                                       "--minibatch: for the input features' file")
    chunks: Optional[str] = setting(help="chunks of destination rows per rank, or auto: the fewest that fit "
                                    "--device-memory (default: auto)", check=_chunk_count, resolves_to="auto")
    dedup: Optional[str] = setting(help="load rows shared by a batch's chunks once (inter), keep rows "
                                   "consecutive chunks share (intra; tensor: intra only), both, or none "
                                   "(default: both)", choices=("none", "inter", "intra", "both"),
                                   resolves_to="both")
    reorganize: Optional[bool] = setting(help="regroup and reorder chunks to share more rows (default: on)",
                                         resolves_to=True)
    overlap: Optional[bool] = setting(help="load the next batch's rows and write the last batch's results back "
                                      "while a batch computes, on CUDA copy streams (on CPU the same order runs "
                                      "in line); the budget holds those transfers too (default: on with --device "
                                      "cuda, off on CPU)")

    def __post_init__(self):
        super().__post_init__()
        if self.host_store == "file" and not self.store_dir:
            raise ConfigError("config field 'host_store': 'file' needs 'store_dir' (--store-dir DIR)")
        if self.store_dir and self.host_store != "file":
            raise ConfigError("config field 'store_dir' applies only with host_store = 'file' (--host-store file)")


@dataclass(frozen=True)
class OffloadSection(Section):
    table = "offload"
    for_strategies = True
    intermediates: Optional[str] = setting(help="cache each layer's aggregation in the host tier and recompute "
                                           "only its update (gcn, sage, gin), or recompute whole layers; auto: "
                                           "cache where the model allows (default)",
                                           choices=("auto", "recompute", "cache"), resolves_to="auto")


@dataclass(frozen=True)
class PlanSection(Section):
    table = "plan"
    for_strategies = True
    rates: Optional[str] = setting(help="--strategy auto: plan with the machine rates in this file (from "
                                   "'gnnmesh plan --save-rates' or benchmarks/planner.py; default: this "
                                   "machine's, probed once and kept in the cache)")


# The config's sections by name, in the order a TOML file lists them.
SECTIONS = {cls.table: cls for cls in (DataSection, ModelSection, TrainingSection, LinkSection, RunSection,
                                      MiniBatchSection,
                                      PartitionSection, TensorSection, Grid3DSection, HostTierSection,
                                      OffloadSection, PlanSection)}
# The sections of the strategies' settings (the rest apply to every run of their kind).
STRATEGY_SECTIONS = tuple(name for name, cls in SECTIONS.items() if cls.for_strategies)


def field_index() -> dict:
    """Every setting's flat name -> (section, field name)."""
    return {flag_name(f): (section, f.name) for section, cls in SECTIONS.items() for f in fields(cls)}

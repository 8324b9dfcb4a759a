"""Run configuration: one typed dataclass, loadable from TOML, overridable by flags.

Model hyper-parameters left unset (``None``) take the model's literature defaults
(``MODEL_DEFAULTS``); ``resolved()`` fills them in, and ``--print-config`` shows the result.
A strategy's own settings (``STRATEGY_FIELDS``) likewise take ``STRATEGY_DEFAULTS`` when
unset, and are refused when set for another strategy.
TOML files may group keys in tables (``[data]``, ``[model]``, ``[train]``, ``[run]``); the
tables are only for reading, every key names one field.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Optional

from .errors import ConfigError
from .layout.grid import parse_grid
from .validate import SEED_RANGE, Range, parse_bytes

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Settings from the papers that introduced each model (Cora-scale, full-batch).
MODEL_DEFAULTS = {
    "gcn": {"hidden": 16, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4},
    "sage": {"hidden": 16, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4},
    "gat": {"hidden": 8, "dropout": 0.6, "lr": 0.005, "weight_decay": 5e-4},
    "gin": {"hidden": 64, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4},
}
# Every model's decoupled form (``decoupled = true``) takes APPNP's.
DECOUPLED_DEFAULTS = {"hidden": 64, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4}
CHOICES = {
    "model": tuple(MODEL_DEFAULTS),
    "reorder": ("none", "rcm", "degree"),
    "device": ("cpu", "cuda", "auto"),
    "strategy": ("single", "partition", "tensor", "grid3d", "offload", "gdp", "nfp", "snp", "dnp", "auto"),
    "partitioner": ("hp", "gp", "rp", "contiguous", "shp"),
    "host_store": ("ram", "file"),
    "intermediates": ("auto", "recompute", "cache"),
    "dedup": ("none", "inter", "intra", "both"),
}

# Settings of one strategy only. Set for another strategy they are refused, not ignored;
# left unset, ``resolved()`` gives them these defaults where they apply.
# The mini-batch strategies that partition vertices (APT's SNP and DNP; auto may pick them),
# and all the mini-batch strategies that run several ranks.
VERTEX_ROUTED = ("snp", "dnp", "auto")
MINIBATCH_PARALLEL = ("gdp", "nfp") + VERTEX_ROUTED
STRATEGY_FIELDS = {"partitioner": ("partition", "offload") + VERTEX_ROUTED,
                   "epsilon": ("partition", "offload") + VERTEX_ROUTED,
                   "partition_file": ("partition", "offload") + VERTEX_ROUTED,
                   "chunk_size": ("tensor",), "pipeline": ("tensor",),
                   "grid": ("grid3d",), "permute": ("grid3d",), "blocks": ("grid3d",),
                   "device_memory": ("offload", "tensor", "auto"), "host_store": ("offload", "tensor") + MINIBATCH_PARALLEL,
                   "store_dir": ("offload", "tensor") + MINIBATCH_PARALLEL, "cache_memory": MINIBATCH_PARALLEL,
                   "bandwidths": MINIBATCH_PARALLEL, "chunks": ("offload", "tensor"),
                   "intermediates": ("offload",), "dedup": ("offload", "tensor"),
                   "reorganize": ("offload", "tensor"), "rates": ("auto",)}
# --strategy auto without --minibatch plans across the full-graph strategies and takes these
# settings only: the partitioners to rank, their imbalance, each rank's memory and the rates file.
PLANNED_FIELDS = ("partitioner", "epsilon", "device_memory", "rates")
# Of those, the ones mini-batch auto (APT's choice, which takes the partitioner's) has no use for.
PLAN_ONLY = ("device_memory", "rates")
STRATEGY_DEFAULTS = {"partitioner": "hp", "epsilon": 0.01, "pipeline": True, "permute": True, "blocks": 1,
                     "device_memory": "1GiB", "host_store": "ram", "chunks": "auto", "intermediates": "auto",
                     "dedup": "both", "reorganize": True}
# Tensor parallelism has two engines: in memory (its own settings) and with the vertex data in a
# host store (--host-store, and the host tier's settings). Each engine's settings are refused
# under the other, and take their defaults only under their own.
TENSOR_IN_MEMORY = ("chunk_size", "pipeline")
HOST_TIER = ("device_memory", "store_dir", "chunks", "dedup", "reorganize")
# Mini-batch training (--minibatch): its settings, and the strategies that run it.
MINIBATCH_FIELDS = ("fanouts", "batch_size", "eval_fanouts")
MINIBATCH_STRATEGIES = ("single",) + MINIBATCH_PARALLEL
# Where the first layer's rows are split across ranks, attention (which needs all of a row's
# sources in one place) would need extra exchanges: these strategies refuse it.
NO_ATTENTION = ("nfp", "snp")
# Decided when a parts directory is written ('gnnmesh partition --write-parts'): a --parts run
# takes them from the parts.
FIXED_BY_PARTS = ("partitioner", "epsilon", "partition_file", "permute")
# What a stored partition (--partition-file) makes moot.
FIXED_BY_PARTITION_FILE = ("partitioner", "epsilon")


# The models whose layers grid3d lays out on its grid (not gat, nor any decoupled form).
GRID3D_MODELS = ("gcn", "sage", "gin")


_COUNT, _NON_NEGATIVE, _FRACTION = Range(1), Range(0), Range(0.0, 1.0, open="high")
RANGES = {
    "hidden": _COUNT, "layers": _COUNT, "heads": _COUNT, "epochs": _COUNT, "nproc": _COUNT,
    "eval_every": _COUNT, "log_every": _COUNT, "batch_size": _COUNT, "threads": _COUNT, "chunk_size": _COUNT, "blocks": _COUNT,
    "dropout": _FRACTION, "attn_dropout": _FRACTION,
    "k": _NON_NEGATIVE, "checkpoint_every": _NON_NEGATIVE, "lr": _NON_NEGATIVE,
    "weight_decay": _NON_NEGATIVE, "epsilon": _NON_NEGATIVE,
    "alpha": Range(0.0, 1.0),  # a teleport probability
    "seed": Range(*SEED_RANGE),
}


def _section(name):
    return {"section": name}


@dataclass
class Config:
    # [data]
    dataset: str = field(default="cora", metadata=_section("data"))
    data_root: Optional[str] = field(default=None, metadata=_section("data"))
    reorder: str = field(default="none", metadata=_section("data"))
    parts: Optional[str] = field(default=None, metadata=_section("data"))
    # [model]
    model: str = field(default="gcn", metadata=_section("model"))
    hidden: Optional[int] = field(default=None, metadata=_section("model"))
    layers: int = field(default=2, metadata=_section("model"))
    dropout: Optional[float] = field(default=None, metadata=_section("model"))
    heads: int = field(default=8, metadata=_section("model"))
    attn_dropout: float = field(default=0.6, metadata=_section("model"))
    k: int = field(default=10, metadata=_section("model"))
    alpha: float = field(default=0.1, metadata=_section("model"))
    decoupled: bool = field(default=False, metadata=_section("model"))
    # [train]
    epochs: int = field(default=200, metadata=_section("train"))
    lr: Optional[float] = field(default=None, metadata=_section("train"))
    weight_decay: Optional[float] = field(default=None, metadata=_section("train"))
    seed: int = field(default=0, metadata=_section("train"))
    eval_every: int = field(default=1, metadata=_section("train"))
    minibatch: bool = field(default=False, metadata=_section("train"))
    fanouts: Optional[str] = field(default=None, metadata=_section("train"))
    batch_size: Optional[int] = field(default=None, metadata=_section("train"))
    eval_fanouts: Optional[str] = field(default=None, metadata=_section("train"))
    cache_memory: Optional[str] = field(default=None, metadata=_section("run"))
    bandwidths: Optional[str] = field(default=None, metadata=_section("run"))
    # [run]
    strategy: str = field(default="single", metadata=_section("run"))
    nproc: int = field(default=1, metadata=_section("run"))
    partitioner: Optional[str] = field(default=None, metadata=_section("run"))
    epsilon: Optional[float] = field(default=None, metadata=_section("run"))
    partition_file: Optional[str] = field(default=None, metadata=_section("run"))
    rates: Optional[str] = field(default=None, metadata=_section("run"))
    chunk_size: Optional[int] = field(default=None, metadata=_section("run"))
    pipeline: Optional[bool] = field(default=None, metadata=_section("run"))
    grid: Optional[str] = field(default=None, metadata=_section("run"))
    device_memory: Optional[str] = field(default=None, metadata=_section("run"))
    host_store: Optional[str] = field(default=None, metadata=_section("run"))
    store_dir: Optional[str] = field(default=None, metadata=_section("run"))
    chunks: Optional[str] = field(default=None, metadata=_section("run"))
    intermediates: Optional[str] = field(default=None, metadata=_section("run"))
    dedup: Optional[str] = field(default=None, metadata=_section("run"))
    reorganize: Optional[bool] = field(default=None, metadata=_section("run"))
    permute: Optional[bool] = field(default=None, metadata=_section("run"))
    blocks: Optional[int] = field(default=None, metadata=_section("run"))
    device: str = field(default="cpu", metadata=_section("run"))
    threads: Optional[int] = field(default=None, metadata=_section("run"))
    checkpoint: Optional[str] = field(default=None, metadata=_section("run"))
    checkpoint_every: int = field(default=0, metadata=_section("run"))
    resume: bool = field(default=False, metadata=_section("run"))
    metrics: Optional[str] = field(default=None, metadata=_section("run"))
    log_every: int = field(default=10, metadata=_section("run"))

    def __post_init__(self):
        self.validate()

    def validate(self) -> "Config":
        _refuse_retired_names(self)
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            base = _base_type(f.type)
            if f.name == "chunks" and isinstance(value, int) and not isinstance(value, bool):
                value = str(value)  # a count written as a TOML integer
                setattr(self, f.name, value)
            if f.name in ("fanouts", "eval_fanouts") and isinstance(value, (int, list)) \
                    and not isinstance(value, bool):  # written in TOML as 10 or [25, 10]
                value = ",".join(map(str, value if isinstance(value, list) else [value]))
                setattr(self, f.name, value)
            if base is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
                setattr(self, f.name, value)
            if not isinstance(value, base) or (base is int and isinstance(value, bool)):
                raise ConfigError(f"config field '{f.name}': expected {base.__name__}, got {value!r}")
            if f.name in CHOICES and value not in CHOICES[f.name]:
                raise ConfigError(f"config field '{f.name}': {value!r} is not one of {', '.join(CHOICES[f.name])}")
        for name, allowed in RANGES.items():
            value = getattr(self, name)
            if value is not None:
                allowed.check(name, value)
        if self.device_memory is not None:
            parse_bytes(self.device_memory, "device_memory")
        if self.partitioner == "shp" and (self.strategy not in VERTEX_ROUTED or self.planned):
            raise ConfigError("config field 'partitioner': shp partitions for sampled mini-batches; it applies "
                              f"to --minibatch --strategy {' or '.join(VERTEX_ROUTED)}, not {self.strategy}"
                              + (" without --minibatch" if self.planned else ""))
        if self.chunks is not None and self.chunks != "auto" and not (self.chunks.isdigit() and int(self.chunks) >= 1):
            raise ConfigError(f"config field 'chunks': {self.chunks!r} is neither 'auto' nor a positive integer")
        if self.host_store == "file" and not self.store_dir:
            raise ConfigError("config field 'host_store': 'file' needs 'store_dir' (--store-dir DIR)")
        if self.store_dir and self.host_store != "file":
            raise ConfigError("config field 'store_dir' applies only with host_store = 'file' (--host-store file)")
        if self.grid is not None:
            parse_grid(self.grid)  # its shape; the number of ranks is checked against the job's
        if self.checkpoint_every and not self.checkpoint:
            raise ConfigError("config field 'checkpoint_every' needs 'checkpoint' (a file path)")
        if self.strategy == "single" and self.nproc > 1 and not self.parts:
            raise ConfigError("config field 'nproc': the 'single' strategy runs one process; "
                              "choose a parallel --strategy (e.g. partition)")
        if self.decoupled and self.model == "gin":
            raise ConfigError("config field 'model': gin has no decoupled form; choose gcn, sage or gat")
        if self.strategy == "grid3d" and (self.model not in GRID3D_MODELS or self.decoupled):
            got = f"decoupled {self.model}" if self.decoupled else self.model
            raise ConfigError(f"config field 'model': the grid3d strategy runs {', '.join(GRID3D_MODELS)} "
                              f"(not their decoupled forms), got {got}")
        self._check_minibatch()
        if self.strategy == "tensor" and self.host_store and (not self.decoupled or self.model == "gat"):
            from .parallel.tensor_offload import REFUSED_MODELS
            raise ConfigError(REFUSED_MODELS)
        if self.parts and self.reorder != "none":
            raise ConfigError("config field 'reorder': parts are written in their final order; "
                              "reorder applies only when loading a dataset")
        if self.parts and self.planned:
            raise ConfigError("config field 'parts': --strategy auto plans from the whole dataset; parts were "
                              "written for one strategy (leave --strategy out to train with it)")
        if self.resume and not self.checkpoint:
            raise ConfigError("config field 'resume' needs 'checkpoint' (a file path)")
        self._refuse_inapplicable()
        return self

    def _check_minibatch(self) -> None:
        given = [name for name in MINIBATCH_FIELDS if getattr(self, name) is not None]
        if not self.minibatch:
            if given:
                raise ConfigError(f"config field '{given[0]}' applies only with --minibatch")
            if self.strategy in MINIBATCH_STRATEGIES[1:] and self.strategy != "auto":
                raise ConfigError(f"config field 'strategy': {self.strategy} trains mini-batches; add --minibatch")
            return
        if self.strategy not in MINIBATCH_STRATEGIES:
            raise ConfigError(f"config field 'strategy': mini-batch training runs with --strategy "
                              f"{' or '.join(MINIBATCH_STRATEGIES)}, not {self.strategy}")
        if self.decoupled:
            raise ConfigError("config field 'decoupled': mini-batch training runs layer stacks; a decoupled "
                              "model propagates k hops")
        if self.model == "gat" and self.strategy in NO_ATTENTION:
            raise ConfigError(f"config field 'strategy': {self.strategy} splits a first-layer row's sources "
                              f"across ranks, and attention needs them all in one place; run gat with "
                              f"--strategy gdp or dnp")
        if self.cache_memory is not None:
            parse_bytes(self.cache_memory, "cache_memory")
        if self.bandwidths is not None:
            from .planner.minibatch_dryrun import parse_links
            parse_links(self.bandwidths)
        if self.parts:
            raise ConfigError("config field 'parts': mini-batch training loads a dataset (every rank samples "
                              "from the whole graph)")
        from .sampling import parse_fanouts
        for name in ("fanouts", "eval_fanouts"):
            text = getattr(self, name)
            hops = len(parse_fanouts(text, name)) if text is not None else self.layers
            if hops != self.layers:
                raise ConfigError(f"config field '{name}': {text!r} gives {hops} hops for a "
                                  f"{self.layers}-layer model (one fanout per layer)")

    def _refuse_inapplicable(self) -> None:
        """A strategy's setting given for another strategy, or one the parts or a stored
        partition decide, is an error rather than silently ignored. Under --parts without
        --strategy the strategy is not known yet: the run checks again once the parts set it."""
        for name, strategy in STRATEGY_FIELDS.items():
            if getattr(self, name) is None:
                continue
            flag = ("--no-" if getattr(self, name) is False else "--") + name.replace("_", "-")
            where = f"config field '{name}' ({flag})"
            if self.parts and name in FIXED_BY_PARTS:
                raise ConfigError(f"{where} does not apply to --parts: the parts were partitioned "
                                  f"when they were written")
            if self.partition_file is not None and name in FIXED_BY_PARTITION_FILE:
                raise ConfigError(f"{where} does not apply with --partition-file: the stored "
                                  f"partition is used as it is")
            if self.strategy == "auto" and (name not in PLANNED_FIELDS if self.planned else name in PLAN_ONLY):
                raise ConfigError(f"{where} does not apply to --strategy auto "
                                  + ("without --minibatch: it plans across the full-graph strategies and takes "
                                     f"--{', --'.join(n.replace('_', '-') for n in PLANNED_FIELDS)}"
                                     if self.planned else "with --minibatch (it applies to full-graph training)"))
            if self.strategy not in strategy and not (self.parts and self.strategy == "single"):
                raise ConfigError(f"{where} applies only to --strategy {' or '.join(strategy)}; this run "
                                  f"uses {self.strategy}")
            refusal = self._tensor_engine_refuses(name)
            if refusal:
                raise ConfigError(f"{where} {refusal}")

    @property
    def planned(self) -> bool:
        """Whether the strategy is chosen by the planner across the full-graph strategies
        (``--strategy auto`` without ``--minibatch``; ``gnnmesh.train.auto``)."""
        return self.strategy == "auto" and not self.minibatch

    def _tensor_engine_refuses(self, name: str) -> Optional[str]:
        """Why setting ``name`` does not fit the tensor engine this config picks (None: it fits)."""
        if self.strategy != "tensor":
            return None
        if self.host_store is not None and name in TENSOR_IN_MEMORY:
            return ("does not apply with --host-store: the host store's chunks follow --chunks "
                    "and --device-memory")
        if self.host_store is None and name in HOST_TIER:
            return "applies to --strategy tensor only with --host-store ram or file"
        return None

    def resolved(self) -> "Config":
        """A copy with the model's defaults filled in for every unset hyper-parameter, the
        strategy's for its unset settings (other strategies' stay unset), and the device made
        concrete ('auto' becomes 'cuda' or 'cpu'); a run resolves its config once, before
        anything is built from it. A resolved config is its own resolution."""
        if getattr(self, "_resolved", False):
            return self
        changes = {k: v for k, v in self._model_defaults().items() if getattr(self, k) is None}
        changes.update({k: v for k, v in STRATEGY_DEFAULTS.items()
                        if getattr(self, k) is None and self.strategy in STRATEGY_FIELDS[k]
                        and self._tensor_engine_refuses(k) is None
                        and not (self.strategy == "tensor" and k == "host_store")  # in memory unless asked
                        and not (self.parts and k in FIXED_BY_PARTS)
                        and not (self.partition_file is not None and k in FIXED_BY_PARTITION_FILE)
                        # the plan leaves them open, then takes the chosen one's
                        and not (self.strategy == "auto" and (self.planned or k in PLAN_ONLY))})
        if self.minibatch and self.fanouts is None:  # ten neighbours per hop
            changes["fanouts"] = ",".join(["10"] * self.layers)
        if self.device != "cpu":
            changes["device"] = _available_device(self.device)
        out = dataclasses.replace(self, **changes)
        out._resolved = True  # ``updated`` copies are built afresh, unresolved
        return out

    def updated(self, **changes) -> "Config":
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)

    def model_defaults_used(self) -> set:
        """The hyper-parameters left unset here, which ``resolved()`` takes from the model."""
        return {name for name in self._model_defaults() if getattr(self, name) is None}

    def _model_defaults(self) -> dict:
        return DECOUPLED_DEFAULTS if self.decoupled else MODEL_DEFAULTS[self.model]

    def to_toml(self, defaults=()) -> str:
        """TOML for this config. Fields named in ``defaults`` are written as comments: model
        defaults, which a saved config must not pin (another --model takes its own)."""
        lines, section = [], None
        for f in fields(self):
            if f.metadata["section"] != section:
                section = f.metadata["section"]
                lines.append(("\n" if lines else "") + f"[{section}]")
            value = getattr(self, f.name)
            if value is None:
                lines.append(f"# {f.name} = (unset)")
            elif f.name in defaults:
                lines.append(f"# {f.name} = {_toml_value(value)}  (the model's default)")
            else:
                lines.append(f"{f.name} = {_toml_value(value)}")
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_toml(cls, path) -> "Config":
        path = Path(path)
        try:
            with open(path, "rb") as fh:
                raw = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"{path}: config file not found") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not a TOML file (not UTF-8 text)") from None
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{path}: {err}") from None
        except OSError as err:
            raise ConfigError(f"{path}: cannot read config file ({err.strerror})") from None
        flat: dict = {}
        for key, value in raw.items():
            items = value.items() if isinstance(value, dict) else [(key, value)]
            for name, item in items:
                if name in flat:
                    raise ConfigError(f"{path}: key '{name}' is set twice")
                flat[name] = item
        try:
            return cls().updated(**flat)
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from None


def _available_device(name: str) -> str:
    import torch  # only for runs that may use a GPU: the command line starts without torch
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        raise ConfigError("config field 'device': 'cuda' requested but no CUDA device is available")
    return name


# A decoupled model is asked for one way only: the model's name with ``decoupled``.
_RETIRED = {("model", "decoupled"): "the decoupled GCN is model 'gcn' with decoupled = true (--decoupled)",
            ("strategy", "tensor-decoupled"): "use strategy 'tensor' with decoupled = true "
                                              "(--strategy tensor --decoupled)"}


def _refuse_retired_names(config: Config) -> None:
    for (name, value), hint in _RETIRED.items():
        if getattr(config, name) == value:
            raise ConfigError(f"config field '{name}': {value!r} is not a {name}; {hint}")


def _base_type(annotation):
    hint = eval(annotation, vars(typing)) if isinstance(annotation, str) else annotation
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)

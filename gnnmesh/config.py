"""Run configuration: one section per part of a run (``gnnmesh.settings``), loadable from TOML,
overridable by flags.

    config = Config.of(dataset="cora", strategy="partition", nproc=2)   # settings named as flags
    config.run.strategy, config.model.name, config.grid3d.blocks         # read by section

A TOML file holds one table per section (``[data]``, ``[model]``, ``[training]``, ``[run]``,
``[minibatch]`` and one per strategy family: ``[partition]``, ``[tensor]``, ``[grid3d]``,
``[host_tier]``, ``[offload]``, ``[plan]``); ``--print-config`` writes one. A file in the older
flat form (every key a flag's name, in any table) still loads, with a one-line note.

Model hyper-parameters left unset take the model's literature defaults; a strategy's settings
left unset take their defaults only when the run's strategy reads them (which one reads which:
``gnnmesh.strategies``), and a setting given for a strategy that does not read it is refused.
``resolved()`` fills the defaults in. Checking never changes a config.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from . import strategies, tasks
from .errors import ConfigError
from .layout import ParallelLayout
from .partition.registry import spec as partitioner_spec
from .settings import (SECTIONS, STRATEGY_SECTIONS, DataSection, Grid3DSection,
                       HostTierSection, LinkSection, MiniBatchSection, ModelSection, OffloadSection, PartitionSection, PlanSection,
                       RunSection, TensorSection, TrainingSection, field_index, flag_name)
from .structured import load_toml

# Every setting's flat name (its flag without dashes) -> (section, field).
FIELDS = field_index()
# Decided when a parts directory is written ('gnnmesh partition --write-parts'): a --parts run
# takes them from the parts.
FIXED_BY_PARTS = ("partitioner", "epsilon", "partition_file", "permute")
# What a stored partition (--partition-file) makes moot.
FIXED_BY_PARTITION_FILE = ("partitioner", "epsilon")
# The flag that picks a strategy's second engine (``gnnmesh.strategies.engine_for``).
ENGINE_FLAGS = {"host_store": "--host-store ram or file", "minibatch": "--minibatch"}


@dataclass(frozen=True)
class Config:
    data: DataSection = field(default_factory=DataSection)
    model: ModelSection = field(default_factory=ModelSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    link: LinkSection = field(default_factory=LinkSection)
    run: RunSection = field(default_factory=RunSection)
    minibatch: MiniBatchSection = field(default_factory=MiniBatchSection)
    partition: PartitionSection = field(default_factory=PartitionSection)
    tensor: TensorSection = field(default_factory=TensorSection)
    grid3d: Grid3DSection = field(default_factory=Grid3DSection)
    host_tier: HostTierSection = field(default_factory=HostTierSection)
    offload: OffloadSection = field(default_factory=OffloadSection)
    plan: PlanSection = field(default_factory=PlanSection)

    def __post_init__(self):
        for name, cls in SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(f"config section '{name}': expected {cls.__name__}, got {getattr(self, name)!r}")
        self._check()

    # -- building -------------------------------------------------------------------------------
    @classmethod
    def of(cls, **settings) -> "Config":
        """A config from settings named as their flags (``strategy="tensor", chunk_size=4``)."""
        return cls().updated(**settings)

    def updated(self, **settings) -> "Config":
        """A copy with ``settings`` (named as their flags) changed, checked anew."""
        unknown = sorted(set(settings) - set(FIELDS))
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
        by_section: dict = {}
        for name, value in settings.items():
            section, attribute = FIELDS[name]
            by_section.setdefault(section, {})[attribute] = value
        changed = {}
        for section, values in by_section.items():
            current = getattr(self, section)
            kept = {f.name: getattr(current, f.name) for f in fields(current) if f.name not in values}
            changed[section] = type(current).build(**kept, **values)
        out = dataclasses.replace(self, **changed)
        object.__setattr__(out, "_given", self.given | frozenset(settings))
        return out

    @property
    def given(self) -> frozenset:
        """The settings (named as flags) given to this config, by ``of``, ``updated``, a TOML
        file or a flag, whatever their values: a setting left at its default is not given,
        one given its default value is (``--dataset cora`` beside ``--parts``)."""
        return getattr(self, "_given", frozenset())

    # -- reading --------------------------------------------------------------------------------
    def get(self, name: str):
        """The setting named ``name`` (a flag's name without dashes)."""
        section, attribute = FIELDS[name]
        return getattr(getattr(self, section), attribute)

    @property
    def planned(self) -> bool:
        """Whether the strategy is chosen by the planner across the full-graph strategies
        (``--strategy auto`` without ``--minibatch``; ``gnnmesh.train.auto``)."""
        return strategies.spec(self.run.strategy).planned and not self.training.minibatch

    @property
    def strategy_spec(self) -> strategies.StrategySpec:
        """The registry's entry for this run's strategy (its engine, where it has two)."""
        return strategies.engine_for(self.run.strategy, minibatch=self.training.minibatch,
                                     host_store=self.host_tier.host_store)

    @property
    def engine(self) -> strategies.StrategySpec:
        """Deprecated: the former name of ``strategy_spec``."""
        warnings.warn("Config.engine is now named Config.strategy_spec", DeprecationWarning, stacklevel=2)
        return self.strategy_spec

    def model_defaults_used(self) -> set:
        """The hyper-parameters left unset here, which ``resolved()`` takes from the model."""
        return {name for name in self.model.defaults() if self.get(name) is None}

    # -- checks ---------------------------------------------------------------------------------
    def _check(self) -> None:
        run, model = self.run, self.model
        if run.strategy == "tensor-decoupled":
            raise ConfigError("config field 'strategy': 'tensor-decoupled' is not a strategy; use strategy "
                              "'tensor' with decoupled = true (--strategy tensor --decoupled)")
        spec = self.strategy_spec  # an unknown strategy is refused here
        sampled = self.partition.partitioner is not None and partitioner_spec(self.partition.partitioner).sampled
        if sampled and (spec.training != "minibatch" or "partition" not in spec.reads):
            routed = [s.name for s in strategies.REGISTRY.values()
                      if s.training == "minibatch" and "partition" in s.reads]
            raise ConfigError(f"config field 'partitioner': {self.partition.partitioner} partitions for sampled "
                              "mini-batches; it applies "
                              f"to --minibatch --strategy {' or '.join(dict.fromkeys(routed))}, not {run.strategy}"
                              + (" without --minibatch" if self.planned else ""))
        if spec.one_process and run.nproc > 1 and not self.data.parts:
            raise ConfigError("config field 'nproc': the 'single' strategy runs one process; "
                              "choose a parallel --strategy (e.g. partition)")
        self._check_training_mode(spec)
        self._check_restart_counts()
        if not spec.runs_model(model.name, model.decoupled):
            got = f"decoupled {model.name}" if model.decoupled else model.name
            raise ConfigError(f"config field 'model': {spec.refusal or f'--strategy {run.strategy} does not run it'}"
                              f", got {got}")
        if self.data.parts and self.data.reorder != "none":
            raise ConfigError("config field 'reorder': parts are written in their final order; "
                              "reorder applies only when loading a dataset")
        if self.data.parts and not spec.one_process and spec.parts is None and spec.training != "minibatch":
            raise ConfigError(f"config field 'parts': {self._engine_name(spec)} trains from a dataset, not from "
                              f"parts (parts are written for --strategy "
                              f"{' or '.join(s.name for s in strategies.REGISTRY.values() if s.parts)})")
        if self.data.parts and self.planned:
            raise ConfigError("config field 'parts': --strategy auto plans from the whole dataset; parts were "
                              "written for one strategy (leave --strategy out to train with it)")
        self._refuse_inapplicable(spec)
        self._check_link(spec)

    @property
    def learns_links(self) -> bool:
        """Whether the run's task learns from node pairs (``--task link``)."""
        return self.training.task is not None and tasks.spec(self.training.task).links

    def _check_link(self, spec) -> None:
        """The link settings apply to --task link alone, which runs where pairs can be scored."""
        if not self.learns_links:
            given = self.link.given()
            if given:
                raise ConfigError(f"config field '{given[0]}' applies to --task link, not "
                                  f"{self.training.task or 'a task inferred from the labels'}")
            return
        if not spec.scores_pairs and spec.planned and self.training.minibatch:
            routes = ", ".join(s.name for s in strategies.REGISTRY.values()
                                 if s.scores_pairs and s.training == "minibatch")
            raise ConfigError(f"config field 'strategy': --strategy auto --minibatch picks a route by a dry run of "
                              f"batches of seed nodes, not of node pairs; --task link --minibatch runs under "
                              f"--strategy {routes} (or single)")
        if not spec.scores_pairs:
            able = ", ".join(s.name for s in strategies.REGISTRY.values() if s.scores_pairs)
            raise ConfigError(f"config field 'task': {self._engine_name(spec)} cannot score node pairs yet; "
                              f"--task link runs under --strategy {able}")
        if self.data.parts:
            raise ConfigError("config field 'parts': --task link trains on the whole graph, loaded from a dataset")
        if self.training.minibatch and self.minibatch.batch_size is not None:
            raise ConfigError("config field 'batch_size': --task link --minibatch batches training edges, "
                              "--edge-batch-size of them a step (--batch-size counts seed nodes)")
        if self.training.minibatch and self.minibatch.eval_fanouts is not None:
            raise ConfigError("config field 'eval_fanouts': --task link --minibatch scores held-out pairs from "
                              "every neighbour, in one whole-graph pass")

    def _check_restart_counts(self) -> None:
        """A job restarted after losing ranks goes on with as few as ``min_nproc``: refused now,
        not at the first restart, where that count cannot run the job (parts are written for
        one rank count; a --grid places one)."""
        run = self.run
        fewest = run.min_nproc or 1
        if not run.max_restarts or fewest >= run.nproc:
            return
        if self.data.parts:
            raise ConfigError(f"config field 'min_nproc': parts are written for {run.nproc} ranks, so a job that "
                              f"trains from them restarts on as many; give --min-nproc {run.nproc}")
        if self.planned:
            return
        for ranks in range(fewest, run.nproc):
            try:
                ParallelLayout.for_strategy(run.strategy, ranks, self.grid3d.grid)
            except ConfigError as err:
                raise ConfigError(f"config field 'min_nproc': a restart on {ranks} ranks would fail ({err}); give "
                                  f"--min-nproc {run.nproc}, or a --min-nproc whose counts all run this layout") \
                    from None

    def _check_training_mode(self, spec) -> None:
        mini, strategy = self.minibatch, self.run.strategy
        given = [name for name in ("fanouts", "batch_size", "eval_fanouts") if getattr(mini, name) is not None]
        if not self.training.minibatch:
            if given:
                raise ConfigError(f"config field '{given[0]}' applies only with --minibatch")
            if spec.training == "minibatch":
                raise ConfigError(f"config field 'strategy': {strategy} trains mini-batches; add --minibatch")
            return
        if spec.training == "full":
            raise ConfigError(f"config field 'strategy': mini-batch training runs with --strategy "
                              f"{' or '.join(strategies.names('minibatch'))}, not {strategy}")
        if self.model.decoupled:
            raise ConfigError("config field 'decoupled': mini-batch training runs layer stacks; a decoupled "
                              "model propagates k hops")
        if self.data.parts:
            raise ConfigError("config field 'parts': mini-batch training loads a dataset (every rank samples "
                              "from the whole graph)")
        from .sampling import hop_count
        for name in ("fanouts", "eval_fanouts"):
            text = getattr(mini, name)
            hops = hop_count(text, name) if text is not None else self.model.layers
            if hops != self.model.layers:
                raise ConfigError(f"config field '{name}': {text!r} gives {hops} hops for a "
                                  f"{self.model.layers}-layer model (one fanout per layer)")

    def _strategy_settings(self):
        """(flat name, section, field, value) of every strategy setting that is set."""
        for section in STRATEGY_SECTIONS + ("minibatch",):
            values = getattr(self, section)
            for f in fields(values):
                value = getattr(values, f.name)
                if value is not None and (section != "minibatch" or strategies_only(f.name)):
                    yield flag_name(f), section, f.name, value

    def _refuse_inapplicable(self, spec) -> None:
        """A strategy's setting given for another strategy, or one the parts or a stored
        partition decide, is an error rather than silently ignored. Under --parts without
        --strategy the strategy is not known yet: the run checks again once the parts set it."""
        strategy = self.run.strategy
        for name, section, attribute, value in self._strategy_settings():
            flag = ("--no-" if value is False else "--") + name.replace("_", "-")
            where = f"config field '{name}' ({flag})"
            if self.data.parts and name in FIXED_BY_PARTS:
                raise ConfigError(f"{where} does not apply to --parts: the parts were partitioned "
                                  f"when they were written")
            if self.partition.partition_file is not None and name in FIXED_BY_PARTITION_FILE:
                raise ConfigError(f"{where} does not apply with --partition-file: the stored "
                                  f"partition is used as it is")
            if spec.reads_setting(section, attribute) or (self.data.parts and strategies.spec(strategy).one_process):
                continue
            readers = [s for s in strategies.engines(strategy) if s.reads_setting(section, attribute)]
            if readers:  # another engine of this strategy reads it
                raise ConfigError(f"{where} {self._other_engine(strategy, readers[0])}")
            owners = [s.name for s in strategies.REGISTRY.values() if s.reads_setting(section, attribute)]
            raise ConfigError(f"{where} applies only to --strategy {' or '.join(dict.fromkeys(owners))}; "
                              f"this run uses {strategy}")

    def _engine_name(self, spec) -> str:
        """``--strategy NAME``, with the flag that picks its engine where it has two."""
        key = strategies.engine_of(spec)
        return f"--strategy {spec.name}" + (f" with {ENGINE_FLAGS[key].split(' ')[0]}" if key else "")

    def _other_engine(self, strategy: str, reader) -> str:
        """Why a setting that another engine of ``strategy`` reads does not apply here."""
        engine = strategies.engine_of(reader)
        if engine:  # the setting needs the second engine's flag
            return f"applies to --strategy {strategy} only with {ENGINE_FLAGS[engine]}"
        mine = strategies.engine_of(self.strategy_spec)
        return f"does not apply with {ENGINE_FLAGS[mine].split(' ')[0]} (--strategy {strategy})"

    # -- defaults ---------------------------------------------------------------------------------
    def resolved(self) -> "Config":
        """A copy with the model's defaults filled in for every unset hyper-parameter, the
        strategy's for its unset settings (other strategies' stay unset), and the device made
        concrete ('auto' becomes 'cuda' or 'cpu'); a run resolves its config once, before
        anything is built from it. A resolved config is its own resolution."""
        if getattr(self, "_resolved", False):
            return self
        changes = {k: v for k, v in self.model.defaults().items() if self.get(k) is None}
        spec = self.strategy_spec
        for name, (section, attribute) in FIELDS.items():
            default = strategy_default(name)
            if (default is None or self.get(name) is not None or not spec.reads_setting(section, attribute)
                    or (self.data.parts and name in FIXED_BY_PARTS)
                    or (self.partition.partition_file is not None and name in FIXED_BY_PARTITION_FILE)
                    or self.planned):  # the plan leaves them open, then takes the chosen one's
                continue
            changes[name] = default
        if self.training.minibatch and self.minibatch.fanouts is None:  # ten neighbours per hop
            changes["fanouts"] = ",".join(["10"] * self.model.layers)
        if self.run.device != "cpu":
            changes["device"] = _available_device(self.run.device)
        out = self.updated(**changes)
        object.__setattr__(out, "_resolved", True)  # ``updated`` copies are built afresh, unresolved
        object.__setattr__(out, "_given", self.given)  # defaults filled in are not given
        return out

    # -- files ----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Every setting by its flat name: the form checkpoints and metrics record."""
        return {name: self.get(name) for name in FIELDS}

    def to_toml(self, defaults=()) -> str:
        """TOML for this config, a table per section. Settings named in ``defaults`` are written
        as comments: model defaults, which a saved config must not pin (another --model takes
        its own)."""
        lines = []
        for section in SECTIONS:
            values = getattr(self, section)
            lines.append(("\n" if lines else "") + f"[{section}]")
            for f in fields(values):
                value = getattr(values, f.name)
                if value is None:
                    lines.append(f"# {f.name} = (unset)")
                elif flag_name(f) in defaults:
                    lines.append(f"# {f.name} = {_toml_value(value)}  (the model's default)")
                else:
                    lines.append(f"{f.name} = {_toml_value(value)}")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_toml(cls, path) -> "Config":
        path = Path(path)
        try:
            with open(path, "rb") as fh:
                raw = load_toml(fh)
        except FileNotFoundError:
            raise ConfigError(f"{path}: config file not found") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not a TOML file (not UTF-8 text)") from None
        except ValueError as err:  # TOMLDecodeError, or nested too deeply
            raise ConfigError(f"{path}: {err}") from None
        except OSError as err:
            raise ConfigError(f"{path}: cannot read config file ({err.strerror})") from None
        try:
            if not _flat_form(raw):
                return cls.of(**_sectioned(raw))
            config = cls.of(**_flat(raw))
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from None
        warnings.warn(f"gnnmesh: {path}: the flat config form is deprecated; 'gnnmesh train --config {path} "
                      f"--print-config' prints it with one table per section", FutureWarning, stacklevel=2)
        return config


def strategy_default(name: str):
    """The value a strategy setting (named as its flag) takes when its strategy reads it unset."""
    section, attribute = FIELDS[name]
    return next(f for f in fields(SECTIONS[section]) if f.name == attribute).metadata.get("resolves_to")


def settings_read_by(spec: strategies.StrategySpec) -> tuple:
    """The strategy settings (named as flags) that ``spec`` reads."""
    return tuple(name for name, (section, attribute) in FIELDS.items()
                 if section in STRATEGY_SECTIONS + ("minibatch",) and spec.reads_setting(section, attribute))


def strategies_only(name: str) -> bool:
    """Whether a ``[minibatch]`` field belongs to the mini-batch strategies with several ranks
    (the rest apply to every mini-batch run and are checked with --minibatch)."""
    return name in ("cache_memory", "bandwidths")


def _flat_form(raw: dict) -> bool:
    """Whether a TOML document is in the older flat form: keys outside any table, a [train]
    table, or a key of [data], [model] or [run] that is a flag's name but not a setting of
    that section (``model`` in [model], ``partitioner`` in [run])."""
    if any(not isinstance(values, dict) for values in raw.values()) or "train" in raw:
        return True
    return any(key in FIELDS and key not in {f.name for f in fields(SECTIONS[table])}
               for table in ("data", "model", "run") if table in raw for key in raw[table])


def _sectioned(raw: dict) -> dict:
    """The settings, named as flags, of a TOML document with one table per section; an unknown
    table or key is an error naming it."""
    settings = {}
    for table, values in raw.items():
        if table not in SECTIONS:
            raise ConfigError(f"unknown config section [{table}] (the sections: {', '.join(SECTIONS)})")
        names = {f.name: flag_name(f) for f in fields(SECTIONS[table])}
        for key, value in values.items():
            if key not in names:
                raise ConfigError(f"unknown config field '{key}' in [{table}] (its fields: {', '.join(names)})")
            settings[names[key]] = value
    return settings


def _flat(raw: dict) -> dict:
    """The settings of a flat TOML document (keys named as flags, in any table)."""
    flat: dict = {}
    for key, value in raw.items():
        items = value.items() if isinstance(value, dict) else [(key, value)]
        for name, item in items:
            if name in flat:
                raise ConfigError(f"key '{name}' is set twice")
            flat[name] = item
    return flat


def _available_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        raise ConfigError("config field 'device': 'cuda' requested but no CUDA device is available")
    return device


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


__all__ = ["Config", "FIELDS", "strategy_default", "settings_read_by"]

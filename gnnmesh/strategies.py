"""The registry of parallel strategies: the one place a strategy is named.

Each strategy is declared once, as a ``StrategySpec``: its name, the layout degrees it splits,
the settings sections it reads (``gnnmesh.settings``), the models it runs, and where its
factory, its planner model and its parts writer live. Config validation, the command line,
``ParallelLayout``, the trainer, the planner and the parts writer all read this table.

Code is named by "module:attribute" and imported only when used, so that this module sits
below everything it names.

Adding a strategy: write its package (a ``Strategy`` subclass and a factory ``(config, layout,
device) -> Strategy``) and add one ``StrategySpec`` line to the table below, or call
``register(spec)`` from your own code. The guide "Adding a strategy" walks through one.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Optional

from .errors import ConfigError
from .registries import add

# The sections (or "section.field" settings) every mini-batch strategy with several ranks reads.
_MINIBATCH_PARALLEL = ("minibatch.cache_memory", "minibatch.bandwidths", "host_tier.host_store",
                       "host_tier.store_dir")
_HOST_TIER = ("host_tier.device_memory", "host_tier.host_store", "host_tier.store_dir", "host_tier.chunks",
              "host_tier.dedup", "host_tier.reorganize", "host_tier.overlap")


@dataclass(frozen=True)
class StrategySpec:
    """One strategy as the rest of gnnmesh sees it.

    ``dims``: the layout degrees it splits (``rows``, ``cols``, or the grid axes ``x y z``).
    ``reads``: the settings it takes, as section names or "section.field"; any other
    strategy setting given for it is refused. ``training``: "full" (the whole graph each
    epoch), "minibatch" (needs ``--minibatch``) or "both". ``models``: the models it runs
    (None: all); ``forms``: which of their forms it runs ("plain", "decoupled"). ``factory``,
    ``planner`` and ``parts``: "module:attribute" of its builder ``(config, layout, device)
    -> Strategy``, its planner model ``(PlanJob) -> [Estimate or Dropped]`` (the protocol of
    ``gnnmesh.planner.job``, which ``gnnmesh plan`` and ``--strategy auto`` ask) and its parts
    writer (None: it has none). A second engine under the same name, chosen by a setting, is
    registered with ``register(spec, engine=...)`` (``engine_for``).
    ``needs``: what it needs of a model's structure (``gnnmesh.models.contract.NEEDS``), checked
    on a user's model once it is built. ``summary``: one line for help texts and the docs' table.
    ``planned``: it has no engine of its own; the planner (or the mini-batch dry run) picks
    another strategy. ``named_by``: the settings (``partitioner``, ``decoupled``, ``grid``)
    that complete a candidate's display name (``gnnmesh.planner.estimate.name_of``).
    ``from_parts``: the settings a parts directory written for it fixes when not given.
    ``model_check``: the settings under which a user's model is run against the single
    process to find what breaks exactness (``gnnmesh.train.model_check``); None: not one of
    those strategies (they run any model written on the primitives)."""

    name: str
    dims: tuple
    reads: tuple = ()
    training: str = "full"
    models: Optional[tuple] = None
    forms: tuple = ("plain", "decoupled")
    factory: Optional[str] = None
    planner: Optional[str] = None
    parts: Optional[str] = None
    plan_view: Optional[str] = None
    summary: str = ""
    refusal: str = ""   # why a model outside ``models``/``decoupled`` cannot run (empty: a generic line)
    needs: str = "primitives"
    planned: bool = False   # no engine of its own: the planner (or a dry run) picks another strategy
    named_by: tuple = ()    # the settings that complete a candidate's name ("partition hp", "grid3d 2x1x2")
    from_parts: tuple = ()  # settings a parts directory fixes, its manifest's entries of the same name
    partition_view: Optional[str] = None   # 'gnnmesh partition --strategy NAME', when not a vertex partition
    partition_view_summary: str = ""       # what that view does, for the command's help
    model_check: Optional[dict] = None     # the settings a user's model is checked for exactness under it with
    scores_pairs: bool = False             # its ranks' output rows can be fetched by id: it runs --task link

    @property
    def one_process(self) -> bool:
        """Whether it runs on one process (it splits nothing)."""
        return not self.dims

    def runs_model(self, model: str, decoupled: bool) -> bool:
        """Whether it runs the built-in ``model`` (in its ``decoupled`` form); a user's model
        (FILE:CLASS) is checked by ``model_problem`` once built."""
        from .models.user import is_user_model
        if is_user_model(model):
            return True
        return (self.models is None or model in self.models) and ("decoupled" if decoupled else "plain") in self.forms

    def model_problem(self, model, minibatch: bool = False) -> str:
        """What keeps this strategy from running the built ``model`` ('' if nothing); a
        mini-batch run needs at least a layer stack."""
        from .models.contract import NEEDS, meets, what
        need = "layer_stack" if minibatch and self.needs == "primitives" else self.needs
        if meets(model, need):
            return ""
        how = " --minibatch" if minibatch else ""
        return f"--strategy {self.name}{how} needs {NEEDS[need]}; the model is {what(model)}"

    def reads_setting(self, section: str, name: str) -> bool:
        return section in self.reads or f"{section}.{name}" in self.reads

    def build(self, config, layout, device):
        """This strategy for one rank (the process group initialized, ``layout`` checked)."""
        if self.factory is None:  # a choice among the others, made where the job is planned
            raise ConfigError(f"config field 'strategy': {self.name} is chosen by the planner when training "
                              f"runs (gnnmesh train, or gnnmesh.train.run.run_training(config)); a Trainer "
                              f"takes the strategy it runs, e.g. partition")
        return load(self.factory)(config, layout, device)


REGISTRY: dict = {}


def register(spec: StrategySpec, engine: Optional[str] = None) -> StrategySpec:
    """Add ``spec`` to the registry (``engine``: a second engine of an existing strategy's name,
    chosen by ``engine_for``)."""
    key = spec.name if engine is None else f"{spec.name}:{engine}"
    return add(REGISTRY, key, spec, "strategy")


for _spec in (
    StrategySpec("single", (), training="both", factory="gnnmesh.parallel.factories:single", scores_pairs=True,
                 planner="gnnmesh.planner.partition:single_candidates",
                 summary="one process, the reference every other strategy equals"),
    StrategySpec("partition", ("rows",), ("partition",), named_by=("partitioner",), scores_pairs=True,
                 model_check={"partitioner": "rp"},   # a random cut: rows split every way
                 factory="gnnmesh.parallel.factories:partition",
                 planner="gnnmesh.planner.partition:candidates", parts="gnnmesh.parallel.partition.parts:write_partition_parts",
                 summary="1D: vertex rows split by a partitioner, halo rows exchanged (Demirci et al.)"),
    StrategySpec("tensor", ("cols",), ("tensor",), named_by=("decoupled",), model_check={}, scores_pairs=True,
                 factory="gnnmesh.parallel.factories:tensor",
                 planner="gnnmesh.planner.tensor:candidates", parts="gnnmesh.parallel.tensor.parts:write_tensor_parts",
                 partition_view="gnnmesh.commands.partition:write_tensor", partition_view_summary="with --nparts P and "
                 "--write-parts DIR, its parts (the whole topology, near-equal row blocks of the vertex data)",
                 summary="feature columns split across ranks, chunked and pipelined (NeutronTP)"),
    StrategySpec("grid3d", ("x", "y", "z"), ("grid3d",), named_by=("grid",), from_parts=("grid",), scores_pairs=True,
                 models=("gcn", "sage", "gin", "rgcn"), forms=("plain",), needs="maths",
                 factory="gnnmesh.parallel.factories:grid3d", planner="gnnmesh.planner.grid3d:candidates",
                 parts="gnnmesh.parallel.grid3d.parts:write_grid_parts",
                 partition_view="gnnmesh.commands.partition:run_grid", partition_view_summary="nonzero balance of the "
                 "--grid R,C blocks of the adjacency in the original order, with one permutation, with the double "
                 "permutation (--seed) and with a balanced pair; with --grid X,Y,Z and --write-parts DIR, its parts",
                 plan_view="gnnmesh.commands.plan_grid3d:run",
                 refusal="the grid3d strategy runs gcn, sage, gin, rgcn (not their decoupled forms)",
                 summary="3D grid of ranks with double permutation (Plexus)"),
    StrategySpec("offload", ("rows",), ("partition", "offload") + _HOST_TIER, named_by=("partitioner",), scores_pairs=True,
                 factory="gnnmesh.parallel.factories:offload", planner="gnnmesh.planner.offload:candidates",
                 needs="stages",
                 plan_view="gnnmesh.commands.plan_offload:run",
                 summary="out of core: vertex data in host memory or files, chunks through the device (HongTu)"),
    StrategySpec("gdp", ("rows",), _MINIBATCH_PARALLEL, training="minibatch", needs="layer_stack",
                 factory="gnnmesh.parallel.factories:minibatch", scores_pairs=True,
                 summary="mini-batch: each rank samples and computes its own batches (APT's GDP)"),
    StrategySpec("nfp", ("rows",), _MINIBATCH_PARALLEL, training="minibatch",
                 models=("gcn", "sage", "gin", "rgcn"),
                 needs="first_maths", scores_pairs=True,
                 factory="gnnmesh.parallel.factories:minibatch", refusal="nfp splits a first-layer row's "
                 "sources across ranks, and attention needs them all in one place; run gat or rgat with "
                 "--strategy gdp or dnp", summary="mini-batch: input feature columns split across ranks (APT's NFP)"),
    StrategySpec("snp", ("rows",), ("partition",) + _MINIBATCH_PARALLEL, training="minibatch",
                 models=("gcn", "sage", "gin"), factory="gnnmesh.parallel.factories:minibatch", needs="first_maths",
                 scores_pairs=True, refusal="snp splits a first-layer row's sources across ranks, and attention "
                 "needs them all in one place, as a mean per relation needs each relation's; run gat or rgat with "
                 "--strategy gdp or dnp, rgcn with gdp, dnp or nfp",
                 summary="mini-batch: first-layer sources routed to the ranks that own them (APT's SNP)"),
    StrategySpec("dnp", ("rows",), ("partition",) + _MINIBATCH_PARALLEL, training="minibatch", needs="layer_stack",
                 factory="gnnmesh.parallel.factories:minibatch", scores_pairs=True,
                 summary="mini-batch: first-layer destinations routed to their owners (APT's DNP)"),
    StrategySpec("auto", ("rows",), ("partition.partitioner", "partition.epsilon", "host_tier.device_memory",
                                     "plan.rates"), training="both", planned=True,
                 summary="the strategy the planner predicts fastest for this job"),
):
    register(_spec)
# Tensor parallelism's second engine: the vertex data in a host store (--host-store).
register(StrategySpec("tensor", ("cols",), _HOST_TIER, models=("gcn", "sage"), forms=("decoupled",), needs="propagation",
                      factory="gnnmesh.parallel.factories:tensor_host_store",
                      refusal="--strategy tensor with --host-store trains decoupled models without attention "
                      "(--decoupled with gcn or sage), whose propagation runs on column slices; for other models "
                      "out of core use --strategy offload"),
         engine="host_store")
# Mini-batch --strategy auto picks among the mini-batch strategies (APT's choice).
register(StrategySpec("auto", ("rows",), ("partition",) + _MINIBATCH_PARALLEL, training="minibatch", needs="layer_stack",
                      planned=True,
                      factory="gnnmesh.parallel.factories:minibatch",
                      summary="the mini-batch strategy a dry run predicts fastest"),
         engine="minibatch")


def names(training: Optional[str] = None) -> tuple:
    """The strategies' names, in registry order (``training``: only those that train that way)."""
    out = []
    for spec in REGISTRY.values():
        if spec.name not in out and (training is None or spec.training in (training, "both")):
            out.append(spec.name)
    return tuple(out)


def spec(name: str) -> StrategySpec:
    """The strategy called ``name`` (its first engine); a ConfigError naming the field otherwise."""
    if name not in REGISTRY:
        raise ConfigError(f"config field 'strategy': {name!r} is not one of {', '.join(names())}")
    return REGISTRY[name]


def engine_for(name: str, *, minibatch: bool = False, host_store=None) -> StrategySpec:
    """The engine a run of strategy ``name`` uses: a second engine is chosen by a setting."""
    base = spec(name)
    if minibatch and f"{name}:minibatch" in REGISTRY:
        return REGISTRY[f"{name}:minibatch"]
    if host_store is not None and f"{name}:host_store" in REGISTRY:
        return REGISTRY[f"{name}:host_store"]
    return base


def engines(name: str) -> list:
    """Every engine registered under ``name``."""
    return [s for key, s in REGISTRY.items() if key.partition(":")[0] == name]


def engine_of(registered: StrategySpec) -> str:
    """The key of the second engine ``registered`` is ("host_store", "minibatch"); "" for a
    strategy's first."""
    return next(key for key, s in REGISTRY.items() if s is registered).partition(":")[2]


def dims_of(name: str) -> tuple:
    return spec(name).dims


def load(ref: str) -> Callable:
    """The object a "module:attribute" reference names."""
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)

"""The registry of built-in models: the one place a model is named.

Each model is declared once, as a ``ModelSpec``: its class, the defaults of its
hyper-parameters (from the paper that introduced it), its decoupled form, and what it needs of
a strategy. The settings (``--model`` choices, defaults, the options a model takes), the
builder (``gnnmesh.models.build_model``), the planner and the mini-batch routes read it.
A model of your own is a class named on the command line (``--model FILE.py:CLASS``,
``gnnmesh.models.user``), or a ``register(ModelSpec(...))`` call in your code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import ConfigError
from ..registries import add
from .decoupled import Decoupled
from .gat import GAT
from .gatv2 import GATv2
from .gcn import GCN
from .gin import GIN
from .gine import GINE
from .rgat import RGAT
from .rgcn import RGCN
from .sage import SAGE

# Every model's decoupled form (``decoupled = true``) takes APPNP's settings; a decoupled form
# with attention also takes its model's attention settings (``ModelSpec.decoupled_defaults``).
DECOUPLED_DEFAULTS = {"hidden": 64, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4, "k": 10, "alpha": 0.1}
# The training settings a user's model (FILE.py:CLASS) takes; its own options come from --model-args.
USER_MODEL_DEFAULTS = {"lr": 0.01, "weight_decay": 5e-4}


@dataclass(frozen=True)
class ModelSpec:
    """One built-in model as the rest of gnnmesh sees it.

    ``model``: its class, built as ``model(in_dim, num_classes, **options)``; the options it
    takes are its signature's (``gnnmesh.models.options_of``). ``defaults``: its
    hyper-parameters' defaults, model and training settings alike. ``decoupled``: the keyword
    arguments of ``Decoupled`` that make its decoupled form (None: it has none).
    ``attention``: what it needs of a strategy: a first-layer row's sources all in one place
    (attention normalizes over them), which the routes that split them cannot give.
    ``edge_weights``: what its PyG export (``gnnmesh.export``) does with a graph's edge
    weights. ``summary``: one line for help texts."""

    name: str
    model: type
    defaults: dict
    decoupled: Optional[dict] = None
    attention: bool = False
    edge_weights: str = "refused"   # what its PyG export does with edge weights: used, ignored or refused
    summary: str = ""

    def form(self, decoupled: bool) -> type:
        """The class of its plain or ``decoupled`` form."""
        return Decoupled if decoupled else self.model

    def form_defaults(self, decoupled: bool) -> dict:
        """The defaults of its plain or ``decoupled`` form."""
        if not decoupled:
            return self.defaults
        attention = (self.decoupled or {}).get("attention")
        return {**DECOUPLED_DEFAULTS, **({k: self.defaults[k] for k in Decoupled.ATTENTION_OPTIONS
                                          if k in self.defaults} if attention else {})}


REGISTRY: dict = {}


def register(model_spec: ModelSpec) -> ModelSpec:
    """Add ``model_spec`` to the registry."""
    return add(REGISTRY, model_spec.name, model_spec, "model")


def names(decoupled: bool = False) -> tuple:
    """The built-in models' names, in registry order (``decoupled``: those with a decoupled form)."""
    return tuple(name for name, s in REGISTRY.items() if not decoupled or s.decoupled is not None)


def is_built_in(name: str) -> bool:
    return name in REGISTRY


def spec(name: str) -> ModelSpec:
    """The built-in model ``name``; a ConfigError naming the field otherwise."""
    if name not in REGISTRY:
        raise ConfigError(f"config field 'model': {name!r} is not one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


# Settings from the papers that introduced each model (Cora-scale, full-batch).
for _spec in (
    ModelSpec("gcn", GCN, {"hidden": 16, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4}, decoupled={},
              edge_weights="used",
              summary="graph convolution (Kipf and Welling)"),
    ModelSpec("sage", SAGE, {"hidden": 16, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4},
              decoupled={"op": "mean"}, summary="GraphSAGE, mean aggregation"),
    ModelSpec("gat", GAT, {"hidden": 8, "dropout": 0.6, "lr": 0.005, "weight_decay": 5e-4, "heads": 8,
                           "attn_dropout": 0.6}, decoupled={"attention": True}, attention=True, edge_weights="ignored",
              summary="graph attention"),
    ModelSpec("gatv2", GATv2, {"hidden": 8, "dropout": 0.6, "lr": 0.005, "weight_decay": 5e-4, "heads": 8,
                               "attn_dropout": 0.6}, attention=True,
              summary="graph attention scored after the non-linearity (GATv2)"),
    ModelSpec("gin", GIN, {"hidden": 64, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4},
              summary="graph isomorphism network"),
    # each edge's message is its own (a ReLU per edge): a row's sources are needed in one place
    ModelSpec("gine", GINE, {"hidden": 64, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4}, attention=True,
              summary="GIN with edge features in its messages (GINE; needs a graph with edge features)"),
    ModelSpec("rgcn", RGCN, {"hidden": 16, "dropout": 0.0, "lr": 0.01, "weight_decay": 5e-4, "bases": 0},
              summary="relational graph convolution, one weight per relation (typed graphs)"),
    # MLPerf's R-GAT on IGBH: 4 heads, dropout 0.2 (at a small graph's width)
    ModelSpec("rgat", RGAT, {"hidden": 16, "heads": 4, "dropout": 0.2, "attn_dropout": 0.0, "lr": 0.01,
                             "weight_decay": 5e-4}, attention=True,
              summary="relational graph attention, GAT per relation summed (typed graphs; MLPerf's R-GAT)"),
):
    register(_spec)

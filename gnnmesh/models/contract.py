"""What a strategy needs of a model: the model contract's one table.

Every model is an ``nn.Module`` called as ``model(view, x)`` on the GraphView primitives
(``spmm``, ``sddmm``, ``edge_softmax``, ``destinations``, ``dropout``, ``layer(i)``). A
strategy that runs the model whole, on its own view, needs nothing more (``primitives``).
The others take the model apart, and name what they need (``StrategySpec.needs``):

- ``layer_stack``: a ``LayerStack``, whose layers are called as ``layer(view, h)`` and give
  their output width as ``out_features``, so that a mini-batch runs each layer on its own
  sampled block and routes the first one (a layer that is not a ``GraphLayer`` names the
  operators it aggregates with in ``operators``; by default ``("loop",)``, attention's);
- ``first_maths``: a ``LayerStack`` whose first layer is a ``GraphLayer`` (its maths as terms),
  so that the first layer's sum can be split among ranks (APT's nfp and snp);
- ``stages``: a ``LayerStack`` or a ``Decoupled`` model, run as stages out of core;
- ``maths``: a ``LayerStack`` of ``GraphLayer`` only, whose matrices grid3d lays out in blocks;
- ``propagation``: a ``Decoupled`` model without attention (tensor with a host store).
"""

from __future__ import annotations

from torch import nn

from .base import GraphLayer, LayerStack
from .decoupled import Decoupled

NEEDS = {
    "primitives": "a module called as model(view, x) on the GraphView primitives",
    "layer_stack": "a LayerStack (layers called as layer(view, h), each run on its own sampled block)",
    "first_maths": "a LayerStack whose first layer is a GraphLayer (its maths as Terms, split among ranks)",
    "stages": "a LayerStack or a Decoupled model (run as stages, one chunk at a time)",
    "maths": "a LayerStack of GraphLayers only (each layer's maths as Terms, laid out in blocks)",
    "propagation": "a Decoupled model without attention (its propagation runs on column slices)",
}


def meets(model: nn.Module, need: str) -> bool:
    """Whether ``model`` has what ``need`` (a key of NEEDS) asks for."""
    stack = isinstance(model, LayerStack) and all(hasattr(layer, "out_features") for layer in model.layers)
    if need == "primitives":
        return True
    if need == "layer_stack":
        return stack
    if need == "first_maths":
        return stack and len(model.layers) > 0 and isinstance(model.layers[0], GraphLayer)
    if need == "stages":
        return stack or isinstance(model, Decoupled)
    if need == "maths":
        return stack and all(isinstance(layer, GraphLayer) for layer in model.layers)
    if need == "propagation":
        return isinstance(model, Decoupled) and not model.attention
    raise ValueError(f"unknown model need {need!r}; choose from {', '.join(NEEDS)}")


def what(model: nn.Module) -> str:
    """How a refusal names ``model``'s shape."""
    name = type(model).__name__
    if isinstance(model, LayerStack):
        kinds = sorted({type(layer).__name__ for layer in model.layers})
        return f"{name}, a LayerStack of {', '.join(kinds)}"
    if isinstance(model, Decoupled):
        return f"{name}, a Decoupled model{' with attention' if model.attention else ''}"
    return f"{name}, a plain nn.Module"

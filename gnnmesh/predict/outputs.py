"""What a prediction writes of a model, for one rank's rows: logits, class probabilities,
predicted labels, or node embeddings: what the model's own ``embed(view, x)`` returns, or
else one layer's output of a layer stack.

Inference is full-graph and exact: the model in eval mode (no dropout) through the
strategy's own forward pass, so every strategy and rank count gives the single process's
numbers. A layer's output comes from the model cut after that layer (``through_layer``),
which shares the model's parameters and runs under every strategy as the whole model does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from ..errors import ConfigError
from ..models import Decoupled
from ..models.base import LayerStack
from ..ops.precision import widened
from ..tasks import Classification, Task

OUTPUTS = ("logits", "probs", "labels", "embeddings")


@dataclass(frozen=True)
class Output:
    """``what`` (one of OUTPUTS); ``layer``: for embeddings, the layer whose output is
    written, 1 to the model's layer count (None: its last hidden layer)."""

    what: str = "logits"
    layer: Optional[int] = None

    def __post_init__(self):
        if self.what not in OUTPUTS:
            raise ConfigError(f"output {self.what!r}: choose from {', '.join(OUTPUTS)}")
        if self.layer is not None and self.what != "embeddings":
            raise ConfigError("--layer applies to --output embeddings only")

    def layer_of(self, model: nn.Module) -> Optional[int]:
        """The 1-based layer this output reads from ``model`` (its last for logits); None for
        the embeddings its own ``embed(view, x)`` gives. A model that does not say what its
        embeddings are (no ``embed``, no hidden layer of a stack) is refused: its logits are
        not embeddings."""
        count = layer_count(model)
        if self.what != "embeddings":
            return count
        name = type(model).__name__
        if self.layer is None and has_embed(model):
            return None
        if self.layer is None and count < 2:
            shape = "a plain nn.Module" if not isinstance(model, (LayerStack, Decoupled)) else "a stack of one layer"
            raise ConfigError(f"--output embeddings: the model {name} ({shape}) does not say what its embeddings "
                              "are; give it a method embed(view, x) that returns them, or build it as a LayerStack "
                              "with a hidden layer (--layer N names one)")
        if self.layer is not None and not isinstance(model, (LayerStack, Decoupled)):
            own = "what its embed(view, x) returns (leave --layer out)" if has_embed(model) else "not defined"
            raise ConfigError(f"--layer {self.layer}: the model {name} is not a LayerStack; its embeddings are {own}")
        layer = max(1, count - 1) if self.layer is None else self.layer
        if not 1 <= layer <= count:
            raise ConfigError(f"--layer {layer}: the model has {count} layer{'s' if count > 1 else ''} "
                              f"(1 to {count})")
        return layer


def layer_count(model: nn.Module) -> int:
    """Layers whose outputs a prediction can write: a layer stack's graph layers, a
    decoupled model's MLP layers (its last one's output propagated)."""
    if isinstance(model, Decoupled):
        return len(model.mlp)
    if isinstance(model, LayerStack):
        return len(model.layers)
    return 1  # a model of another shape: its output only


def has_embed(model: nn.Module) -> bool:
    """Whether ``model`` says what its embeddings are with a method ``embed(view, x)``."""
    return callable(getattr(model, "embed", None))


class _Embedded(nn.Module):
    """A model's own embeddings (its ``embed(view, x)``) run as a model, its parameters shared."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, view, x):
        return self.model.embed(view, x)


def through_layer(model: nn.Module, layer: Optional[int]) -> nn.Module:
    """``model`` cut after ``layer`` (1-based; None: what its ``embed`` gives), sharing its
    parameters: the cut model's output is that layer's output, before the activation the next
    layer would apply. A decoupled model's hidden layers are its MLP's (row-wise: no
    propagation)."""
    if layer is None:
        return _Embedded(model).train(model.training)
    if layer == layer_count(model):
        return model
    cut = copy.copy(model)
    cut._modules = dict(model._modules)  # the copy's own module table, the same modules in it
    if isinstance(model, Decoupled):
        cut.mlp = nn.ModuleList(list(model.mlp)[:layer])
        cut.k, cut.attention, cut.op = 0, False, "gcn"  # k = 0: the MLP's output, unpropagated
    else:
        cut.layers = nn.ModuleList(list(model.layers)[:layer])
    return cut


@torch.no_grad()
def rank_output(strategy, model: nn.Module, rank_data, output: Output, task: Optional[Task] = None) -> torch.Tensor:
    """``output`` for this rank's rows (``rank_data.row_ids()``), the model in eval mode: ``probs``
    and ``labels`` as the ``task`` makes them of the logits (default: classification's softmax
    and argmax; multilabel: sigmoid and logit > 0; refused for regression)."""
    task = task or Classification()
    task.check_output(output.what)
    training = model.training
    model.eval()
    run = through_layer(model, output.layer_of(model))  # a copy: made in eval mode
    try:
        if run is not model:
            strategy.prepare(run)  # what a strategy plans of the model (out-of-core stages)
        values = widened(strategy.forward(run, rank_data.view, rank_data.x))  # float32 under --precision bf16-mixed
    finally:
        if run is not model:
            strategy.prepare(model)
        model.train(training)
    if output.what == "probs":
        return task.probabilities(values)
    if output.what == "labels":
        return task.labels(values)
    return values

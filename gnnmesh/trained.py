"""A trained model from its checkpoint (``gnnmesh.load``), and what ``predict``, ``export``
and a resumed run read of a checkpoint besides its weights.

A checkpoint keeps the model's full parameters and the optimizer's state in one layout
whatever strategy trained it (every strategy keeps whole parameters on every rank), so it
resumes or predicts under any strategy and rank count. What ties it to a graph is its input
width and number of classes, recorded since checkpoints record them and read from the
weights' shapes in older ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from . import checkpoint
from .config import FIELDS, Config
from .errors import ConfigError
from .settings import ModelSection, flag_name

WEIGHTS = ("best", "last")  # the best-validation model (what training reports), or the last epoch's
# The settings a model is built from: its own section.
MODEL_SETTINGS = tuple(flag_name(f) for f in ModelSection.__dataclass_fields__.values())


@dataclass(frozen=True)
class Widths:
    """The graph a model was trained for, as far as its weights go."""

    features: int
    classes: int

    def check(self, features: int, classes, where: str) -> None:
        """ConfigError naming ``where`` unless a graph of ``features`` input columns and
        ``classes`` classes (None: unlabelled) fits."""
        if features != self.features:
            raise ConfigError(f"{where}: the model takes {self.features} input features, the graph has "
                              f"{features}")
        if classes is not None and classes != self.classes:
            raise ConfigError(f"{where}: the model predicts {self.classes} classes, the graph has labels "
                              f"of {classes}")


def widths_of(state: dict) -> Widths:
    """The input width and number of classes of the model a checkpoint holds."""
    if isinstance(state.get("widths"), dict):
        return Widths(int(state["widths"]["features"]), int(state["widths"]["classes"]))
    # An older checkpoint: every built-in model's first matrix is its first layer's [out, in]
    # weight and its last bias is the output layer's, one entry per class.
    weights = state["model"]
    first = next((t for t in weights.values() if t.dim() == 2), None)
    last = [t for name, t in weights.items() if name.endswith("bias") and t.dim() == 1]
    if first is None or not last:
        raise ConfigError("the checkpoint records no input width or number of classes")
    return Widths(int(first.shape[1]), int(last[-1].shape[0]))


def config_of(state: dict) -> Config:
    """The config a checkpoint was written with (a setting it does not know keeps its default)."""
    saved = {k: v for k, v in state["config"].items() if k in FIELDS}
    try:
        return Config.of(**saved)
    except ConfigError:  # settings a newer version refuses together: the model's still hold
        return Config.of(**{k: v for k, v in saved.items() if k in MODEL_SETTINGS})


def model_settings(config: Config) -> dict:
    """The settings of ``config`` that build its model, by flat name."""
    return {name: config.get(name) for name in MODEL_SETTINGS}


def model_options(config: Config) -> dict:
    """The constructor options of the model ``config.model.name`` describes (a resolved config)."""
    options = {"hidden": config.model.hidden, "layers": config.model.layers, "dropout": config.model.dropout}
    if config.model.name == "gat":
        options.update(heads=config.model.heads, attn_dropout=config.model.attn_dropout)
    if config.model.decoupled:
        options.update(k=config.model.k, alpha=config.model.alpha)
    return options


def build(config: Config, widths: Widths) -> torch.nn.Module:
    """The untrained model of a resolved ``config`` for a graph of ``widths``: a built-in one,
    or the user's class (``--model FILE.py:CLASS``) with its ``--model-args``."""
    if config.model.user:
        from .models import user
        return user.build(config.model.name, widths.features, widths.classes, user.parse_args(config.model.args or ""))
    from .models import build_model
    return build_model(config.model.name, widths.features, widths.classes, decoupled=config.model.decoupled,
                       **model_options(config))


def weights_of(state: dict, weights: str = "best") -> tuple:
    """(the model weights ``weights`` names, the epoch they are from): the best-validation
    model falls back to the last one where none was selected (no evaluation ran)."""
    if weights not in WEIGHTS:
        raise ConfigError(f"weights {weights!r}: choose from {', '.join(WEIGHTS)}")
    best = state["best"]
    if weights == "best" and best.get("state") is not None:
        return best["state"], int(best["epoch"])
    return state["model"], int(state["epoch"])


def load_state(model: torch.nn.Module, weights: dict, where: str) -> None:
    """``weights`` into ``model``; weights of another model are a ConfigError naming ``where``."""
    try:
        model.load_state_dict(weights)
    except (RuntimeError, TypeError, ValueError, KeyError) as err:
        detail = " ".join(str(err).split())
        raise ConfigError(f"{where}: not a checkpoint of this model ({type(err).__name__}: {detail[:200]})") from None


def load(path, weights: str = "best") -> tuple:
    """``(model, config)`` of the checkpoint at ``path``: the model built and loaded with its
    ``weights`` (``best``: the best-validation epoch's, what training reports; ``last``: the
    last epoch's), in eval mode on the CPU, and the resolved config it was trained with.
    Run it as ``model(gnnmesh.view.GraphView(graph.adj), x)`` on any graph of its input width.
    A damaged or foreign file is a ConfigError naming it; nothing in it is run."""
    state = checkpoint.load(path)
    where = str(Path(path))
    chosen = weights_of(state, weights)[0]
    try:
        config = config_of(state).updated(device="cpu").resolved()
        widths = widths_of(state)
        _check_shapes(lambda: build(config, widths), chosen)
        model = build(config, widths)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    load_state(model, chosen, where)
    return model.eval(), config


def _check_shapes(construct, weights: dict) -> None:
    """ConfigError unless the model ``construct()`` makes, built on the meta device (no memory),
    has the shapes of ``weights``: widths or settings that disagree with the weights (a damaged
    checkpoint's 2^40 features) are refused before they allocate. A user's class that cannot
    be built on the meta device is left to ``load_state``."""
    try:
        with torch.device("meta"):
            shapes = {name: tuple(t.shape) for name, t in construct().state_dict().items()}
    except Exception:  # noqa: BLE001 - a user's class: checked by load_state once built
        return
    given = {name: tuple(t.shape) for name, t in weights.items() if isinstance(t, torch.Tensor)}
    if shapes != given:
        name = next(iter(sorted(set(shapes) ^ set(given))), None) or \
            next(k for k in sorted(shapes) if shapes[k] != given[k])
        raise ConfigError(f"not a checkpoint of this model (its widths and settings describe {name!r} as "
                          f"{shapes.get(name, 'absent')}, its weights hold {given.get(name, 'none')})")

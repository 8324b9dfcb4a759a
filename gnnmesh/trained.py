"""A trained model from its checkpoint (``gnnmesh.load``), and what ``predict``, ``export``
and a resumed run read of a checkpoint besides its weights.

A checkpoint keeps the model's full parameters and the optimizer's state in one layout
whatever strategy trained it (every strategy keeps whole parameters on every rank), so it
resumes or predicts under any strategy and rank count. What ties it to a graph is its input
width and number of classes. The checkpoint's format, and what is read of it, is
``gnnmesh.checkpoint``'s.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from . import checkpoint
from .config import FIELDS, Config
from .errors import ConfigError
from .models import options_of, user, user_file
from .settings import ModelSection, flag_name, options_not_taken

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
    return Widths(*checkpoint.widths(state))


def config_of(state: dict, model=None, path=None) -> Config:
    """The config a checkpoint was written with (a setting it does not know keeps its default).
    A checkpoint of a user's model records its class's name and its file's sha256 and path,
    never its code: its model is ``model`` (``--model``: FILE.py:CLASS or module:CLASS, or the
    class itself) checked against that record, else the file found for it from ``path``, the
    checkpoint's own (``gnnmesh.models.user_file.resolve``), and the config then names it. A
    checkpoint of a built-in model takes no ``model``."""
    config = _saved_config(state)
    if not config.model.user:
        if model is not None:
            raise ConfigError(f"it holds the built-in model {config.model.name}; --model is for a checkpoint of "
                              f"your own model")
        return config
    model = user_file.resolve(path, state, model)
    return config.updated(model=model if isinstance(model, str) else user.name_of_class(model))


def _saved_config(state: dict) -> Config:
    saved = saved_settings(checkpoint.settings(state))
    try:
        return Config.of(**saved)
    except ConfigError:  # settings a newer version refuses together: the model's still hold
        return Config.of(**{k: v for k, v in saved.items() if k in MODEL_SETTINGS})


def saved_settings(recorded: dict) -> dict:
    """The settings a checkpoint records, those this version knows, without the model options
    its model does not take: older checkpoints record every option, at its default."""
    saved = {k: v for k, v in recorded.items() if k in FIELDS}
    name, decoupled = saved.get("model", ModelSection.name), saved.get("decoupled", False)
    if isinstance(name, str) and isinstance(decoupled, bool):
        saved.update(dict.fromkeys((k for k in options_not_taken(name, decoupled) if k in saved), None))
    return saved


def model_settings(config: Config) -> dict:
    """The settings of ``config`` that build its model, by flat name."""
    return {name: config.get(name) for name in MODEL_SETTINGS}


def model_options(config: Config) -> dict:
    """The constructor options of the model ``config.model.name`` describes (a resolved config)."""
    return {name: config.get(name) for name in options_of(config.model.name, config.model.decoupled)
            if name in MODEL_SETTINGS}


def build(config: Config, widths: Widths, cls: Optional[type] = None) -> torch.nn.Module:
    """The untrained model of a resolved ``config`` for a graph of ``widths``: a built-in one,
    or the user's class (``--model FILE.py:CLASS``; ``cls``: that class, already imported) with
    its ``--model-args``."""
    if config.model.user:
        return user.build(config.model.name, widths.features, widths.classes, user.parse_args(config.model.args or ""),
                          cls)
    from .models import build_model
    return build_model(config.model.name, widths.features, widths.classes, decoupled=config.model.decoupled,
                       **model_options(config))


def load_state(model: torch.nn.Module, weights: dict, where: str) -> None:
    """``weights`` into ``model``; weights of another model are a ConfigError naming ``where``."""
    try:
        model.load_state_dict(weights)
    except (RuntimeError, TypeError, ValueError, KeyError) as err:
        detail = " ".join(str(err).split())
        raise ConfigError(f"{where}: not a checkpoint of this model ({type(err).__name__}: {detail[:200]})") from None


def load(path, weights: str = "best", model=None) -> tuple:
    """``(model, config)`` of the checkpoint at ``path``: the model built and loaded with its
    ``weights`` (``best``: the best-validation epoch's, what training reports; ``last``: the
    last epoch's), in eval mode on the CPU, and the resolved config it was trained with.
    Run it as ``model(gnnmesh.view.GraphView(graph.adj), x)`` on any graph of its input width.
    A damaged or foreign file is a ConfigError naming it; nothing in it is run. A checkpoint
    of your own model takes ``model``, its class or its name as ``--model`` gives it, else the
    file it was trained from found for it (``config_of``): never a file of other content."""
    state = checkpoint.load(path)
    where = str(Path(path))
    chosen = checkpoint.weights(state, weights)[0]
    try:
        config = config_of(state, model, path).updated(device="cpu").resolved()
        widths, cls = widths_of(state), (model if isinstance(model, type) else None)
        _check_shapes(lambda: build(config, widths, cls), chosen)
        built = build(config, widths, cls)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    load_state(built, chosen, where)
    return built.eval(), config


def first_shape_difference(described: dict, given: dict) -> Optional[str]:
    """The first parameter name, in sorted order, on which two maps of name -> shape disagree
    (held by one only, or of another shape); None when they agree."""
    if described == given:
        return None
    return next(iter(sorted(set(described) ^ set(given))), None) or \
        next(k for k in sorted(described) if described[k] != given[k])


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
    name = first_shape_difference(shapes, given)
    if name is not None:
        raise ConfigError(f"not a checkpoint of this model (its widths and settings describe {name!r} as "
                          f"{shapes.get(name, 'absent')}, its weights hold {given.get(name, 'none')})")


def __getattr__(name: str):
    """Former names, now the checkpoint format's (``gnnmesh.checkpoint``), with a DeprecationWarning."""
    former = {"WEIGHTS": "WEIGHTS", "weights_of": "weights"}
    if name not in former:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"gnnmesh.trained.{name} is now gnnmesh.checkpoint.{former[name]}", DeprecationWarning, stacklevel=2)
    return getattr(checkpoint, former[name])

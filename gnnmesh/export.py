"""A trained model as PyTorch Geometric layers: ``export_pyg`` writes a checkpoint's model as a
directory of plain files, ``load_pyg`` builds it back from PyG's own layers.

The directory holds ``model.json``, the model described as plain JSON (each layer's PyG type
and constructor arguments, the activation between layers; for a decoupled model its MLP and
its APPNP propagation with the normalisation of its operator), and ``weights.pt``, a plain
dict of tensors written by ``torch.save`` and read with ``torch.load(weights_only=True)``:
nothing in either is code, and rebuilding the model needs only torch, PyG and the JSON.
A model of your own (``--model FILE.py:CLASS``) has no PyG layers: its export also holds its
source file and a stand-alone view of gnnmesh's primitives on an ``edge_index``
(``gnnmesh.export_user``), and loading it runs that source.

The PyG module is called as ``model(x, edge_index, edge_weight=None)`` in PyG's convention,
``edge_index[0]`` the sources and ``edge_index[1]`` the targets: a gnnmesh ``Graph``'s
adjacency row ``i`` holds node ``i``'s in-edges, so its edge ``j -> i`` is the column
``(j, i)`` (``pyg_inputs`` gives the inputs of a ``Graph``). In eval mode it returns
gnnmesh's output on the same graph to within float rounding (about 1e-6).

A link model (``--task link``) is exported with its trained decoder: ``decoder.pt`` beside
the weights, described in model.json's ``decoder``; ``load_pyg`` then returns a ``LinkModel``,
``encode(x, edge_index)`` the embeddings and ``decode(z, edge_label_index)`` the pairs' scores,
as PyG's link-prediction examples name them.

R-GCN (a typed graph's model) is exported as PyG's ``RGCNConv(aggr="mean")`` layers, its
relations in model.json's ``relations`` (edge type ``k`` is the ``k``-th): call it as
``model(x, edge_index, edge_type=edge_type)`` with the union graph's inputs, which
``typed_inputs`` gives of a gnnmesh typed graph or of PyG's ``HeteroData``.

Edge weights: GCN and the decoupled GCN and GraphSAGE use them as gnnmesh does; GAT and the
decoupled GAT ignore them, as gnnmesh does (attention replaces them); GraphSAGE and GIN use
them in gnnmesh (a weighted mean, a weighted sum) but PyG's ``SAGEConv`` and ``GINConv`` take
none, so their modules refuse ``edge_weight`` rather than return other numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import checkpoint as checkpoints
from .atomic import OutputKind, check_replaceable, checksum, staged_directory
from .errors import ConfigError
from .models.user import is_user_model
from .structured import loads_json
from .validate import Range

FORMAT = "gnnmesh-pyg"
VERSION = 1
MODEL_FILE = "model.json"
WEIGHTS_FILE = "weights.pt"
DECODER_FILE = "decoder.pt"  # a link model's decoder, beside the encoder's weights
TARGETS = ("pyg",)  # what ``gnnmesh export --to`` writes

# What each layer type's constructor may be given from model.json (anything else is refused).
_LAYER_ARGS = {
    "GCNConv": {"in_channels", "out_channels", "improved", "add_self_loops", "normalize", "bias"},
    "SAGEConv": {"in_channels", "out_channels", "aggr", "normalize", "root_weight", "project", "bias"},
    "GATConv": {"in_channels", "out_channels", "heads", "concat", "negative_slope", "dropout",
                "add_self_loops", "bias"},
    "GINConv": {"eps", "train_eps"},
    "RGCNConv": {"in_channels", "out_channels", "num_relations", "num_bases", "aggr", "root_weight", "bias"},
}
_MLP_PIECES = {"Linear": {"in_features", "out_features", "bias"}, "ReLU": set()}
# What each argument an export writes may be: checked before any layer is built, so that a
# damaged model.json is one line rather than an error (or an allocation) inside torch.
_COUNTS = {"in_channels", "out_channels", "in_features", "out_features", "heads", "channels", "num_relations",
           "num_bases"}
_STEPS = {"K"}                      # propagation steps: 0 is none
_FRACTIONS = {"dropout", "alpha"}
_NUMBERS = {"negative_slope", "eps"}
_CHOICES = {"aggr": ("mean",)}
_ACTIVATIONS = {"relu": torch.relu, "elu": F.elu}
_NORMALISATIONS = ("gcn", "mean", "attention")


# -- writing ----------------------------------------------------------------------------------

def export_pyg(checkpoint, out_dir, weights: str = "best", model=None) -> dict:
    """Write the model of the gnnmesh ``checkpoint`` into ``out_dir`` as ``model.json`` and
    ``weights.pt`` (``weights``: ``best``, the best-validation epoch's, or ``last``). A
    checkpoint of your own model also gets its source file and a stand-alone view
    (``gnnmesh.export_user``): ``model`` is its ``FILE.py:CLASS`` (default: the file the
    checkpoint records, found as ``gnnmesh.models.user_file.resolve`` finds it), which must be
    the file it was trained from. The directory is written whole or
    not at all; an existing one is replaced only if it holds an earlier export and nothing else
    (or nothing). Returns the description written to ``model.json``. A damaged, foreign or
    hostile checkpoint, or a model with no PyG form, is a ConfigError."""
    from . import export_user
    out = Path(out_dir)
    if not Path(checkpoint).is_file():
        raise ConfigError(f"{Path(checkpoint)}: no such checkpoint")
    check_replaceable(out, OUTPUT)  # before the checkpoint is read, and again when replacing
    spec, tensors, own, decoder = _description(checkpoint, weights, model)
    spec["trained"] = {"checkpoint": Path(checkpoint).name, "weights": weights}
    with staged_directory(out, OUTPUT) as tmp:
        torch.save(tensors, tmp / WEIGHTS_FILE)
        spec["weights_checksum"] = checksum(tmp / WEIGHTS_FILE)  # a damaged weights.pt is refused, not read
        if decoder is not None:
            section, decoder_weights = decoder
            torch.save(decoder_weights, tmp / DECODER_FILE)
            spec["decoder"] = {**section, "checksum": checksum(tmp / DECODER_FILE)}
        if own:
            export_user.write(spec, own, tmp)
        (tmp / MODEL_FILE).write_text(json.dumps(spec, indent=2) + "\n")
    return spec


def _description(checkpoint, weights: str, model) -> tuple:
    """``(spec, weights, own, decoder)``: model.json's description of the checkpoint's model,
    its tensors, the ``FILE.py:CLASS`` of a model of your own (None for a built-in one, which
    takes no ``model``) and a link model's decoder (``describe_decoder``; None for others)."""
    from . import export_user
    from .trained import load
    state = checkpoints.load(checkpoint)
    if checkpoints.embeddings(state) is not None:  # the exported model alone would read zeros in their place
        raise ConfigError(f"{checkpoint}: the model learned input embeddings (--embed-dim), which PyG export "
                          "does not carry yet; use gnnmesh predict")
    name = checkpoints.settings(state).get("model")
    if not (isinstance(name, str) and is_user_model(name)):
        built, config = load(checkpoint, weights, model=model)  # read weights-only; ConfigError naming the file
        return (*describe(built, config.model.name), None, describe_decoder(state, config, weights, checkpoint))
    own = export_user.model_name(checkpoint, state, model)
    built, config = load(checkpoint, weights, model=own)
    header = _header("user", False, *checkpoints.widths(state))
    return (export_user.describe(own, config.model.args, header), _plain(built.state_dict()), own,
            describe_decoder(state, config, weights, checkpoint))


def describe_decoder(state: dict, config, weights: str, where) -> Optional[tuple]:
    """``(section, weights)`` of the decoder of a link checkpoint ``state`` (trained under the
    resolved ``config``): model.json's ``decoder`` (its ``type``, the embeddings' ``width``, and
    ``shift``, whether the MLP's last layer has a bias) and its state dict, of the ``weights``
    the encoder is exported with (the best epoch's where one was chosen). None for a model of
    another task."""
    from . import tasks
    from .link import decoders
    task = config.training.task
    if task is None or not tasks.spec(task).links:
        return None
    saved = checkpoints.decoder(state)
    if saved is None:
        raise ConfigError(f"{Path(where)}: it holds no link decoder (it is not a --task link run's)")
    if config.link.link_relation:  # the export's decode(z, edge_label_index) takes no relation per pair
        raise ConfigError(f"{Path(where)}: a link model of a typed graph's relations ({config.link.link_relation}) "
                          "is not exported: its pairs' scores need their relation; use gnnmesh predict --pairs "
                          "with --link-relation")
    values = saved["best"] if weights == "best" and saved["best"] is not None else saved["last"]
    width = int(checkpoints.widths(state)[1])
    section = {"type": config.link.decoder, "width": width, "shift": "out.bias" in values, "file": DECODER_FILE}
    try:
        decoders.build(section["type"], width, section["shift"]).load_state_dict(values)
    except (RuntimeError, TypeError, ValueError, KeyError) as err:
        raise ConfigError(f"{Path(where)}: its decoder is not a {section['type']} decoder of width {width} "
                          f"({type(err).__name__}: {' '.join(str(err).split())[:160]})") from None
    return section, _plain(values)


def describe(model: nn.Module, name: str = "") -> tuple:
    """``(spec, weights)``: the PyG description of a gnnmesh ``model`` (what model.json holds)
    and the state dict of the module ``load_pyg`` builds from it. A model without a PyG form
    is a ConfigError."""
    from .models import GAT, GCN, GIN, SAGE, Decoupled
    from .models import spec as model_spec
    from .models.rgcn import RGCN
    if type(model) is Decoupled:
        return _decoupled(model, name)
    if any(getattr(m, "edge_dim", 0) for m in model.modules()):
        raise ConfigError(f"model {type(model).__name__} reads edge features, which the PyG export does not "
                          "carry yet")
    kinds = {GCN: ("gcn", _gcn), SAGE: ("sage", _sage), GAT: ("gat", _gat), GIN: ("gin", _gin),
             RGCN: ("rgcn", _rgcn)}
    if type(model) not in kinds:
        raise ConfigError(f"model {type(model).__name__} has no PyG export (gcn, sage, gat, gin, rgcn and the "
                          "decoupled gcn, sage and gat have)")
    label, layer_of = kinds[type(model)]
    layers, weights = [], {}
    for i, layer in enumerate(model.layers):
        entry, tensors = layer_of(layer)
        layers.append(entry)
        weights.update({f"convs.{i}.{k}": v for k, v in tensors.items()})
    activation = {torch.relu: "relu", F.elu: "elu"}.get(model.activation)
    if activation is None:
        raise ConfigError(f"model {label}: its activation has no PyG export")
    spec = _header(label, False, _in_channels(layers[0]), _out_channels(layers[-1]))
    spec.update(layers=layers, activation=activation, dropout=float(model.dropout),
                edge_weight=model_spec(label).edge_weights)
    if type(model) is RGCN:  # edge type k is relation k; the union of a typed graph is unweighted
        spec.update(relations=list(model.layers[0].relations), edge_weight="refused")
    return spec, _plain(weights)


def _header(model: str, decoupled: bool, in_channels: int, out_channels: int) -> dict:
    return {"format": FORMAT, "version": VERSION, "model": model, "decoupled": decoupled,
            "in_channels": int(in_channels), "out_channels": int(out_channels), "weights": WEIGHTS_FILE}


def _in_channels(entry: dict) -> int:
    return entry["nn"][0][1]["in_features"] if entry["type"] == "GINConv" else entry["args"]["in_channels"]


def _out_channels(entry: dict) -> int:
    if entry["type"] == "GINConv":
        return entry["nn"][-1][1]["out_features"]
    args = entry["args"]
    return args["out_channels"] * (args["heads"] if args.get("concat") else 1)


def _gcn(layer) -> tuple:
    out, inp = layer.lin.weight.shape
    return ({"type": "GCNConv", "args": {"in_channels": inp, "out_channels": out, "improved": False,
                                         "add_self_loops": True, "normalize": True, "bias": True}},
            {"lin.weight": layer.lin.weight, "bias": layer.bias})


def _sage(layer) -> tuple:
    # PyG: lin_l (with the bias) maps the neighbours' mean, lin_r the node itself.
    out, inp = layer.lin_self.weight.shape
    return ({"type": "SAGEConv", "args": {"in_channels": inp, "out_channels": out, "aggr": "mean",
                                          "normalize": False, "root_weight": True, "project": False,
                                          "bias": True}},
            {"lin_l.weight": layer.lin_neigh.weight, "lin_l.bias": layer.lin_self.bias,
             "lin_r.weight": layer.lin_self.weight})


def _gat(layer) -> tuple:
    return ({"type": "GATConv", "args": {"in_channels": layer.lin.weight.shape[1], "out_channels": layer.out_dim,
                                         "heads": layer.heads, "concat": bool(layer.concat),
                                         "negative_slope": float(layer.negative_slope),
                                         "dropout": float(layer.attn_dropout), "add_self_loops": True,
                                         "bias": True}},
            {"lin.weight": layer.lin.weight, "att_src": layer.att_src.unsqueeze(0),
             "att_dst": layer.att_dst.unsqueeze(0), "bias": layer.bias})


def _gin(layer) -> tuple:
    first, second = layer.mlp[0], layer.mlp[2]
    return ({"type": "GINConv", "args": {"eps": 0.0, "train_eps": True},
             "nn": [["Linear", {"in_features": first.in_features, "out_features": first.out_features, "bias": True}],
                    ["ReLU", {}],
                    ["Linear", {"in_features": second.in_features, "out_features": second.out_features,
                                "bias": True}]]},
            {"eps": layer.eps, "nn.0.weight": first.weight, "nn.0.bias": first.bias,
             "nn.2.weight": second.weight, "nn.2.bias": second.bias})


def _rgcn(layer) -> tuple:
    # PyG: out = x @ root + mean_r(x) @ weight[r] + bias, its matrices [in, out]; with bases,
    # weight[r] = sum_b comp[r, b] basis[b]. gnnmesh keeps them [out, in] (nn.Linear's).
    out, inp = layer.root.weight.shape
    args = {"in_channels": inp, "out_channels": out, "num_relations": len(layer.relations), "aggr": "mean",
            "root_weight": True, "bias": True}
    tensors = {"root": layer.root.weight.t(), "bias": layer.root.bias}
    if layer.bases:
        args["num_bases"] = int(layer.bases)
        tensors.update(weight=layer.basis.transpose(1, 2), comp=layer.mix)
    else:
        tensors["weight"] = layer.weight.transpose(1, 2)
    return {"type": "RGCNConv", "args": args}, tensors


def _decoupled(model, name: str) -> tuple:
    if model.op not in ("gcn", "mean", "loop"):
        raise ConfigError(f"decoupled model with operator {model.op!r} has no PyG export (gcn, mean and "
                          "attention have)")
    normalisation = "attention" if model.attention else model.op
    mlp = [["Linear", {"in_features": lin.in_features, "out_features": lin.out_features, "bias": True}]
           for lin in model.mlp]
    weights = {f"mlp.{i}.{k}": v for i, lin in enumerate(model.mlp) for k, v in lin.state_dict().items()}
    gcn = normalisation == "gcn"  # PyG's APPNP normalises as GCN; the others get their weights given
    spec = _header(name or {"gcn": "gcn", "mean": "sage", "attention": "gat"}[normalisation], True,
                   model.mlp[0].in_features, model.mlp[-1].out_features)
    spec.update(mlp=mlp, activation="relu", dropout=float(model.dropout),
                propagation={"type": "APPNP", "args": {"K": int(model.k), "alpha": float(model.alpha),
                                                       "add_self_loops": gcn, "normalize": gcn},
                             "normalization": normalisation},
                edge_weight="ignored" if model.attention else "used")
    if model.attention:
        heads, channels = model.att_src.shape
        spec["attention"] = {"heads": int(heads), "channels": int(channels),
                             "negative_slope": float(model.negative_slope), "dropout": float(model.attn_dropout)}
        weights.update({"attention.att_src": model.att_src, "attention.att_dst": model.att_dst})
    return spec, _plain(weights)


def _plain(weights: dict) -> dict:
    """Detached, contiguous CPU copies: a plain dict of tensors."""
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in weights.items()}


# -- reading ----------------------------------------------------------------------------------

def load_pyg(out_dir) -> nn.Module:
    """The model an export in ``out_dir`` holds, built from PyG's own layers (``GCNConv``,
    ``SAGEConv``, ``GATConv``, ``GINConv``; an MLP and ``APPNP`` for a decoupled model) as its
    ``model.json`` describes, loaded weights-only, in eval mode. Call it as
    ``model(x, edge_index, edge_weight=None)``. A link model's export gives a ``LinkModel``,
    which also scores pairs (``decode``). A missing or damaged export is a ConfigError."""
    out = Path(out_dir)
    spec = read_spec(out)
    if "user_model" in spec:
        from . import export_user
        _check_weights_file(out / WEIGHTS_FILE, spec.get("weights_checksum"))
        return _with_decoder(export_user.load(out, spec), out, spec)
    try:
        with torch.device("meta"):  # shapes alone: sizes from model.json allocate nothing until checked
            model = PyGModel(spec)
    except ConfigError as err:
        raise ConfigError(f"{out}: {err}") from None
    _load_weights(model, out / WEIGHTS_FILE, spec.get("weights_checksum"))
    return _with_decoder(model.eval(), out, spec)


def _load_weights(module: nn.Module, path: Path, recorded) -> None:
    """The tensors of ``path`` (its checksum ``recorded`` in model.json) into ``module``, built
    on the meta device: its shapes are compared with the file's before any tensor is made."""
    _check_weights_file(path, recorded)
    try:
        weights = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; not a complete PyG export") from None
    except Exception as err:  # torch raises several types for a damaged file
        raise ConfigError(f"{path}: unreadable weights ({type(err).__name__}: "
                          f"{' '.join(str(err).split())[:200]})") from None
    if not (isinstance(weights, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in weights.items())):
        raise ConfigError(f"{path}: not a dict of tensors")
    from .trained import first_shape_difference
    shapes = {name: tuple(v.shape) for name, v in module.state_dict().items()}
    given = {name: tuple(v.shape) for name, v in weights.items()}
    wrong = first_shape_difference(shapes, given)
    if wrong is not None:
        raise ConfigError(f"{path}: does not fit {path.parent / MODEL_FILE} (first difference: {wrong!r}, "
                          f"{given.get(wrong, 'missing')} in the weights, {shapes.get(wrong, 'none')} "
                          f"described)")
    module.to_empty(device="cpu")  # now as large as the weights read, no larger
    module.load_state_dict(weights)


def _with_decoder(encoder: nn.Module, out: Path, spec: dict) -> nn.Module:
    """``encoder`` itself, or for a link model's export a ``LinkModel`` of it and its decoder."""
    section = spec.get("decoder")
    if section is None:
        return encoder
    from .link import decoders
    where = f"{out / MODEL_FILE}: field 'decoder'"
    if not isinstance(section, dict) or section.get("type") not in decoders.names():
        raise ConfigError(f"{where} is not one an export writes (a type among {', '.join(decoders.names())})")
    _check_arg(f"{where}.width", "channels", section.get("width"))
    _check_arg(f"{where}.shift", "shift", section.get("shift"))
    with torch.device("meta"):
        decoder = decoders.build(section["type"], section["width"], section["shift"])
    _load_weights(decoder, out / DECODER_FILE, section.get("checksum"))
    return LinkModel(encoder, decoder.eval()).eval()


class LinkModel(nn.Module):
    """A link model's export: ``encode(x, edge_index, edge_weight=None)`` gives every node's
    embedding (what calling it gives), ``decode(z, edge_label_index)`` the scores of the pairs
    ``edge_label_index`` ``[2, P]`` (sources, destinations) from them, as gnnmesh's
    ``predict --pairs`` scores them (a logit: its sigmoid is the pair's probability under
    the bce loss)."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def encode(self, x: torch.Tensor, edge_index: torch.Tensor, edge_weight=None) -> torch.Tensor:
        return self.encoder(x, edge_index, edge_weight)

    def decode(self, z: torch.Tensor, edge_label_index: torch.Tensor) -> torch.Tensor:
        return self.decoder(z[edge_label_index[0]], z[edge_label_index[1]])

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_weight=None) -> torch.Tensor:
        return self.encode(x, edge_index, edge_weight)


def _check_weights_file(path: Path, recorded) -> None:
    """The weights file is the one written beside model.json, by its checksum (exports written
    before the checksum was recorded have none, and are read as they are)."""
    if recorded is None:
        return
    if not (isinstance(recorded, str) and len(recorded) == 32 and all(c in "0123456789abcdef" for c in recorded)):
        raise ConfigError(f"{path.parent / MODEL_FILE}: field 'weights_checksum' must be 32 hex digits")
    try:
        found = checksum(path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; not a complete PyG export") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read file ({err.strerror or err})") from None
    if found != recorded:
        raise ConfigError(f"{path}: its checksum is not the one {MODEL_FILE} records (damaged, or another "
                          "export's weights)")


def read_spec(out_dir) -> dict:
    """The description in ``out_dir/model.json``, checked to be one ``export_pyg`` writes."""
    path = Path(out_dir) / MODEL_FILE
    try:
        spec = loads_json(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; not a PyG export") from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: unreadable ({type(err).__name__}: {err})") from None
    if not isinstance(spec, dict) or spec.get("format") != FORMAT:
        raise ConfigError(f"{path}: not a gnnmesh PyG export (no \"format\": \"{FORMAT}\")")
    if spec.get("version") != VERSION:
        raise ConfigError(f"{path}: export version {spec.get('version')!r}; this gnnmesh reads version {VERSION}")
    return spec


def written_files(out_dir) -> list:
    """The files the export in ``out_dir`` consists of (a ConfigError when its model.json is not
    an export's)."""
    spec = read_spec(out_dir)
    written = [MODEL_FILE, WEIGHTS_FILE] + ([DECODER_FILE] if "decoder" in spec else [])
    if "user_model" not in spec:
        return written
    from . import export_user
    return written + export_user.files(spec)


OUTPUT = OutputKind("PyG export", MODEL_FILE, written_files)  # what ``export_pyg`` may replace


def _checked(kind, args, allowed: dict, where: str) -> dict:
    if not isinstance(kind, str) or kind not in allowed:
        raise ConfigError(f"{where}: layer type {_show(kind)} is not one an export writes ({', '.join(allowed)})")
    if not isinstance(args, dict) or set(args) - allowed[kind]:
        raise ConfigError(f"{where}: the arguments of {kind} are not ones an export writes")
    for name, value in args.items():
        _check_arg(f"{where}: {kind} argument {name!r}", name, value)
    return args


def _check_arg(where: str, name: str, value) -> None:
    """ConfigError naming ``where`` unless ``value`` is one an export writes for argument ``name``."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if name in _COUNTS or name in _STEPS:
        low = 0 if name in _STEPS else 1
        if not (number and isinstance(value, int) and value >= low):
            raise ConfigError(f"{where} must be an integer >= {low}, got {_show(value)}")
    elif name in _FRACTIONS or name in _NUMBERS:
        problem = (Range(0, 1) if name in _FRACTIONS else Range()).number_problem(value)
        if problem:
            raise ConfigError(f"{where} {problem}")
    elif name in _CHOICES:
        if value not in _CHOICES[name]:
            raise ConfigError(f"{where} must be one of {', '.join(_CHOICES[name])}, got {_show(value)}")
    elif not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false, got {_show(value)}")


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class PyGModel(nn.Module):
    """A gnnmesh model rebuilt from PyG layers, constructed from its ``model.json`` description
    alone: ``convs`` (a layer stack, the activation between layers) or ``mlp`` followed by
    ``propagation`` (APPNP; with ``attention`` for the decoupled GAT). In eval mode its
    output equals gnnmesh's; in train mode it applies dropout where gnnmesh does (not the
    same masks)."""

    def __init__(self, spec: dict):
        super().__init__()
        # PyG is an optional dependency: pip install "gnnmesh[pyg]"
        from torch_geometric import nn as pyg
        where = f"{MODEL_FILE} of a {spec.get('model')!r} export"
        self.decoupled = bool(spec.get("decoupled"))
        try:
            activation = spec["activation"]
            if activation not in _ACTIVATIONS:
                raise ConfigError(f"{where}: activation {activation!r} is not one an export writes")
            self.dropout = spec.get("dropout", 0.0)
            _check_arg(f"{where}: field 'dropout'", "dropout", self.dropout)
            self.activation = activation
            self.weights_use = spec.get("edge_weight", "used")
            if self.decoupled:
                self.mlp = nn.ModuleList(nn.Linear(**_checked(kind, args, {"Linear": _MLP_PIECES["Linear"]}, where))
                                         for kind, args in spec["mlp"])
                prop = spec["propagation"]
                self.normalization = prop["normalization"]
                if self.normalization not in _NORMALISATIONS:
                    raise ConfigError(f"{where}: normalization {self.normalization!r} is not one an export writes")
                self.propagation = pyg.APPNP(**_checked(prop["type"], prop["args"],
                                                        {"APPNP": {"K", "alpha", "add_self_loops", "normalize"}},
                                                        where))
                if self.normalization == "attention":
                    att = spec["attention"]
                    for name in ("heads", "channels", "negative_slope", "dropout"):
                        _check_arg(f"{where}: field 'attention.{name}'", name, att.get(name, 0.0))
                    self.attention = EdgeAttention(att["heads"], att["channels"], att["negative_slope"],
                                                   att.get("dropout", 0.0))
            else:
                self.convs = nn.ModuleList(self._layer(pyg, entry, where) for entry in spec["layers"])
            self.relations = spec.get("relations")
            if self.relations is not None and not (isinstance(self.relations, list) and all(
                    isinstance(name, str) for name in self.relations)):
                raise ConfigError(f"{where}: field 'relations' must be a list of relation names")
        except ConfigError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as err:  # a field of another type or shape
            raise ConfigError(f"{where}: not a description an export writes ({type(err).__name__}: {err})") from None

    @staticmethod
    def _layer(pyg, entry: dict, where: str) -> nn.Module:
        kind = entry["type"]
        args = _checked(kind, entry.get("args", {}), _LAYER_ARGS, where)
        if kind == "GINConv":
            pieces = [getattr(nn, k)(**_checked(k, a, _MLP_PIECES, where)) for k, a in entry["nn"]]
            return pyg.GINConv(nn.Sequential(*pieces), **args)
        return getattr(pyg, kind)(**args)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_weight=None, edge_type=None) -> torch.Tensor:
        """Outputs (logits) of every node; ``edge_index`` ``[2, E]`` (sources, targets);
        ``edge_type`` ``[E]``: an R-GCN's relation of each edge (``typed_inputs``)."""
        if self.relations is not None:
            return self._typed(x, edge_index, edge_weight, edge_type)
        if edge_type is not None:
            raise ValueError("edge_type is for a typed graph's model (rgcn); this export's layers take none")
        if edge_weight is not None and self.weights_use == "refused":
            raise ValueError("PyG's SAGEConv and GINConv take no edge weights (gnnmesh weights the mean "
                             "or sum by them): this export matches gnnmesh on unweighted graphs only")
        if self.weights_use == "ignored":
            edge_weight = None  # attention replaces the weights, in gnnmesh as here
        if self.decoupled:
            return self._decoupled(x, edge_index, edge_weight)
        act = _ACTIVATIONS[self.activation]
        h = x
        for i, conv in enumerate(self.convs):
            if i > 0:
                h = act(h)
            h = F.dropout(h, self.dropout, self.training)
            h = conv(h, edge_index, edge_weight) if edge_weight is not None else conv(h, edge_index)
        return h

    def _typed(self, x, edge_index, edge_weight, edge_type):
        if edge_type is None:
            raise ValueError(f"an R-GCN takes each edge's relation: call it as model(x, edge_index, "
                             f"edge_type=edge_type), edge types 0 to {len(self.relations) - 1} as model.relations "
                             "names them (gnnmesh.export.typed_inputs gives them)")
        if edge_weight is not None:
            raise ValueError("an R-GCN takes no edge weights: gnnmesh averages each relation's in-neighbours")
        act = _ACTIVATIONS[self.activation]
        h = x
        for i, conv in enumerate(self.convs):
            if i > 0:
                h = act(h)
            h = conv(F.dropout(h, self.dropout, self.training), edge_index, edge_type)
        return h

    def _decoupled(self, x, edge_index, edge_weight):
        h = x
        for i, lin in enumerate(self.mlp):
            h = lin(F.dropout(h, self.dropout, self.training))
            if i < len(self.mlp) - 1:
                h = torch.relu(h)
        if self.normalization == "mean":
            edge_weight = mean_weights(edge_index, h.shape[0], edge_weight)
        elif self.normalization == "attention":
            edge_index, edge_weight = self.attention(h, edge_index)
        return self.propagation(h, edge_index, edge_weight)


def mean_weights(edge_index: torch.Tensor, num_nodes: int, edge_weight=None) -> torch.Tensor:
    """Each edge's weight over the sum of its target's in-edge weights (``D^-1 A``, no self
    loops added): propagating with them averages every node's in-neighbours."""
    from torch_geometric.utils import scatter
    weight = torch.ones(edge_index.shape[1], device=edge_index.device) if edge_weight is None else edge_weight
    deg = scatter(weight, edge_index[1], dim=0, dim_size=num_nodes, reduce="sum")
    inv = torch.where(deg > 0, 1.0 / deg, torch.zeros_like(deg))
    return weight * inv[edge_index[1]]


class EdgeAttention(nn.Module):
    """The decoupled GAT's edge weights, from PyG's utilities: GAT attention of ``h`` over each
    node's in-edges plus a self-loop (one per node), softmax per target, averaged over heads.
    Returns ``(edge_index with the loops, weights)``."""

    def __init__(self, heads: int, channels: int, negative_slope: float = 0.2, dropout: float = 0.0):
        super().__init__()
        self.negative_slope, self.dropout = negative_slope, dropout
        self.att_src = nn.Parameter(torch.empty(heads, channels))
        self.att_dst = nn.Parameter(torch.empty(heads, channels))

    def forward(self, h: torch.Tensor, edge_index: torch.Tensor) -> tuple:
        from torch_geometric.utils import add_self_loops, remove_self_loops, softmax
        n = h.shape[0]
        edge_index, _ = remove_self_loops(edge_index)
        edge_index, _ = add_self_loops(edge_index, num_nodes=n)
        src, dst = edge_index
        scores = (h @ self.att_src.t())[src] + (h @ self.att_dst.t())[dst]  # [E, heads]
        alpha = softmax(F.leaky_relu(scores, self.negative_slope), dst, num_nodes=n)
        alpha = F.dropout(alpha, self.dropout, self.training)
        return edge_index, alpha.mean(dim=1)


def pyg_inputs(graph) -> tuple:
    """``(x, edge_index, edge_weight)`` of a gnnmesh ``Graph`` for the exported module: the dense
    float features training used (degree features when the graph has none), the edges as
    ``[2, E]`` (source, target) pairs, and the edge weights (None for an unweighted graph)."""
    from .datasets import structural_features
    x = graph.x if graph.x is not None else structural_features(graph, "degree")
    if x.layout != torch.strided:
        x = x.to_dense()
    return x.float(), graph.edge_index(), graph.edge_weight


def typed_inputs(graph, relations) -> tuple:
    """``(x, edge_index, edge_type)`` of a typed graph for an exported R-GCN whose ``relations``
    (model.json's) number the edge types: ``graph`` is a gnnmesh typed union ``Graph`` or PyG's
    ``HeteroData`` (whose union gnnmesh builds as ``Graph.from_pyg`` does, with each relation's
    reverse where the model has one). Each union entry gives one edge per relation it carries,
    so repeated edges count once, as in gnnmesh. A relation the model has and the graph lacks,
    or the other way round, is a ConfigError naming it."""
    from .typed import REVERSE_PREFIX, graph_from_pyg
    relations = list(relations)
    if not hasattr(graph, "adj"):  # a HeteroData
        reverses = any(name.split("__")[1].startswith(REVERSE_PREFIX) for name in relations if name.count("__") == 2)
        graph = graph_from_pyg(graph, edge_attr=False, add_reverse=reverses)
    held = graph.adj.relations
    if held is None:
        raise ConfigError(f"{graph.name}: not a typed graph (its adjacency has no relations); an R-GCN takes one")
    missing = [name for name in relations if name not in held.names]
    extra = [name for name in held.names if name not in relations]
    if missing or extra:
        what = f"has no relation {missing[0]!r}" if missing else f"has a relation the model lacks, {extra[0]!r}"
        raise ConfigError(f"{graph.name}: the graph {what}; the model's relations are {', '.join(relations)}")
    counts = torch.diff(held.ptr)
    edge_index = torch.stack([graph.adj.indices.repeat_interleave(counts), graph.adj.row().repeat_interleave(counts)])
    number = torch.tensor([relations.index(name) for name in held.names], dtype=torch.int64)
    x, _, _ = pyg_inputs(graph)
    return x, edge_index, number[held.ids]

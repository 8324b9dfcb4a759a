"""The GraphView primitives on a PyG ``edge_index``, in plain PyTorch: what an exported model
written on gnnmesh's primitives runs on without gnnmesh.

This file imports nothing of gnnmesh. A PyG export of your own model copies it, verbatim, as
``gnnmesh_view.py`` beside the model's source file and weights; ``load(directory)`` builds
the model from them, and calls it as ``model(x, edge_index, edge_weight=None)`` with
``edge_index[0]`` the sources and ``edge_index[1]`` the targets (PyG's convention). Where
gnnmesh is not installed, ``from gnnmesh.models import ...`` in the model's file is served by
the copies of gnnmesh's model pieces the export holds (``gnnmesh_models/``).

Operators, as gnnmesh names them, over the in-edges of each target: ``"gcn"``
(``D^-1/2 (A+I) D^-1/2``), ``"mean"`` (``D^-1 A``), ``"sum"`` (``A``), ``"loop"`` (the pattern
of ``A + I``, for attention). Dropout follows torch's own random stream in training (the
masks differ from gnnmesh's; eval mode, what an export is for, has none).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

SELF = "self"


class EdgeIndexView:
    """The whole graph ``edge_index`` ``[2, E]`` of ``num_nodes`` nodes, for a model's
    ``forward(view, x)``; ``edge_weight`` ``[E]`` weights the operators as gnnmesh's do."""

    def __init__(self, edge_index: torch.Tensor, num_nodes: int, edge_weight=None):
        self.num_nodes = int(num_nodes)
        src, dst = edge_index[0].long(), edge_index[1].long()
        weight = torch.ones(src.shape[0]) if edge_weight is None else edge_weight.float()
        self.device = edge_index.device
        self._edges = (src, dst, weight.to(self.device))
        self._operators: dict = {}

    def operator(self, name: str) -> tuple:
        """``(targets, sources, values)`` of the operator ``name``, one entry per edge."""
        if name not in self._operators:
            builders = {"gcn": self._gcn, "mean": self._mean, "sum": lambda: self._edges, "loop": self._loop}
            if name not in builders:
                raise ValueError(f"unknown graph operator {name!r}; an export knows {sorted(builders)}")
            src, dst, values = builders[name]()
            self._operators[name] = (dst, src, values)
        return self._operators[name]

    def _with_loops(self) -> tuple:
        """The edges and a loop of weight 1 on every node that has none (existing loops kept)."""
        src, dst, weight = self._edges
        has_loop = torch.zeros(self.num_nodes, dtype=torch.bool, device=self.device)
        has_loop[src[src == dst]] = True
        nodes = torch.arange(self.num_nodes, device=self.device)[~has_loop]
        return (torch.cat([src, nodes]), torch.cat([dst, nodes]),
                torch.cat([weight, torch.ones(nodes.shape[0], device=self.device)]))

    def _degree(self, dst: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # in float64, rounded to float32: the row sums gnnmesh normalises by
        deg = torch.zeros(self.num_nodes, dtype=torch.float64, device=self.device)
        return deg.index_add_(0, dst, weight.double()).float()

    def _gcn(self) -> tuple:
        src, dst, weight = self._with_loops()
        deg = self._degree(dst, weight)
        inv_sqrt = torch.where(deg > 0, deg.pow(-0.5), torch.zeros_like(deg))
        return src, dst, inv_sqrt[dst] * weight * inv_sqrt[src]

    def _mean(self) -> tuple:
        src, dst, weight = self._edges
        deg = self._degree(dst, weight)
        inv = torch.where(deg > 0, 1.0 / deg, torch.zeros_like(deg))
        return src, dst, inv[dst] * weight

    def _loop(self) -> tuple:
        src, dst, _ = self._with_loops()
        return src, dst, torch.ones(src.shape[0], device=self.device)

    # -- the primitives, as gnnmesh.view.GraphView's ------------------------------------------
    def layer(self, index: int) -> "EdgeIndexView":
        return self

    def destinations(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def spmm(self, x: torch.Tensor, op: str = "gcn", values=None) -> torch.Tensor:
        """``A_op @ x``; ``values`` (``[E]``, or ``[E, H]`` for ``x`` ``[N, H, F]``) replace the
        operator's own, in the order ``sddmm`` and ``edge_softmax`` give them."""
        dst, src, own = self.operator(op)
        weight = own if values is None else values
        messages = x[src] * weight.reshape(weight.shape + (1,) * (x.dim() - weight.dim()))
        out = torch.zeros((self.num_nodes,) + tuple(x.shape[1:]), dtype=messages.dtype, device=x.device)
        return out.index_add_(0, dst, messages)

    def sddmm(self, dst: torch.Tensor, src: torch.Tensor, op: str = "loop", kind: str = "add"):
        """Per edge ``(i <- j)``: ``dst[i] + src[j]`` (``add``) or ``<dst[i], src[j]>`` (``dot``)."""
        targets, sources, _ = self.operator(op)
        if kind == "add":
            return dst[targets] + src[sources]
        if kind == "dot":
            return (dst[targets] * src[sources]).sum(-1)
        raise ValueError(f"sddmm: unknown kind {kind!r} (use 'dot' or 'add')")

    def edge_softmax(self, scores: torch.Tensor, op: str = "loop") -> torch.Tensor:
        """Softmax of per-edge ``scores`` over each target's in-edges."""
        targets = self.operator(op)[0]
        index = targets.reshape((-1,) + (1,) * (scores.dim() - 1)).expand_as(scores)
        shape = (self.num_nodes,) + tuple(scores.shape[1:])
        top = torch.full(shape, float("-inf"), dtype=scores.dtype, device=scores.device)
        top = top.scatter_reduce(0, index, scores.detach(), "amax")
        exp = (scores - top[targets]).exp()
        total = torch.zeros(shape, dtype=scores.dtype, device=scores.device).index_add_(0, targets, exp)
        return exp / total[targets]

    def attention(self, z: torch.Tensor, s_dst: torch.Tensor, s_src: torch.Tensor, op: str = "loop",
                  negative_slope: float = 0.2, dropout: float = 0.0, training: bool = False) -> torch.Tensor:
        """GAT's aggregation of ``z`` ``[N, H, F]`` by the softmax over each target's in-edges
        of ``leaky_relu(s_dst[i] + s_src[j])``."""
        scores = F.leaky_relu(self.sddmm(s_dst, s_src, op, "add"), negative_slope)
        alpha = self.edge_dropout(self.edge_softmax(scores, op), dropout, training, op)
        return self.spmm(z, op, values=alpha)

    def dropout(self, x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
        return F.dropout(x, p, training)

    def edge_dropout(self, values: torch.Tensor, p: float, training: bool, op: str = "loop"):
        return F.dropout(values, p, training)

    def batch_norm(self, x, running_mean=None, running_var=None, weight=None, bias=None,
                   training: bool = True, momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
        return F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)


class ExportedModel(nn.Module):
    """A model written on gnnmesh's primitives, called in PyG's way."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_weight=None) -> torch.Tensor:
        return self.model(EdgeIndexView(edge_index, x.shape[0], edge_weight), x)

    def embed(self, x: torch.Tensor, edge_index: torch.Tensor, edge_weight=None) -> torch.Tensor:
        """The model's own ``embed(view, x)``, where it has one."""
        return self.model.embed(EdgeIndexView(edge_index, x.shape[0], edge_weight), x)


def load(directory) -> ExportedModel:
    """The model the export in ``directory`` holds, in eval mode: its class built from its
    source file with the recorded arguments, then loaded with its weights (weights-only)."""
    where = Path(directory)
    spec = json.loads((where / "model.json").read_text())
    user = spec["user_model"]
    source = where / user["source"]
    if hashlib.sha256(source.read_bytes()).hexdigest() != user["sha256"]:
        raise ValueError(f"{source}: not the file the model was exported with (its sha256 differs from model.json's)")
    _provide_model_pieces(where / user["pieces"])
    module = _import(source, "gnnmesh_exported_" + user["class"].replace(".", "_"))
    cls = module
    for part in user["class"].split("."):
        cls = getattr(cls, part)
    model = cls(spec["in_channels"], spec["out_channels"], **user["args"])
    model.load_state_dict(torch.load(where / spec["weights"], map_location="cpu", weights_only=True))
    return ExportedModel(model).eval()


def _provide_model_pieces(pieces: Path) -> None:
    """Serve ``gnnmesh.models`` from the export's copies where gnnmesh is not installed."""
    try:
        found = importlib.util.find_spec("gnnmesh.models")
    except ImportError:
        found = None
    if found is not None:
        return
    package = sys.modules.setdefault("gnnmesh", types.ModuleType("gnnmesh"))
    models = types.ModuleType("gnnmesh.models")
    for file in sorted(pieces.glob("*.py")):
        piece = _import(file, f"gnnmesh.models.{file.stem}")
        models.__dict__.update({k: v for k, v in vars(piece).items() if not k.startswith("_")})
    package.models = models
    sys.modules["gnnmesh.models"] = models


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

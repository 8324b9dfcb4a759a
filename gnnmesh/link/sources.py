"""Where a link split's held-out edges come from, besides fractions of the graph's own edges.

``--link-split`` takes fractions (``valid=F,test=F``, ``split.split_edges``) or a directory:

- pair files: ``train.csv``, ``valid.csv``, ``test.csv`` (``source,destination`` per line),
  optionally ``valid_neg.csv``/``test_neg.csv`` (K destination ids per positive, line by line);
- an OGB link-prediction directory (ogbl-collab, ogbl-ddi, ogbl-citation2, ...): its
  ``split/<name>/{train,valid,test}.pt`` (or that folder itself), dicts of ``edge`` [E, 2] with
  ``edge_neg`` [E', 2] (negatives shared by every positive), or ``source_node``/``target_node``
  [E] with ``target_node_neg`` [E, K] (each positive's own);

and ``LinkSplit.from_pyg`` (``split``) reads PyG's ``RandomLinkSplit`` outputs. The graph messages pass over is the
dataset's nodes with the training edges alone (both ways where undirected). Held-out positives
given without negatives get K drawn from the seed (``--eval-negatives``), as fractions do.
Everything here is read from files or drawn by the counter, so every rank and strategy builds
the same split. ``with_disjoint_train`` then keeps a share of the training edges out of
message passing (``--disjoint-train``), as PyG's ``disjoint_train_ratio``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..datasets.files import read_id_table
from ..errors import ConfigError, GraphError
from ..graph import Adjacency, Graph
from . import counter
from .split import HELD_OUT, LinkSplit, fixed_negatives, parse_fractions, split_edges, without_pairs

DISJOINT_KEY = 6  # counter.words' purpose key of the --disjoint-train draw (split.py holds 1-5)
PAIR_FILES = ("train.csv", "valid.csv", "test.csv")
OGB_FILES = ("train.pt", "valid.pt", "test.pt")


def is_directory(text: str) -> bool:
    """Whether ``--link-split`` names a directory of split files rather than fractions."""
    return Path(text).expanduser().is_dir()


def check_link_split(text: str, name: str = "link_split") -> None:
    """Fractions, or a directory holding one of the layouts; a ConfigError naming ``name`` else."""
    if not is_directory(text):
        if "=" not in text:
            raise ConfigError(f"config field '{name}': {text!r} is neither valid=F,test=F nor a directory "
                              f"of split files")
        parse_fractions(text, name)
        return
    kind_of(Path(text).expanduser(), name)


def kind_of(path: Path, name: str = "link_split") -> tuple:
    """("pairs", path) or ("ogb", the folder holding train.pt) of a split directory."""
    if (path / PAIR_FILES[0]).is_file():
        return "pairs", path
    if (path / OGB_FILES[0]).is_file():
        return "ogb", path
    folders = sorted(p for p in (path / "split").glob("*") if (p / OGB_FILES[0]).is_file())
    if len(folders) == 1:
        return "ogb", folders[0]
    if folders:
        raise ConfigError(f"config field '{name}': {path / 'split'} holds {len(folders)} splits "
                          f"({', '.join(p.name for p in folders)}); name one, e.g. {folders[0]}")
    raise ConfigError(f"config field '{name}': {path} holds neither {', '.join(PAIR_FILES)} nor an OGB "
                      f"link split (split/<name>/{{{','.join(OGB_FILES)}}})")


def source_of(graph: Graph, link: str, given: bool) -> str:
    """What ``--link-split`` reads for ``graph``: ``link`` as given, else the split folder of
    the OGB link-prediction directory ``graph`` was loaded from (``--dataset DIR``), else the
    default fractions."""
    where = (graph.meta or {}).get("split") or {}
    if not given and where.get("kind") == "ogb-link":
        return where["dir"]
    return link


def load_split(graph: Graph, link: str, seed: int, eval_negatives: int, disjoint_train: float = 0.0) -> LinkSplit:
    """The split ``--link-split`` names for ``graph`` (its fractions or its directory), with
    ``disjoint_train`` of the training edges kept out of message passing."""
    if is_directory(link):
        kind, folder = kind_of(Path(link).expanduser())
        read = read_pair_files if kind == "pairs" else read_ogb_split
        split = read(graph, folder, seed, eval_negatives)
    else:
        split = split_edges(graph, parse_fractions(link), seed, eval_negatives)
    return with_disjoint_train(split, disjoint_train, seed)


# -- the pieces every source assembles -------------------------------------------------------------
def training_graph(graph: Graph, train: torch.Tensor) -> Graph:
    """``graph``'s nodes and vertex data with the edges ``train`` [2, E] alone (both ways where
    the graph is undirected)."""
    n = graph.num_nodes
    adj = Adjacency.from_coo(train[1], train[0], (n, n))
    return graph.replace(adj=adj if graph.directed else adj.symmetrized())


def assemble(graph: Graph, train: torch.Tensor, held: dict, negatives: dict, seed: int, eval_negatives: int,
             shared: Optional[dict] = None) -> LinkSplit:
    """A LinkSplit from read pairs: each held-out split's negatives as given ([E, K]),
    shared by its every positive (``shared``: [2, E'] pairs), or else drawn from the seed."""
    shared = shared or {}
    for i, k in enumerate(HELD_OUT):
        if k in shared:
            negatives[k] = torch.zeros(held[k].shape[1], 0, dtype=torch.int64)
        elif negatives.get(k) is None:
            negatives[k] = fixed_negatives(held[k], graph.num_nodes, seed, i, eval_negatives)
    return LinkSplit(training_graph(graph, train), train, held["valid"], held["test"], negatives["valid"],
                     negatives["test"], shared.get("valid"), shared.get("test"))


def with_disjoint_train(split: LinkSplit, fraction: float, seed: int) -> LinkSplit:
    """``split`` with ``fraction`` of its training edges supervision alone: still scored by the
    loss, no longer in the graph messages pass over (placed by a draw of the seed and each edge)."""
    count = int(round(fraction * split.train.shape[1]))
    if not count:
        return split
    if count >= split.train.shape[1]:
        raise ConfigError(f"config field 'disjoint_train': {fraction} keeps every one of the "
                          f"{split.train.shape[1]:,} training edges out of message passing")
    src, dst = split.train.numpy()
    held_at = np.argsort(counter.uniform(seed, DISJOINT_KEY, src, dst), kind="stable")[:count]
    return LinkSplit(without_pairs(split.graph, held_at, src, dst), split.train, split.valid, split.test,
                     split.valid_negatives, split.test_negatives, split.valid_negative_pairs,
                     split.test_negative_pairs)


# -- pair files ------------------------------------------------------------------------------------
def read_pair_files(graph: Graph, folder: Path, seed: int, eval_negatives: int) -> LinkSplit:
    """The split of ``folder``'s train/valid/test.csv and optional valid_neg/test_neg.csv."""
    n = graph.num_nodes
    pairs = {name[:-4]: _pairs_file(folder / name, n) for name in PAIR_FILES}
    negatives = {k: _negatives_file(folder / f"{k}_neg.csv", n, pairs[k].shape[1]) for k in HELD_OUT}
    if not pairs["train"].shape[1]:
        raise GraphError(f"{folder / PAIR_FILES[0]}: no training pair")
    return assemble(graph, pairs["train"], pairs, negatives, seed, eval_negatives)


def _pairs_file(path: Path, n: int) -> torch.Tensor:
    ids = read_id_table(path, n, ("source id", "destination id"))
    return torch.from_numpy(np.ascontiguousarray(ids.T))


def _negatives_file(path: Path, n: int, positives: int) -> Optional[torch.Tensor]:
    """[positives, K] destination ids, line i the negatives of the positive on line i of its
    pairs file; None when there is no such file."""
    if not path.is_file():
        return None
    ids = read_id_table(path, n, ("negative destination id",), width=0)
    if len(ids) != positives:
        raise GraphError(f"{path}: {len(ids)} rows of negatives for {positives} positives (one row each)")
    return torch.from_numpy(np.ascontiguousarray(ids))


# -- OGB link-prediction directories ---------------------------------------------------------------
def read_ogb_split(graph: Graph, folder: Path, seed: int, eval_negatives: int) -> LinkSplit:
    """The split of an OGB link-prediction folder's train/valid/test.pt."""
    n = graph.num_nodes
    held, negatives, shared = {}, {}, {}
    parts = {name[:-3]: _ogb_part(folder / name, n) for name in OGB_FILES}
    for k in HELD_OUT:
        held[k], negatives[k], pair_negatives = parts[k]
        if pair_negatives is not None:
            shared[k] = pair_negatives
    train = parts["train"][0]
    if not train.shape[1]:
        raise GraphError(f"{folder / OGB_FILES[0]}: no training edge")
    return assemble(graph, train, held, negatives, seed, eval_negatives, shared)


def load_pt(path: Path) -> dict:
    """A split file's dict of tensors, read without running any code it holds (weights_only);
    a file that is not one is one GraphError naming it."""
    try:
        with warnings.catch_warnings():  # e.g. torch's note on a pickle protocol: the error below says it all
            warnings.simplefilter("ignore")
            value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a hostile pickle, a truncated file, another format: all one line
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GraphError(f"{path}: not a split file of tensors torch.load(weights_only=True) reads "
                         f"({reason[:160]})") from None
    if not isinstance(value, dict):
        raise GraphError(f"{path}: holds a {type(value).__name__}, not a dict of tensors (edge, edge_neg, ...)")
    return value


def _ogb_part(path: Path, n: int) -> tuple:
    """(positives [2, E], their own negatives [E, K] or None, shared negative pairs [2, E'] or
    None) of one OGB split file."""
    d = load_pt(path)
    if "edge" in d:
        pos = _tensor(d, "edge", path, n, (None, 2)).t()
    elif "source_node" in d and "target_node" in d:
        pos = torch.stack([_tensor(d, "source_node", path, n, (None,)), _tensor(d, "target_node", path, n, (None,))])
        if pos.shape[1] != d["source_node"].shape[0] or d["source_node"].shape != d["target_node"].shape:
            raise GraphError(f"{path}: source_node and target_node differ in length")
    else:
        raise GraphError(f"{path}: holds neither 'edge' [E, 2] nor 'source_node' and 'target_node' [E]")
    own = shared = None
    if "target_node_neg" in d:
        own = _tensor(d, "target_node_neg", path, n, (pos.shape[1], None))
    if "edge_neg" in d:
        shared = _tensor(d, "edge_neg", path, n, (None, 2)).t().contiguous()
    return pos.contiguous(), own, shared


def _tensor(d: dict, key: str, path: Path, n: int, shape: tuple) -> torch.Tensor:
    """``d[key]`` as int64 node ids of ``shape`` (None: any length), each in [0, n)."""
    value = d[key]
    if not isinstance(value, torch.Tensor):
        raise GraphError(f"{path}: '{key}' is a {type(value).__name__}, not a tensor")
    if value.dim() != len(shape) or any(s is not None and s != got for s, got in zip(shape, value.shape)):
        want = ", ".join("E" if s is None else str(s) for s in shape)
        raise GraphError(f"{path}: '{key}' has shape {list(value.shape)}, not [{want}]")
    if value.is_floating_point():
        finite = torch.isfinite(value) & (value == value.round())
        if not bool(finite.all()):
            at = int(torch.nonzero(~finite.reshape(-1))[0])
            raise GraphError(f"{path}: '{key}' entry {at} is {value.reshape(-1)[at].item()!r}, not a node id")
    value = value.to(torch.int64)
    bad = (value < 0) | (value >= n)
    if bool(bad.any()):
        at = int(torch.nonzero(bad.reshape(-1))[0])
        raise GraphError(f"{path}: '{key}' entry {at} is node {int(value.reshape(-1)[at])}, out of range for "
                         f"{n} nodes (ids 0..{n - 1})")
    return value

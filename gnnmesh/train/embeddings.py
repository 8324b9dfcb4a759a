"""Learned input embeddings (``--embed-dim D``): nodes without features of their own (a typed
graph's featureless node types; every node of a graph without features) get D input columns
that training learns, as DGL's and GraphStorm's sparse node embeddings do.

The embeddings are columns of the model's input, ``[features | embeddings]``, zero on the
rows that have features. Each rank holds the rows of the table where its strategy holds its
input rows (``gnnmesh.parallel.input_rows``), so the strategies carry them with no code of
their own: the input takes a gradient, and after each backward pass a row-sparse optimizer
(torch's ``SparseAdam`` or ``Adagrad`` with sparse gradients) updates the rows the step
reached — those with a non-zero gradient — and no other. Every row's update depends on its
own gradient and state alone, so under any strategy and number of ranks each row follows
the single process's numbers.

Initial values depend on the seed and the node's global id alone (``initial_values``), so
every layout starts from the same table. Checkpoints hold the whole table with its
optimizer state, by global id (``record``), and any strategy on any number of ranks takes
its own rows of it back (``restore``).
"""

from __future__ import annotations

import warnings
from typing import Optional

import numpy as np
import torch

from .. import comm
from ..errors import ConfigError
from ..graph import Graph
from ..settings import EMBED_OPTIMIZERS as OPTIMIZERS

BLOCK = 1 << 14  # rows drawn from one generator: a row's value depends on (seed, its block, its place)


def embedded_ids(graph: Graph) -> np.ndarray:
    """The global ids that get embeddings: a typed graph's rows of its featureless node
    types, or every row of a graph without features (ascending)."""
    types = graph.meta.get("node_types")
    if types is not None and hasattr(types, "widths"):
        spans = [np.arange(types.offsets[t], types.offsets[t + 1], dtype=np.int64)
                 for t, width in enumerate(types.widths) if width == 0]
        ids = np.concatenate(spans) if spans else np.zeros(0, dtype=np.int64)
        if graph.x is None or not len(ids):
            what = "no node type has features" if graph.x is None else "every node type has features"
            raise ConfigError(f"config field 'embed_dim': dataset '{graph.name}': {what}; embeddings are "
                              "learned for the featureless types of a typed graph with features on others, "
                              "or for every node of a graph without features")
        return ids
    if graph.x is not None:
        raise ConfigError(f"config field 'embed_dim': dataset '{graph.name}' has features on every node; "
                          "embeddings are learned for nodes without features")
    return np.arange(graph.num_nodes, dtype=np.int64)


def initial_values(ids: np.ndarray, dim: int, seed: int) -> torch.Tensor:
    """``N(0, 1)`` values (torch.nn.Embedding's) of the rows ``ids``, each a function of
    ``seed`` and its id alone."""
    ids = np.asarray(ids, dtype=np.int64)
    out = torch.empty(len(ids), dim)
    blocks = ids // BLOCK
    for block in np.unique(blocks):
        generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(block))
        values = torch.randn(BLOCK, dim, generator=generator)
        mine = np.flatnonzero(blocks == block)
        out[torch.from_numpy(mine)] = values[torch.from_numpy(ids[mine] - block * BLOCK)]
    return out


def with_embeddings(x: torch.Tensor, ids: np.ndarray, dim: int, seed: int) -> torch.Tensor:
    """``[x | E]``: the input features with ``dim`` columns more, the initial embeddings on
    rows ``ids`` and zeros elsewhere."""
    extra = torch.zeros(x.shape[0], dim, dtype=x.dtype)
    extra[torch.from_numpy(ids)] = initial_values(ids, dim, seed).to(x.dtype)
    return torch.cat([x, extra], dim=1)


class Embeddings:
    """This rank's rows of the embedding table, read from and written to ``rows`` (an
    ``InputRows``), columns ``columns`` of the input, with their sparse optimizer.
    ``embedded``: every embedded global id (ascending); ``talk``: a Comm over every rank that
    holds rows (None on one process)."""

    def __init__(self, rows, embedded: np.ndarray, columns: slice, optimizer: str, lr: float, talk=None):
        self.rows, self.columns, self.talk = rows, columns, talk
        self.dim = columns.stop - columns.start
        local = np.flatnonzero(np.isin(rows.ids, embedded))
        order = np.argsort(rows.ids[local], kind="stable")
        self.positions = torch.from_numpy(local[order])  # of the rank's input rows, by ascending id
        self.ids = rows.ids[local[order]]
        self.table = torch.nn.Parameter(rows.read(self.positions, columns).float())
        self.kind = optimizer  # one of OPTIMIZERS, as checkpoints name it
        self.optimizer = _optimizer(optimizer, self.table, lr)
        self.best: Optional[torch.Tensor] = None  # the table at the best-validation epoch
        self.grad: Optional[torch.Tensor] = None  # the last step's gradient of the rank's rows

    # -- a training step ---------------------------------------------------------------------------
    def gather_gradient(self) -> torch.Tensor:
        """This step's gradient of the rank's rows, whole (summed over ranks where every rank
        holds every row), read after backward; the input's own gradient is cleared."""
        grad = self.rows.gradient(self.positions, self.columns).float()
        self.rows.clear_gradient()
        if self.rows.replicated and self.talk is not None:
            with self.talk.phase("grad"):
                self.talk.all_reduce(grad)
        self.grad = grad
        return grad

    @torch.no_grad()
    def step(self) -> None:
        """The optimizer's step on the rows this step reached, written back to the input."""
        grad = self.grad
        touched = torch.nonzero(grad.abs().sum(dim=1)).flatten()
        self.table.grad = torch.sparse_coo_tensor(touched[None], grad[touched], tuple(self.table.shape),
                                                  check_invariants=False)
        with warnings.catch_warnings():  # torch's Adagrad builds its sparse tensors without saying how to check them
            warnings.filterwarnings("ignore", "Sparse invariant checks")
            self.optimizer.step()
        self.table.grad = None
        if len(touched):
            self.rows.write(self.positions[touched], self.columns, self.table[touched])

    # -- the best epoch's table --------------------------------------------------------------------
    def keep_best(self) -> None:
        self.best = self.table.detach().clone()

    @torch.no_grad()
    def use(self, values: torch.Tensor) -> None:
        """Give the model's input the table ``values`` (the rank's rows)."""
        self.table.copy_(values)
        if len(self.positions):
            self.rows.write(self.positions, self.columns, values)

    # -- checkpoints -------------------------------------------------------------------------------
    def record(self) -> dict:
        """The whole table, its best-epoch values and its optimizer state, by global id (a
        collective call: every rank calls it; each gets the record)."""
        state = self.optimizer.state.get(self.table, {})
        mine = {"ids": torch.from_numpy(self.ids), "last": self.table.detach().clone(),
                "best": self.best,
                "rows": {k: v for k, v in state.items() if torch.is_tensor(v) and v.shape == self.table.shape},
                "shared": {k: float(v) for k, v in state.items()
                           if not (torch.is_tensor(v) and v.shape == self.table.shape)}}
        pieces = [mine] if self.talk is None or self.rows.replicated else self.talk.all_gather_object(mine)
        order = torch.argsort(torch.cat([p["ids"] for p in pieces]))

        def joined(get):
            parts = [get(p) for p in pieces]
            return None if any(t is None for t in parts) else torch.cat(parts)[order]

        return {"ids": joined(lambda p: p["ids"]), "last": joined(lambda p: p["last"]),
                "best": joined(lambda p: p["best"]),
                "optimizer": {"kind": self.kind, "shared": pieces[0]["shared"],
                              "rows": {k: joined(lambda p, k=k: p["rows"].get(k)) for k in mine["rows"]}}}

    def restore(self, record: dict, which: str = "last", optimizer: bool = True, where: str = "checkpoint") -> None:
        """Take this rank's rows of a checkpoint's ``record`` (``which``: its ``last`` or
        ``best`` values; ``optimizer``: the optimizer's state too, to resume)."""
        check_record(record, self.dim, where)
        ids = record["ids"].numpy()
        at = np.searchsorted(ids, self.ids)
        if len(at) and (at.max() >= len(ids) or (ids[np.minimum(at, len(ids) - 1)] != self.ids).any()):
            raise ConfigError(f"{where}: its embeddings are not of this graph's featureless nodes")
        index = torch.from_numpy(at)
        values = record["best"] if which == "best" and record["best"] is not None else record["last"]
        self.use(values[index].float())
        if not optimizer:
            return
        saved = record["optimizer"]
        if saved["kind"] != self.kind:
            raise ConfigError(f"{where}: its embeddings were trained with {saved['kind']}, this run with {self.kind}")
        if saved["rows"]:
            state = {k: v[index].clone() for k, v in saved["rows"].items()}
            state.update({k: _shared(self.optimizer, k, v) for k, v in saved["shared"].items()})
            self.optimizer.state[self.table] = state
        if record["best"] is not None:
            self.best = record["best"][index].float().clone()


def check_record(record, dim: int, where: str) -> None:
    """A checkpoint's embeddings are bad input until checked: ids ascending and unique, every
    table one row per id and ``dim`` columns."""
    if not (isinstance(record, dict) and torch.is_tensor(record.get("ids")) and record["ids"].dim() == 1
            and record["ids"].dtype == torch.int64):
        raise ConfigError(f"{where}: 'embeddings' is not a table of node ids and values")
    n = len(record["ids"])
    if n and not bool((record["ids"][1:] > record["ids"][:-1]).all()):
        raise ConfigError(f"{where}: the embeddings' node ids are not ascending and unique")
    tables = [("last", record.get("last"))] + ([("best", record["best"])] if record.get("best") is not None else [])
    saved = record.get("optimizer")
    if not (isinstance(saved, dict) and saved.get("kind") in OPTIMIZERS and isinstance(saved.get("rows"), dict)
            and isinstance(saved.get("shared"), dict)):
        raise ConfigError(f"{where}: the embeddings' optimizer state is not one of {', '.join(OPTIMIZERS)}'s")
    tables += [(f"optimizer {k}", v) for k, v in saved["rows"].items()]
    for name, table in tables:
        if not (torch.is_tensor(table) and table.is_floating_point() and tuple(table.shape) == (n, dim)
                and bool(torch.isfinite(table).all())):
            raise ConfigError(f"{where}: the embeddings' {name} table is not {n} rows of {dim} finite values")


def _optimizer(name: str, table: torch.nn.Parameter, lr: float) -> torch.optim.Optimizer:
    if name == "adagrad":
        return torch.optim.Adagrad([table], lr=lr)
    return torch.optim.SparseAdam([table], lr=lr)


def _shared(optimizer, key: str, value: float):
    """A scalar of the optimizer's state as torch keeps it (Adagrad's step is a tensor)."""
    return torch.tensor(value) if isinstance(optimizer, torch.optim.Adagrad) else int(value)


def world_comm(strategy):
    """The Comm of ``strategy``'s ranks (None on one process)."""
    if comm.world_size() <= 1:
        return None
    return getattr(strategy, "comm", None) or comm.setup_comm()

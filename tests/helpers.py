"""Small graphs and the command-line runner shared by the tests."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from contextlib import redirect_stderr, redirect_stdout
from unittest import mock

import torch

from gnnmesh import Graph
from tests.forked import run_cli


def random_graph(n: int = 30, e: int = 120, seed: int = 0, features: int = 8, classes: int = 3,
                 weighted: bool = False, directed: bool = True, isolated: int = 2) -> Graph:
    """A random directed multigraph with self-loops and ``isolated`` edge-free nodes at the end."""
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n - isolated, (2, e), generator=gen)
    if not directed:
        ei = torch.cat([ei, ei.flip(0)], dim=1)
    weight = torch.rand(ei.shape[1], generator=gen) + 0.5 if weighted else None
    perm = torch.randperm(n, generator=gen)
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    masks[0][perm[: n // 2]] = True
    masks[1][perm[n // 2: 3 * n // 4]] = True
    masks[2][perm[3 * n // 4:]] = True
    return Graph.from_edge_index(ei, n, edge_weight=weight, directed=None if directed else False,
                                 x=torch.randn(n, features, generator=gen),
                                 y=torch.randint(0, classes, (n,), generator=gen), num_classes=classes,
                                 train_mask=masks[0], val_mask=masks[1], test_mask=masks[2], name="random")


def same_graph(a: Graph, b: Graph) -> None:
    """Assert that two loaded graphs hold the same structure, data, split and metadata."""
    assert a.num_nodes == b.num_nodes and a.directed == b.directed
    assert a.name == b.name and a.num_classes == b.num_classes and a.meta == b.meta
    assert torch.equal(a.adj.indptr, b.adj.indptr) and torch.equal(a.adj.indices, b.adj.indices)
    assert (a.adj.values is None) == (b.adj.values is None)
    if a.adj.values is not None:
        assert torch.equal(a.adj.values, b.adj.values)
    for field in ("x", "y", "train_mask", "val_mask", "test_mask"):
        u, v = getattr(a, field), getattr(b, field)
        assert (u is None) == (v is None), field
        if u is not None:
            if u.layout == torch.sparse_csr:
                u, v = u.to_dense(), v.to_dense()
            assert torch.equal(u, v), field


def dense(adj, values=None) -> torch.Tensor:
    values = adj.values if values is None else values
    if values is None:
        values = torch.ones(adj.nnz)
    out = torch.zeros(adj.shape + tuple(values.shape[1:]), dtype=values.dtype)
    out[adj.row(), adj.indices] = values
    return out


def model_fields(name: str) -> dict:
    """Config fields of a model named in a test's list: ``"gat"``, or ``"decoupled-gcn"`` for
    the decoupled form of gcn."""
    decoupled = name.startswith("decoupled-")
    return {"model": name[len("decoupled-"):] if decoupled else name, "decoupled": decoupled}


def taken(fields: dict, **options) -> dict:
    """The ``options`` (model options such as ``heads=2, k=3``) that the model of ``fields``
    takes: a test's settings shared by every model, where a model refuses an option it does
    not take."""
    from gnnmesh.settings import options_not_taken
    not_taken = options_not_taken(fields["model"], fields.get("decoupled", False))
    return {name: value for name, value in options.items() if name not in not_taken}


def layout(strategy: str, grid=None):
    """The parallel layout of ``strategy`` on this job's ranks (``grid``: "X,Y,Z" for grid3d)."""
    from gnnmesh import comm
    from gnnmesh.layout import ParallelLayout
    return ParallelLayout.for_strategy(strategy, comm.world_size(), grid)


def gnnmesh(*args, data_root=None, timeout=120):
    env = dict(os.environ)
    if data_root:
        env["GNNMESH_DATA"] = str(data_root)
    return run_cli(*args, env=env, timeout=timeout)


def gnnmesh_in_process(*args, env=None):
    """``gnnmesh ARGS`` run by ``cli.main`` in this process, output captured, as ``gnnmesh``'s
    CompletedProcess: for commands that stop on bad input before they train (no interpreter
    to start, about 2 s less each). ``env``: variables set for the call."""
    from gnnmesh import cli

    def show(message, category, filename, lineno, file=None, line=None):  # as a process shows them
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, env or {}), redirect_stdout(out), redirect_stderr(err), \
            warnings.catch_warnings():
        warnings.simplefilter("default")
        # As a process does: a ResourceWarning here is the collector finding a pipe another
        # test left open, not a line this command wrote.
        warnings.simplefilter("ignore", ResourceWarning)
        warnings.showwarning = show  # not into pytest's record: a warning is a line on stderr
        try:
            status = cli.main([str(a) for a in args])
        except SystemExit as stop:  # argparse's refusals
            status = stop.code
    return subprocess.CompletedProcess(args, status, out.getvalue(), err.getvalue())


def one_error_line(result, *fragments):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gnnmesh: error:"), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def typed_graph(seed: int = 0, counts=(40, 25, 15), edges=(120, 60, 50, 40), features: int = 5):
    """A small typed graph as its union: node types a, b, c (features and 3 classes on a only);
    relations a-x-a, a-y-b, b-z-c, c-w-a and their reverses. Random edges repeat, and a pair
    joined by a relation and another's reverse is one entry with two relations."""
    import numpy as np
    from gnnmesh.graph import Adjacency
    from gnnmesh.relations import Relations
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    schema = [("a", "x", "a"), ("a", "y", "b"), ("b", "z", "c"), ("c", "w", "a")]
    at = {"a": 0, "b": 1, "c": 2}
    src, dst, rel = [], [], []
    for i, ((s, _, d), m) in enumerate(zip(schema, edges)):
        s_ids = rng.integers(0, counts[at[s]], m) + offsets[at[s]]
        d_ids = rng.integers(0, counts[at[d]], m) + offsets[at[d]]
        src += [s_ids, d_ids]
        dst += [d_ids, s_ids]
        rel += [np.full(m, i), np.full(m, i + len(schema))]
    src, dst, rel = map(np.concatenate, (src, dst, rel))
    n = int(offsets[-1])
    tagged = np.unique(np.stack([dst * n + src, rel], 1), axis=0)  # (entry key, relation), each once
    keys, first = np.unique(tagged[:, 0], return_index=True)
    ptr = torch.from_numpy(np.append(first, len(tagged)))
    names = tuple(f"{s}__{r}__{d}" for s, r, d in schema) + tuple(f"{d}__rev_{r}__{s}" for s, r, d in schema)
    adj = Adjacency.from_coo(keys // n, keys % n, (n, n)).with_relations(
        Relations(names, ptr, torch.from_numpy(tagged[:, 1])))
    x = torch.zeros(n, features)
    x[:counts[0]] = torch.randn(counts[0], features, generator=torch.Generator().manual_seed(seed))
    y = torch.zeros(n, dtype=torch.long)
    y[:counts[0]] = torch.from_numpy(rng.integers(0, 3, counts[0]))
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    order = rng.permutation(counts[0])
    for mask, chosen in zip(masks, np.split(order, [counts[0] // 2, 3 * counts[0] // 4])):
        mask[chosen] = True
    return Graph(adj, x=x, y=y, train_mask=masks[0], val_mask=masks[1], test_mask=masks[2], name="typed",
                 directed=True, num_classes=3)

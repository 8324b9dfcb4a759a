"""One rank's block of an operator, kept as its owned and halo parts (gnnmesh.parallel.partition.halo)."""

import numpy as np
import pytest
import torch

from gnnmesh.ops import compiled
from gnnmesh.ops.spmm import multiply
from gnnmesh.parallel.partition.halo import local_operator
from gnnmesh.partition import rank_halo
from gnnmesh.view import OPERATORS

from tests.helpers import random_graph

PARTS = 3


def _locals(op_name: str):
    graph = random_graph(n=120, e=900, seed=3)
    op = OPERATORS[op_name](graph.adj)
    assignment = np.arange(graph.num_nodes) * 7 % PARTS
    for rank in range(PARTS):
        h = rank_halo(op, assignment, PARTS, rank)
        yield h.block, local_operator(h.block, h.entry_ids, h.send_index, h.recv_counts, None, "cpu")


@pytest.mark.parametrize("op_name", ["gcn", "loop"])
def test_the_block_rebuilt_from_the_parts_is_the_block_split(op_name):
    for block, local in _locals(op_name):
        inner = block.indices < block.shape[0]
        rebuilt = local.block
        assert rebuilt.shape == block.shape
        assert torch.equal(rebuilt.indptr, block.indptr) and torch.equal(rebuilt.indices, block.indices)
        assert (rebuilt.values is None) == (block.values is None)
        if block.values is not None:
            assert torch.equal(rebuilt.values, block.values)
        assert torch.equal(local.inner_pos, torch.nonzero(inner).flatten())
        assert torch.equal(local.outer_pos, torch.nonzero(~inner).flatten())


def test_the_halo_part_multiplied_piece_by_piece_equals_the_whole(monkeypatch):
    monkeypatch.setenv("GNNMESH_KERNELS", "compiled")
    monkeypatch.setattr(compiled, "MIN_ENTRIES", 16)  # pieces on a small graph
    for _, local in _locals("gcn"):
        outer, pieces = local.outer, local.outer_pieces()
        assert len(pieces) > 1
        assert [p[0].start for p in pieces[1:]] == [p[0].stop for p in pieces[:-1]]
        assert pieces[0][0].start == 0 and pieces[-1][0].stop == outer.shape[0]
        x = torch.randn(outer.shape[1], 5, generator=torch.Generator().manual_seed(0))
        y = torch.zeros(outer.shape[0], 5)
        for rows, entries, piece in pieces:
            y[rows].add_(multiply(piece, outer.values[entries], x))
        assert torch.equal(y, multiply(outer, outer.values, x))

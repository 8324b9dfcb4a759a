"""What a model sees of a sampled mini-batch: each layer its own block.

A layer stack asks ``view.layer(i)`` before layer ``i``; the view then holds that layer's
block: its input rows are the block's nodes (the previous layer's outputs), its outputs the
block's destinations, a prefix of them. Masks are keyed by global ids, as everywhere, so a
node's dropout is the same whichever ranks' batches it appears in.
"""

from __future__ import annotations

import torch

from .. import ops
from ..view import GraphView
from .sampler import Sample


class BlockView(GraphView):
    """The blocks of one sampled batch, for the operator ``op`` they were sampled from (or,
    sampled per relation, each relation's operators: ``RelationSampler.block_operator``)."""

    def __init__(self, sample: Sample, op: str, seed: int, device):
        super().__init__(None, seed=seed, device=device)
        self.sample, self.op = sample, op
        self.block = sample.layer_block(0)
        if self.device.type != "cpu":
            for block in sample.blocks:
                if block.typed is not None:  # its per-relation operators are moved as they are built
                    continue
                if block.adj.values is not None:
                    block.adj = block.adj.with_values(block.adj.values.to(self.device))
                ops.index(block.adj, self.device)

    def layer(self, index: int) -> "BlockView":
        self.block = self.sample.layer_block(index)
        return self

    @property
    def num_nodes(self) -> int:
        return len(self.block.nodes)

    def _adj(self, op: str):
        if self.block.typed is not None:
            return self._relation_operator(op)[0]
        if op != self.op:
            raise ValueError(f"the batch was sampled from operator {self.op!r}; the model asked for {op!r}")
        return self.block.adj

    def spmm(self, x, op="gcn", values=None):
        return ops.spmm(self._adj(op), x, values)

    def destinations(self, x: torch.Tensor) -> torch.Tensor:
        return x[:self.block.num_dst]

    def sddmm(self, dst, src, op="loop", kind="add"):
        return ops.sddmm(self._adj(op), self.destinations(dst), src, kind)

    def edge_softmax(self, scores, op="loop"):
        return ops.edge_softmax(self._adj(op), scores)

    def edge_block(self, op):
        return self._adj(op)

    def rows(self):
        return self.block.nodes

    def entries(self, op):
        if self.block.typed is not None:
            return self._relation_operator(op)[1]
        self._adj(op)
        return self.block.entries

    def _relation_operator(self, op: str) -> tuple:
        """(operator ``op`` of a block sampled per relation, its entries' global ids), built
        on first use."""
        block = self.block
        if op not in block.operators:
            adj, ids = block.typed.block_operator(block, op)
            if self.device.type != "cpu":
                if adj.values is not None:
                    adj = adj.with_values(adj.values.to(self.device))
                ops.index(adj, self.device)
            block.operators[op] = (adj, ids)
        return block.operators[op]

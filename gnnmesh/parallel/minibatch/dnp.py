"""DNP, destination node parallelism (APT §3.1): vertices are partitioned, and a first-layer
row is computed by its destination's owner. Rank r sends each owner its rows with their
sampled entries; the owner reads their sources' features (its partition and 1-hop
neighbourhood, which its cache favours), runs the first layer whole, attention included,
and sends the finished rows back: one hidden row per row, at most."""

from __future__ import annotations

import numpy as np
import torch

from ...sampling import BlockView, Sample, row_positions
from .route import Request, SplitRoute, Work, pack_rows, row_entries, unpack_rows


class DestinationNodeRoute(SplitRoute):
    name = "dnp"
    needs_partition = True
    caches_in_neighbours = True   # its ranks read the sources of their rows' edges

    def reply_width(self, model) -> int:
        return model.layers[0].out_features

    def request(self, block, rank: int) -> Request:
        dst, lengths, entries = row_entries(block)
        indptr = block.adj.indptr.numpy()
        order = np.argsort(self.owner[dst], kind="stable")
        expect = np.bincount(self.owner[dst], minlength=self.world).tolist()
        pieces, start = [], 0
        for n in expect:
            rows = order[start:start + n]
            start += n
            pieces.append(pack_rows(dst[rows], lengths[rows], entries[row_positions(indptr, rows)]))
        return Request(pieces, expect, order)

    def serve(self, pieces: list, rank: int, width: int, plan_only: bool = False) -> Work:
        dst, lengths, _, entries, counts = unpack_rows(pieces)
        block = self.sampler.block(dst, entries, lengths)
        view = None if plan_only else BlockView(Sample(dst, [block]), self.op, self.seed, self.device)
        return Work(block.nodes, counts, width, {"view": view})

    def compute(self, model, view, work: Work, x: torch.Tensor, rank: int) -> torch.Tensor:
        return model.layer_output(view, 0, x)

    def combine(self, model, rows: torch.Tensor, request: Request, num_dst: int) -> torch.Tensor:
        back = np.empty(num_dst, dtype=np.int64)
        back[request.order] = np.arange(num_dst)  # arriving row of each destination
        return rows[torch.from_numpy(back).to(rows.device)]

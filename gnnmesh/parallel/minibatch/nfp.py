"""NFP, node feature parallelism (P3; APT §3.1): rank r holds columns ``cols_r`` of every
input feature (and uses the matching columns of W¹). Every rank's first-layer block goes to
every rank; each computes the blocks' partial sums from its columns, and rank r adds up the
pieces of its own destinations. The layer's linear map is a sum over input columns, so the
pieces add up to one process's sum; the bias and anything after it follow once, on r."""

from __future__ import annotations

import torch

from ...sampling import BlockView, Sample
from ...layout.ranges import even_bounds
from .route import Request, SplitRoute, Work, pack_rows, row_entries, unpack_rows


class NodeFeatureRoute(SplitRoute):
    name = "nfp"
    attention = False  # a row's attention needs all of its sources' columns

    def feature_columns(self, width: int, rank: int) -> slice:
        bounds = even_bounds(width, self.world)
        return slice(bounds[rank], bounds[rank + 1])

    def reply_width(self, model) -> int:
        return model.layers[0].maths().hidden

    def request(self, block, rank: int) -> Request:
        piece = pack_rows(*row_entries(block))
        return Request([piece] * self.world, [block.num_dst] * self.world)

    def serve(self, pieces: list, rank: int, width: int, plan_only: bool = False) -> Work:
        dst, lengths, _, entries, counts = unpack_rows(pieces)
        block = self.sampler.block(dst, entries, lengths)  # everyone's rows: one block, sources shared
        view = None if plan_only else BlockView(Sample(dst, [block]), self.op, self.seed, self.device)
        return Work(block.nodes, counts, width, {"view": view})

    def compute(self, model, view, work: Work, x: torch.Tensor, rank: int) -> torch.Tensor:
        width = model.layers[0].maths().in_features
        columns = self.feature_columns(width, rank)
        x = view.dropout_block(x, model.dropout, model.training, (width,), rows=work.load, columns=columns)
        return model.layers[0].maths().linear(view, x, columns)

    def combine(self, model, rows: torch.Tensor, request: Request, num_dst: int) -> torch.Tensor:
        # rows.shape[-1], not -1: a rank whose share of a small batch is empty has num_dst = 0
        z = rows.reshape(self.world, num_dst, rows.shape[-1]).sum(dim=0)
        return model.layers[0].maths().finish(z)


"""Dropout masks hashed from global row / entry ids: a mask depends only on the draw and the
global ids asked for, never on how ids are split among processes, and costs in proportion
to the ids asked for."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gnnmesh.graph import Adjacency
from gnnmesh import view as masks
from gnnmesh.view import GraphView, entries_mask, rows_mask

KEY = 987654321
PIECE = 1024  # rows per piece of the hash's loop at width 64 (pieces bound its temporaries)
ROWS = 3 * PIECE + 123


@pytest.fixture(params=[(), (1,), (8,), (37,), (8, 5)], ids=lambda s: "x".join(map(str, s)) or "scalar")
def shape(request):
    return request.param


def whole(shape, p=0.4, rows=ROWS):
    return rows_mask(range(rows), shape, p, KEY, "cpu")


def test_whole_mask_has_the_asked_shape_and_rate(shape):
    mask = whole(shape)
    assert mask.shape == (ROWS,) + shape and mask.dtype == torch.bool
    assert abs(mask.float().mean().item() - 0.6) < 0.02


def test_scattered_ids_in_any_order(shape):
    ids = torch.randperm(ROWS, generator=torch.Generator().manual_seed(0))[:500]
    assert torch.equal(rows_mask(ids, shape, 0.4, KEY, "cpu"), whole(shape)[ids])
    ascending = ids.sort().values
    assert torch.equal(rows_mask(ascending, shape, 0.4, KEY, "cpu"), whole(shape)[ascending])
    repeated = torch.cat([ids[:5], ids[:5]])
    assert torch.equal(rows_mask(repeated.numpy(), shape, 0.4, KEY, "cpu"), whole(shape)[repeated])


@pytest.mark.parametrize("start,stop", [(0, ROWS), (5, 17), (PIECE - 3, PIECE + 4),
                                        (PIECE, 2 * PIECE), (100, 3 * PIECE + 7), (ROWS - 1, ROWS)])
def test_contiguous_ranges(shape, start, stop):
    want = whole(shape)[start:stop]
    assert torch.equal(rows_mask(range(start, stop), shape, 0.4, KEY, "cpu"), want)
    assert torch.equal(rows_mask(torch.arange(start, stop), shape, 0.4, KEY, "cpu"), want)


def test_rows_beyond_a_graph_do_not_change_its_mask():
    """A row's values depend on its id alone, never on the number of rows."""
    assert torch.equal(whole((16,), rows=ROWS + 5000)[:ROWS], whole((16,)))


def test_columns_are_the_whole_width_cut():
    ids = torch.tensor([7, PIECE * 2 + 1, 3, PIECE])
    full = rows_mask(ids, (4, 10), 0.5, KEY, "cpu")
    assert torch.equal(rows_mask(ids, (4, 10), 0.5, KEY, "cpu", columns=slice(3, 8)), full[..., 3:8])
    assert torch.equal(rows_mask(range(5, 2000), (10,), 0.5, KEY, "cpu", columns=slice(6, 10)),
                       rows_mask(range(5, 2000), (10,), 0.5, KEY, "cpu")[:, 6:10])


@pytest.mark.parametrize("ranks", [2, 3, 7])
def test_independent_of_how_rows_are_split(ranks):
    """Contiguous or scattered, every split of the rows puts together the same mask."""
    want = whole((8, 5))
    owner = np.random.default_rng(ranks).integers(0, ranks, ROWS)
    scattered, contiguous = torch.empty_like(want), torch.empty_like(want)
    cuts = np.linspace(0, ROWS, ranks + 1).astype(int)
    for r in range(ranks):
        ids = torch.from_numpy(np.flatnonzero(owner == r))
        scattered[ids] = rows_mask(ids, (8, 5), 0.4, KEY, "cpu")
        contiguous[cuts[r]:cuts[r + 1]] = rows_mask(range(cuts[r], cuts[r + 1]), (8, 5), 0.4, KEY, "cpu")
    assert torch.equal(scattered, want) and torch.equal(contiguous, want)


def test_entries_have_masks_of_their_own():
    nnz = 2 * 65536 + 999
    full = entries_mask(range(nnz), (3,), 0.6, KEY, "cpu")
    assert full.shape == (nnz, 3) and abs(full.float().mean().item() - 0.4) < 0.01
    ids = torch.randint(0, nnz, (4000,), generator=torch.Generator().manual_seed(1))
    assert torch.equal(entries_mask(ids, (3,), 0.6, KEY, "cpu"), full[ids])
    span = range(65536 - 10, 2 * 65536 + 10)
    assert torch.equal(entries_mask(span, (3,), 0.6, KEY, "cpu"), full[span.start:span.stop])
    rows = rows_mask(range(nnz), (3,), 0.6, KEY, "cpu")
    assert (rows != full).float().mean() > 0.3  # not the rows' mask of the same ids


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_is_one_minus_p(p):
    mask = rows_mask(range(20_000), (16,), p, KEY, "cpu")
    assert abs(mask.float().mean().item() - (1 - p)) < 0.005


def test_draws_differ_by_key_and_row():
    a, b = whole((64,)), rows_mask(range(ROWS), (64,), 0.4, KEY + 1, "cpu")
    assert (a != b).float().mean() > 0.4
    assert (a[:PIECE] != a[PIECE:2 * PIECE]).float().mean() > 0.4
    assert (a[:, :32] != a[:, 32:]).float().mean() > 0.4  # values within a row differ too


def test_pieces_do_not_change_the_mask(monkeypatch):
    want = whole((37,))
    monkeypatch.setattr(masks, "_WORDS_PER_PIECE", 7)  # many small pieces, some not whole rows
    assert torch.equal(whole((37,)), want)


def test_values_are_uniform_16_bit():
    draws = masks._draw(KEY, np.arange(4096), 64).astype(np.int64)
    counts = np.bincount(draws.ravel() >> 12, minlength=16)  # 16 equal bins of the 16-bit range
    expected = draws.size / 16
    assert ((counts - expected) ** 2 / expected).sum() < 50  # chi-square, 15 degrees of freedom


def _view(nodes=50):
    rng = np.random.default_rng(0)
    dst, src = rng.integers(0, nodes, 300), rng.integers(0, nodes, 300)
    mat = sp.csr_matrix((np.ones(300, np.float32), (dst, src)), shape=(nodes, nodes))
    return GraphView(Adjacency.from_scipy(mat), seed=3)


def test_view_dropout_is_untouched_when_off():
    view = _view()
    x = torch.randn(50, 6)
    assert view.dropout(x, 0.0, True) is x and view.dropout(x, 0.5, False) is x
    values = torch.randn(view.operator("loop").nnz, 2)
    assert view.edge_dropout(values, 0.0, True) is values and view.edge_dropout(values, 0.5, False) is values


def test_view_masks_are_the_hashed_masks_of_every_row():
    view = _view()
    view.set_epoch(4)
    key = view._next_seed()  # the first draw of epoch 4
    nnz = view.operator("loop").nnz
    view.set_epoch(4)
    assert torch.equal(view.vertex_mask((6,), 0.5), rows_mask(range(50), (6,), 0.5, key, "cpu"))
    view.set_epoch(4)
    assert torch.equal(view.edge_mask("loop", (2,), 0.5), entries_mask(range(nnz), (2,), 0.5, key, "cpu"))

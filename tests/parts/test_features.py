"""Features mapped from a part file: read a block at a time, each block's pages given back."""

import numpy as np
import pytest

from gnnmesh.errors import GraphError
from gnnmesh.memory import current_rss_mib
from gnnmesh.parts.features import MappedFeatures


def _mapped(tmp_path, array) -> MappedFeatures:
    np.save(tmp_path / "x.npy", array)
    return MappedFeatures(np.load(tmp_path / "x.npy", mmap_mode="c"), "x.npy: ")


@pytest.mark.parametrize("rows,size", [(10, 3), (10, 9), (9, 4), (1, 5), (0, 4), (7, 7)])
def test_blocks_cover_every_row_once_and_none_is_a_single_row_unless_all_are(tmp_path, rows, size):
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    features = _mapped(tmp_path, x)
    got = list(features.blocks(size))
    assert [r.start for r, _ in got] == sorted({r.start for r, _ in got})
    assert np.array_equal(np.concatenate([b.numpy() for _, b in got]) if got else x[:0], x)
    assert all(r.stop - r.start > 1 for r, _ in got) or rows == 1


def test_a_block_read_leaves_no_page_resident(tmp_path):
    x = np.random.default_rng(0).random((65_536, 256), dtype=np.float32)  # 64 MiB
    features = _mapped(tmp_path, x)
    before = current_rss_mib()
    total = sum(float(block.sum()) for _, block in features.blocks(4096))
    streamed = current_rss_mib() - before
    assert abs(total - float(x.sum(dtype=np.float64))) < 1e-3 * abs(total)
    float(features.tensor.sum())  # the whole table at once: its pages stay
    whole = current_rss_mib() - before
    assert streamed < 16 and whole > 48, (streamed, whole)
    features.give_back()
    assert current_rss_mib() - before < 16


def test_a_value_that_is_not_finite_is_named_by_its_node(tmp_path, monkeypatch):
    x = np.zeros((100, 4), dtype=np.float32)
    x[61, 2] = np.inf
    monkeypatch.setattr("gnnmesh.parts.features.BLOCK_ROWS", 16)
    with pytest.raises(GraphError, match=r"x\.npy: field 'x' has a non-finite value inf at node 61, feature 2"):
        _mapped(tmp_path, x).check_finite()

"""The input features' row store: a file store's file goes with the store that made it."""

import numpy as np
import torch


def test_feature_file_goes_with_its_store(tmp_path):
    from gnnmesh.sampling.features import RowStore
    x = torch.arange(12.0).reshape(6, 2)
    rows = RowStore(x, store="file", store_dir=str(tmp_path / "features"))
    assert torch.equal(rows.read(np.array([5, 0, 5])), x[[5, 0, 5]])
    del rows  # no close: the owner's end deletes the file
    assert list(tmp_path.iterdir()) == []

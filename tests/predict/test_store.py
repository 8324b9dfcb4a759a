"""A prediction directory read back is checked like everything gnnmesh reads: a damaged or
foreign directory is one ConfigError naming the file."""

import json

import numpy as np
import pytest

from gnnmesh.errors import ConfigError
from gnnmesh.predict import read, write

INFO = {"output": "logits", "graph": {"dataset": "g", "nodes": 10, "key": "k"}}


@pytest.fixture
def written(tmp_path):
    out = tmp_path / "p"
    write(out, np.array([7, 2, 5]), np.arange(6, dtype=np.float32).reshape(3, 2), INFO)
    return out


def test_rows_come_back_in_id_order(written):
    got = read(written)
    assert np.array_equal(got.ids, [2, 5, 7]) and np.array_equal(got.values, [[2, 3], [4, 5], [0, 1]])
    assert len(got) == 3 and got.manifest["width"] == 2


def edit_manifest(directory, **changes):
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    path.write_text(json.dumps(manifest))


DAMAGE = {
    "not json": (lambda d: (d / "manifest.json").write_text("{"), "manifest.json: unreadable manifest"),
    "deeply nested": (lambda d: (d / "manifest.json").write_text("[" * 100000 + "]" * 100000),
                      "manifest.json: unreadable manifest"),
    "foreign": (lambda d: edit_manifest(d, kind="something"), "not a gnnmesh prediction manifest"),
    "newer": (lambda d: edit_manifest(d, version=2), "version 2; this gnnmesh reads version 1"),
    "rows": (lambda d: edit_manifest(d, rows=4), "'rows' is not the parts' rows"),
    "dtype": (lambda d: edit_manifest(d, dtype="object"), "dtype object is not numeric"),
    "escaping name": (lambda d: edit_manifest(d, shards=[{"rank": 0, "rows": 3, "ids": "../ids-00000.npy",
                                                          "values": "values-00000.npy"}]),
                      "not a plain file name"),
    "missing shard": (lambda d: (d / "values-00000.npy").unlink(), "values-00000.npy: missing"),
    "truncated shard": (lambda d: (d / "values-00000.npy").write_bytes((d / "values-00000.npy").read_bytes()[:90]),
                        "values-00000.npy: unreadable .npy file"),
    "wrong shape": (lambda d: np.save(d / "values-00000.npy", np.zeros((3, 3), dtype=np.float32)),
                    "holds float32 (3, 3), the manifest says float32 (3, 2)"),
    "pickled shard": (lambda d: np.save(d / "ids-00000.npy", np.array([object()] * 3), allow_pickle=True),
                      "ids-00000.npy: unreadable .npy file"),
    "id out of range": (lambda d: np.save(d / "ids-00000.npy", np.array([2, 5, 10])), "outside 0 to 9"),
    "id twice": (lambda d: np.save(d / "ids-00000.npy", np.array([2, 5, 5])), "node 5 is written by two parts"),
    "not a prediction": (lambda d: (d / "manifest.json").unlink(), "not a prediction directory"),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_damage_is_one_error_naming_the_file(written, case):
    damage, message = DAMAGE[case]
    damage(written)
    with pytest.raises(ConfigError, match=None) as err:
        read(written)
    assert message in str(err.value) and "\n" not in str(err.value)

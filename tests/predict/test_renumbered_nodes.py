"""Node selection under every renumbering: ``--nodes`` files and arrays hold original ids,
whatever renumbers the graph (``--reorder``, a partitioner, grid3d's permutations, parts),
and the ids written with their values are the single process's without reordering."""

import importlib.util

import numpy as np
import pytest

from gnnmesh import datasets
from gnnmesh.cli import main
from gnnmesh.config import Config
from gnnmesh.parts import open_parts
from gnnmesh.parallel.partition.parts import write_partition_parts
from gnnmesh.parallel.grid3d.parts import write_grid_parts
from gnnmesh.parallel.tensor.parts import write_tensor_parts
from gnnmesh.partition import partition
from gnnmesh.predict import read
from gnnmesh.train import Trainer
from gnnmesh.transforms import ORDERS, permute

from tests.dist import run_ranks_once
from tests.helpers import gnnmesh as run_cli

SBM = "sbm:nodes=120,classes=3,features=6,seed=4"
LISTED = [0, 5, 61, 119, 5]  # the first and last nodes, one repeated: written once
REORDERS = ("none",) + tuple(ORDERS)
SPLITS = ("all", "train", "val", "test")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("renumbered") / "c.pt"
    Trainer(Config.of(dataset=SBM, epochs=2, hidden=6, layers=2, checkpoint=str(path)), datasets.load(SBM)).fit()
    return path


def single(checkpoint, nodes) -> tuple:
    """The single process's ids and logits for ``nodes``, the graph as loaded."""
    return Trainer.from_checkpoint(checkpoint, datasets.load(SBM)).predict("logits", nodes=nodes)


def same(got: tuple, want: tuple, what) -> None:
    order = np.argsort(got[0], kind="stable")
    assert np.array_equal(got[0][order], want[0]), (what, got[0][order][:8], want[0][:8])
    assert np.abs(got[1][order] - want[1]).max(initial=0) <= 1e-5 * max(1.0, np.abs(want[1]).max()), what


def node_files(tmp_path) -> dict:
    text = tmp_path / "ids.txt"
    text.write_text("\n".join(map(str, LISTED)) + "\n")
    np.save(tmp_path / "ids.npy", np.asarray(LISTED[::-1]))
    return {"ids.txt": text, "ids.npy": tmp_path / "ids.npy"}


@pytest.mark.parametrize("reorder", REORDERS)
def test_the_command_selects_original_ids_under_every_reordering(checkpoint, tmp_path, capsys, reorder):
    selections = {**{s: s for s in SPLITS}, **node_files(tmp_path)}
    for name, nodes in selections.items():
        out = tmp_path / f"{reorder}-{name}"
        status = main(["predict", "--checkpoint", str(checkpoint), "--dataset", SBM, "--reorder", reorder,
                       "--nodes", str(nodes), "--out", str(out)])
        assert status == 0, capsys.readouterr().err
        got = read(out)
        want = single(checkpoint, np.asarray(LISTED) if name.startswith("ids") else nodes)
        same((got.ids, got.values), want, (reorder, name))
    capsys.readouterr()


@pytest.mark.parametrize("reorder", tuple(ORDERS))
def test_the_library_takes_and_gives_original_ids_of_a_renumbered_graph(checkpoint, reorder):
    graph = datasets.load(SBM)
    order = np.asarray(ORDERS[reorder](graph), dtype=np.int64)
    trainer = Trainer.from_checkpoint(checkpoint, permute(graph, order))
    for nodes in (*SPLITS, LISTED):
        same(trainer.predict("logits", nodes=nodes, original=order), single(checkpoint, nodes), (reorder, nodes))


# -- many ranks: every strategy and partitioner that places nodes, from a dataset or from parts

RENUMBERING = {  # strategy settings on 2 ranks
    "partition rp": {"strategy": "partition", "partitioner": "rp"},
    "partition contiguous": {"strategy": "partition", "partitioner": "contiguous"},
    "partition lp": {"strategy": "partition", "partitioner": "lp"},
    "partition gp": {"strategy": "partition", "partitioner": "gp"},
    "partition hp": {"strategy": "partition", "partitioner": "hp"},
    "grid3d permuted": {"strategy": "grid3d", "grid": "2,1,1"},
    "grid3d unpermuted": {"strategy": "grid3d", "grid": "1,2,1", "permute": False},
    "tensor": {"strategy": "tensor"},
    "offload": {"strategy": "offload", "partitioner": "rp", "device_memory": "17MiB"},
}


def _every_selection(rank, world, checkpoint, settings):
    """Per reordering and selection, this rank's ids and logits."""
    graph, out = datasets.load(SBM), {}
    for reorder in REORDERS:
        order = None if reorder == "none" else np.asarray(ORDERS[reorder](graph), dtype=np.int64)
        renumbered = graph if order is None else permute(graph, order)
        trainer = Trainer.from_checkpoint(checkpoint, renumbered, Config.of(**settings))
        for nodes in (*SPLITS, LISTED):
            out[reorder, str(nodes)] = trainer.predict("logits", nodes=nodes, original=order)
    return out


def gathered(results: list) -> dict:
    return {k: (np.concatenate([r[k][0] for r in results]), np.concatenate([r[k][1] for r in results]))
            for k in results[0]}


NEEDS = {"partition hp": "mtkahypar", "partition gp": "pymetis"}  # the partitioners' packages


def _installed(name: str) -> bool:
    return name not in NEEDS or importlib.util.find_spec(NEEDS[name]) is not None


def _every_setting(rank, world, checkpoint, names):
    """Every setting of ``names`` in one launch."""
    return {name: _every_selection(rank, world, checkpoint, RENUMBERING[name]) for name in names}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", RENUMBERING)
def test_every_strategy_selects_original_ids_under_every_reordering(checkpoint, name):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    names = tuple(n for n in RENUMBERING if _installed(n))
    got = gathered([r[name] for r in run_ranks_once(_every_setting, 2, str(checkpoint), names, timeout=540)])
    for (reorder, nodes), result in got.items():
        want = single(checkpoint, LISTED if nodes == str(LISTED) else nodes)
        same(result, want, (name, reorder, nodes))


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root, graph = tmp_path_factory.mktemp("renumbered-parts"), datasets.load(SBM)
    write_partition_parts(graph, partition(graph, 2, "rp", seed=1, cache=False), root / "partition", SBM)
    write_tensor_parts(graph, 2, root / "tensor", SBM)
    write_grid_parts(graph, {"x": 2, "y": 1, "z": 1}, root / "grid3d", SBM, layers=2)
    return root


PARTS = {"partition": None, "tensor": None, "grid3d": "2,1,1"}  # each kind of parts, its grid


def _parts_selections(rank, world, root, checkpoint):
    """Every kind of parts' selections in one launch."""
    out = {}
    for strategy, grid in PARTS.items():
        config = Config.of(strategy=strategy, **({"grid": grid} if grid else {}))
        trainer = Trainer.from_checkpoint(checkpoint, open_parts(f"{root}/{strategy}"), config)
        out[strategy] = {str(nodes): trainer.predict("logits", nodes=nodes) for nodes in (*SPLITS, LISTED)}
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy", sorted(PARTS))
def test_parts_select_original_ids(checkpoint, parts, strategy):
    results = run_ranks_once(_parts_selections, 2, str(parts), str(checkpoint), timeout=540)
    got = gathered([r[strategy] for r in results])
    for nodes, result in got.items():
        same(result, single(checkpoint, LISTED if nodes == str(LISTED) else nodes), (strategy, nodes))


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize("reorder", tuple(ORDERS))
def test_the_command_on_two_ranks_writes_the_listed_nodes(checkpoint, tmp_path, reorder):
    """The case as a user meets it: ``predict --nproc 2 --reorder R --nodes ids.txt``."""
    files = node_files(tmp_path)
    out = tmp_path / "p"
    result = run_cli("predict", "--checkpoint", checkpoint, "--dataset", SBM, "--reorder", reorder, "--nproc", "2",
                     "--strategy", "partition", "--partitioner", "rp", "--nodes", files["ids.txt"], "--out", out,
                     timeout=180)
    assert result.returncode == 0, result.stderr
    got = read(out)
    same((got.ids, got.values), single(checkpoint, LISTED), reorder)

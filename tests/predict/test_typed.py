"""Predictions of a typed graph are per node type: the target type by default, another type or
every type with --node-type, each row named by its type and type-local id; a --nodes file
lists type-local ids; several ranks, from the graph or its parts, write the single process's
rows to 1e-5; what does not apply is refused in one line."""

import numpy as np
import pytest
import torch

import gnnmesh
from gnnmesh import datasets
from gnnmesh.cli import main
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.parallel.partition.parts import write_partition_parts
from gnnmesh.partition import partition
from gnnmesh.predict import read
from gnnmesh.predict.run import Request, run_prediction
from gnnmesh.train import Trainer
from gnnmesh.train.trainer import input_features
from gnnmesh.view import GraphView

from tests.dist import run_ranks

IGBH = "igbh-synth:papers=60,authors=40,institutes=5,fos=8,features=4"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("typed")
    path = root / "c.pt"
    graph = datasets.load(IGBH)
    Trainer(Config.of(dataset=IGBH, model="rgcn", hidden=6, epochs=3, seed=1, checkpoint=str(path)), graph).fit()
    write_partition_parts(graph, partition(graph, 2, "rp", cache=False), root / "parts", IGBH)
    model, _ = gnnmesh.load(path)
    with torch.no_grad():
        logits = model(GraphView(graph.adj), input_features(graph)).numpy()
    return path, root / "parts", graph.meta["node_types"], logits


def predict(capsys, *args) -> tuple:
    status = main(["predict", *map(str, args)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_target_type_by_default_each_row_named_by_type_and_local_id(trained, tmp_path, capsys):
    path, _, types, logits = trained
    status, out, _ = predict(capsys, "--checkpoint", path, "--out", tmp_path / "p")
    assert status == 0 and "for all paper nodes" in out
    got = read(tmp_path / "p")
    papers = types.ids("paper")
    assert np.array_equal(got.ids, np.arange(papers.start, papers.stop))
    assert np.array_equal(got.extra["local_id"], np.arange(60))
    assert got.manifest["node_types"][int(got.extra["node_type"][0])] == "paper"
    assert set(got.extra["node_type"]) == {types.index("paper")} and got.manifest["node_type"] == ["paper"]
    np.testing.assert_allclose(got.values, logits[papers], rtol=0, atol=1e-5)


def test_another_type_and_a_file_of_its_local_ids(trained, tmp_path, capsys):
    path, _, types, logits = trained
    (tmp_path / "ids.txt").write_text("3\n0\n")
    status, out, _ = predict(capsys, "--checkpoint", path, "--out", tmp_path / "p", "--node-type", "author",
                             "--nodes", tmp_path / "ids.txt", "--output", "embeddings", "--format", "parquet")
    assert status == 0, out
    got = read(tmp_path / "p")
    start = types.ids("author").start
    assert np.array_equal(got.ids, [start, start + 3]) and np.array_equal(got.extra["local_id"], [0, 3])
    assert set(got.extra["node_type"]) == {types.index("author")}


def test_every_type_with_all(trained, tmp_path, capsys):
    path, _, types, logits = trained
    status, out, _ = predict(capsys, "--checkpoint", path, "--out", tmp_path / "p", "--node-type", "all")
    assert status == 0
    got = read(tmp_path / "p")
    assert np.array_equal(got.ids, np.arange(len(logits)))
    assert np.array_equal(got.ids, types.offsets[got.extra["node_type"]] + got.extra["local_id"])


@pytest.mark.parametrize("args,message", [
    (["--node-type", "venue"], "--node-type venue: the graph's node types are paper, author, institute, fos (or all)"),
    (["--node-type", "all", "--nodes", "IDS"], "ids are type-local; choose their node type with --node-type"),
    (["--node-type", "fos", "--nodes", "IDS"], "node id 9 is out of range (the graph has 8 nodes: 0 to 7) "
                                               "(ids of node type 'fos')"),
])
def test_what_does_not_apply_is_refused_in_one_line(trained, tmp_path, capsys, args, message):
    path = trained[0]
    (tmp_path / "ids.txt").write_text("9\n")
    args = [str(tmp_path / "ids.txt") if a == "IDS" else a for a in args]
    status, _, err = predict(capsys, "--checkpoint", path, "--out", tmp_path / "p", *args)
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "p").exists()


def test_node_type_is_refused_on_a_graph_without_types(tmp_path):
    graph = datasets.load("sbm:nodes=40,classes=3,features=4")
    Trainer(Config.of(epochs=1, hidden=4, checkpoint=str(tmp_path / "c.pt")), graph).fit()
    with pytest.raises(ConfigError, match="--node-type paper: the graph has no node types"):
        run_prediction(Config.of(dataset="sbm:nodes=40,classes=3,features=4"),
                       Request(str(tmp_path / "c.pt"), str(tmp_path / "p"), node_type="paper"))


def _rank(rank, world, path, out, parts):
    fields = {"parts": parts} if parts else {"dataset": IGBH, "strategy": "partition", "partitioner": "rp"}
    run_prediction(Config.of(nproc=world, **fields), Request(path, out, node_type="all"), quiet=True)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("source", ["graph", pytest.param("parts", marks=pytest.mark.slow)])
def test_two_ranks_write_the_single_process_rows(trained, tmp_path, source):
    path, parts, _, logits = trained
    alone = tmp_path / "alone"
    run_prediction(Config.of(dataset=IGBH), Request(str(path), str(alone), node_type="all"), quiet=True)
    run_ranks(_rank, 2, str(path), str(tmp_path / "two"), str(parts) if source == "parts" else None, timeout=180)
    want, got = read(alone), read(tmp_path / "two")
    assert len(got.manifest["shards"]) == 2
    assert np.array_equal(got.ids, want.ids)
    for name in ("node_type", "local_id"):
        assert np.array_equal(got.extra[name], want.extra[name])
    np.testing.assert_allclose(got.values, want.values, rtol=0, atol=1e-5)
